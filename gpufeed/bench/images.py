"""Image loaders: the kit's DALI (CPU, GPU) and torch backends against DataLoader + PIL + transforms.v2.

Every contender runs in its own process, over the same files, with the same cores (N
DataLoader workers or N DALI threads) and the same output contract: float32 normalised
NCHW batches on the target device, ``size`` x ``size``. The decode-only row is the
ceiling for full-image CPU decoding with those cores (a train pipeline that decodes only
the crop's region can pass it).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gpufeed.bench.harness import markdown_table, measure, run_isolated, write_results

BASELINE = "torch-pil"
#: Every pipeline the suite knows, and what it is (printed under the table).
PIPELINES = {
    "decode-only": "ceiling: full-image decode alone (torchvision.io, same threads), no crop/resize/normalise",
    "torch-pil": "baseline: torchvision ImageFolder (PIL) + transforms.v2 + DataLoader, as users have it",
    "torch-cpu": "the kit's torch backend (DataLoader workers, torchvision.io decode, torch uint8 geometry)",
    "dali-cpu": "the kit's DALI backend in CPU-only mode (DALI ROI decode + torch resize)",
    "dali-gpu": "the kit's DALI backend on the GPU (hardware JPEG decode, resize + normalise on the GPU)",
    "torch-gpu": "the kit's torch backend with batches normalised on the GPU",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", help="ImageFolder tree (default: a generated, cached ImageNet-like set)")
    parser.add_argument("--images", type=int, default=1024, help="size of the generated default set")
    parser.add_argument("--mode", choices=("train", "val"), default="train", help="default: train")
    parser.add_argument("--batch-size", type=int, default=64, help="default: 64")
    parser.add_argument("--size", type=int, default=224, help="output size (default: 224)")
    parser.add_argument("--workers", type=int, default=None, help="workers/threads each (default: all cores)")
    parser.add_argument("--repeats", type=int, default=3, help="timed epochs per pipeline (default: 3)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    parser.add_argument("--only", nargs="*", choices=sorted(PIPELINES), metavar="PIPELINE",
                        help=f"run only these pipelines (the baseline always runs): {', '.join(PIPELINES)}")
    parser.add_argument("--out", default="bench/results", help="results folder")


def _epoch_runner(batches: Callable[[], Iterable], device: str) -> Callable[[], float]:
    """One timed epoch: pull every batch onto ``device`` and count the samples."""
    import torch

    target = torch.device(device)

    def run() -> float:
        n = 0
        for images, _ in batches():
            images = images.to(target, non_blocking=True)
            n += images.shape[0]
        return n

    return run


def _checked_epoch(batches: Iterable, device: str) -> dict[str, Any]:
    """One more epoch after timing, untimed, recording what came out for the checks."""
    import torch

    n, labels, lo, hi, shapes, dtypes = 0, set(), float("inf"), float("-inf"), set(), set()
    for images, y in batches:
        images = images.to(torch.device(device))
        n += len(y)
        labels.update(y.tolist())
        lo, hi = min(lo, float(images.min())), max(hi, float(images.max()))
        shapes.add(tuple(images.shape[1:]))
        dtypes.add(str(images.dtype))
    return {"samples": n, "labels": sorted(labels), "min": lo, "max": hi, "shapes": sorted(shapes),
            "dtypes": sorted(dtypes), "device": device}


def pil_baseline_loader(root: str | os.PathLike[str], *, train: bool, batch_size: int, size: int,
                        workers: int, device: str) -> Any:
    """The baseline users have today: torchvision ``ImageFolder`` (PIL) + transforms.v2 + DataLoader.

    Tuned fairly: ``workers`` worker processes (persistent, ``prefetch_factor=4``), pinned
    memory when ``device`` is CUDA. Batches are float32 normalised NCHW on the CPU; the
    consumer moves them to ``device``.

    Args:
        root: ImageFolder tree ``root/<class>/<image>``.
        train: random-resized-crop + flip (and shuffling), else resize to ``size / 0.875`` +
            centre crop.
        batch_size: samples per batch.
        size: output height and width.
        workers: DataLoader worker processes (0: load in the main process).
        device: where the batches will go (``"cpu"``, ``"cuda"``, ...): pins memory for CUDA.

    Returns:
        A ``torch.utils.data.DataLoader`` over ``torchvision.datasets.ImageFolder(root)``.

    Example:
        >>> loader = pil_baseline_loader("data/train", train=True, batch_size=64, size=224,
        ...                              workers=8, device="cuda")  # doctest: +SKIP
    """
    import torch
    from torchvision import datasets
    from torchvision.transforms import v2

    from gpufeed.pipelines.options import IMAGENET_MEAN, IMAGENET_STD

    geometric = (
        [v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip()] if train
        else [v2.Resize(round(size / 0.875), antialias=True), v2.CenterCrop(size)]
    )
    tf = v2.Compose([*geometric, v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
                     v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    return torch.utils.data.DataLoader(
        datasets.ImageFolder(root, transform=tf), batch_size=batch_size, shuffle=train,
        num_workers=workers, pin_memory=device.startswith("cuda"), persistent_workers=workers > 0,
        prefetch_factor=4 if workers > 0 else None,
    )


def _contender(name: str, root: str, mode: str, batch_size: int, size: int, workers: int,
               device: str, repeats: int) -> dict[str, Any]:
    """Build pipeline ``name`` and time it (runs in a fresh process)."""
    import torch

    torch.set_num_threads(1)  # the work belongs to the workers/threads, as configured
    train = mode == "train"
    check: dict[str, Any] = {}
    if name == "decode-only":
        import torchvision.io as tvio

        from gpufeed.pipelines.sources import read_bytes, scan_image_folder

        paths = scan_image_folder(root).paths
        pool = ThreadPoolExecutor(workers)  # decode_image releases the GIL

        def decode(p: str) -> int:
            return tvio.decode_image(torch.from_numpy(read_bytes(p)), mode=tvio.ImageReadMode.RGB).shape[0]

        def run() -> float:
            list(pool.map(decode, paths, chunksize=16))
            check.update(samples=len(paths))
            return len(paths)

        timing = measure(run, warmup=1, repeats=repeats)
        return {"name": name, **timing.as_dict(), "check": check}
    if name == BASELINE:
        loader = pil_baseline_loader(root, train=train, batch_size=batch_size, size=size,
                                     workers=workers, device=device)
        timing = measure(_epoch_runner(lambda: loader, device), warmup=1, repeats=repeats)
        return {"name": name, **timing.as_dict(), "check": _checked_epoch(loader, device)}
    from gpufeed.pipelines import classification_loader

    backend, where = name.split("-")
    loader = classification_loader(
        root, train=train, batch_size=batch_size, size=size, backend=backend,
        device="cuda" if where == "gpu" else "cpu", num_workers=workers,
    )
    timing = measure(_epoch_runner(lambda: loader, device), warmup=1, repeats=repeats)
    check = _checked_epoch(loader, device)
    check["skipped"] = len(loader.skipped)
    return {"name": name, **timing.as_dict(), "check": check}


def _verify(row: dict[str, Any], files: int, classes: int, size: int) -> str:
    """'ok' or what is wrong with a contender's output."""
    c = row.get("check", {})
    if c.get("samples") != files:
        return f"yielded {c.get('samples')} of {files} samples"
    if "labels" not in c:
        return "ok"
    if c["labels"] != list(range(classes)):
        return f"labels {c['labels']} != 0..{classes - 1}"
    if c["shapes"] != [(3, size, size)] or c["dtypes"] != ["torch.float32"]:
        return f"output {c['shapes']} {c['dtypes']}, expected (3, {size}, {size}) float32"
    if not (c["min"] >= -2.2 and c["max"] <= 2.7):
        return f"values in [{c['min']:.2f}, {c['max']:.2f}], outside ImageNet-normalised range"
    return "ok"


def run(args: argparse.Namespace) -> int:
    """Run the suite, print the side-by-side table, write JSON + Markdown results."""
    from gpufeed.backends import dali_installed, resolve_device
    from gpufeed.datasets.images import default_image_dataset
    from gpufeed.machine import cuda_available, usable_cpus
    from gpufeed.pipelines.sources import scan_image_folder

    root = Path(args.data) if args.data else default_image_dataset(args.images)
    samples = scan_image_folder(root)
    files = len(samples)
    sizes = [os.path.getsize(p) for p in samples.paths]
    device = str(resolve_device(args.device))
    workers = args.workers or usable_cpus()
    names = ["decode-only", BASELINE, "torch-cpu"]
    if dali_installed():
        names.append("dali-cpu")
        if cuda_available():
            names.append("dali-gpu")
    if cuda_available():
        names.append("torch-gpu")
    if args.only:
        names = [n for n in names if n in args.only or n == BASELINE]
    print(f"gpufeed bench images: {files} files ({sum(sizes) / files / 1024:.0f} KiB mean) in "
          f"{len(samples.classes)} classes at {root}; {args.mode}, batch {args.batch_size}, "
          f"{args.size}px, {workers} workers/threads each, output float32 NCHW on {device}")
    rows = []
    for name in names:
        print(f"  running {name} ...", flush=True)
        row = run_isolated(_contender, name, str(root), args.mode, args.batch_size, args.size, workers,
                           device, args.repeats)
        row.setdefault("name", name)
        rows.append(row)
        if "error" in row:
            print(f"    failed: {row['error'].splitlines()[0]}")
    base = next((r for r in rows if r["name"] == BASELINE and "rate" in r), None)
    ceiling = next((r for r in rows if r["name"] == "decode-only" and "rate" in r), None)
    for r in rows:
        if "rate" not in r:
            r["verdict"] = "failed"
            continue
        r["ratio"] = r["rate"] / base["rate"] if base else None
        r["of_ceiling"] = r["rate"] / ceiling["rate"] if ceiling else None
        r["spread"] = f"{r['rate_min']:.0f}–{r['rate_max']:.0f}"
        r["verdict"] = _verify(r, files, len(samples.classes), args.size)
    table = markdown_table(rows, [
        ("name", "pipeline"), ("rate", "images/s (median)"), ("spread", "min–max"),
        ("ratio", f"× {BASELINE}"), ("of_ceiling", "× decode-only"), ("verdict", "output check"),
    ])
    legend = "\n".join(f"- `{r['name']}`: {PIPELINES[r['name']]}" for r in rows)
    table = f"{table}\n\n{legend}"
    print(table)
    setup = {
        "data": str(root), "files": files, "classes": len(samples.classes),
        "mean_file_kib": sum(sizes) / files / 1024, "mode": args.mode, "batch_size": args.batch_size,
        "size": args.size, "workers": workers, "device": device, "repeats": args.repeats,
        "baseline": f"{BASELINE}: torchvision ImageFolder (PIL) + transforms.v2 + DataLoader("
                    f"num_workers={workers}, persistent_workers, prefetch_factor=4, pin_memory on CUDA)",
    }
    summary = (
        f"{args.mode}, {files} JPEGs ({setup['mean_file_kib']:.0f} KiB mean), batch {args.batch_size}, "
        f"{args.size}px, {workers} workers/threads each, float32 normalised NCHW on {device}.\n\n{table}"
    )
    json_path, md_path = write_results(f"images-{args.mode}", {"setup": setup, "rows": rows}, summary, args.out)
    print(f"results: {json_path} and {md_path.name}")
    return 0 if all(r["verdict"] == "ok" for r in rows) else 1
