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
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gpufeed.arguments import at_least
from gpufeed.bench.harness import (
    add_loader_arguments,
    epoch_runner,
    markdown_table,
    measure,
    pool_rounds,
    results_line,
    round_ratios,
    rounds_text,
    run_isolated,
    spread,
    write_results,
)
from gpufeed.progress import counted, stage

BASELINE = "torch-pil"
#: Every pipeline the suite knows, and what it is (printed under the table).
PIPELINES = {
    "decode-only": "ceiling: full-image decode alone (the torch backend's decoder, same threads), no crop/resize/normalise",
    "torch-pil": "baseline: torchvision ImageFolder (PIL) + transforms.v2 + DataLoader, as users have it",
    "torch-cpu": "the kit's torch backend (DataLoader workers, torchvision.io decode, torch uint8 geometry)",
    "dali-cpu": "the kit's DALI backend in CPU-only mode (DALI ROI decode + torch resize)",
    "dali-gpu": "the kit's DALI backend on the GPU (hardware JPEG decode, resize + normalise on the GPU)",
    "torch-gpu": "the kit's torch backend with batches normalised on the GPU",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``gpufeed bench images``."""
    parser.add_argument("--data", help="ImageFolder tree (default: a generated, cached ImageNet-like set)")
    parser.add_argument("--images", type=at_least(1), default=1024, help="size of the generated default set")
    parser.add_argument("--mode", choices=("train", "val"), default="train", help="default: train")
    add_loader_arguments(parser, "pipeline")
    parser.add_argument("--only", nargs="*", choices=sorted(PIPELINES), metavar="PIPELINE",
                        help=f"run only these pipelines (the baseline always runs): {', '.join(PIPELINES)}")


def unavailable_pipelines(*, dali: bool, cuda: bool) -> dict[str, str]:
    """The pipelines of :data:`PIPELINES` this machine cannot run, and why.

    Args:
        dali: whether NVIDIA DALI is installed.
        cuda: whether a CUDA GPU is usable.

    Example:
        >>> unavailable_pipelines(dali=True, cuda=False)
        {'dali-gpu': 'no CUDA GPU', 'torch-gpu': 'no CUDA GPU'}
    """
    no_dali = 'DALI is not installed: pip install -e ".[dali-cpu]", or ".[cuda13]" for the GPU'
    out = {}
    if not dali:
        out["dali-cpu"] = no_dali
    if not (dali and cuda):
        out["dali-gpu"] = "no CUDA GPU" if dali else (no_dali if cuda else f"no CUDA GPU, and {no_dali}")
    if not cuda:
        out["torch-gpu"] = "no CUDA GPU"
    return out


def baseline_dataset(root: str | os.PathLike[str], *, train: bool, size: int) -> Any:
    """The baseline's dataset: torchvision ``ImageFolder`` (PIL decode) + transforms.v2.

    Train: ``RandomResizedCrop(size)`` + horizontal flip; val: resize the short side to
    ``size / 0.875`` + centre crop; then float32 in 0..1 and ImageNet normalisation: the
    output contract of the kit's loaders, written as users write it.

    Args:
        root: an ImageFolder tree.
        train: the train or the val transforms.
        size: output height and width.

    Returns:
        A ``torchvision.datasets.ImageFolder``.

    Example:
        >>> ds = baseline_dataset("data/train", train=True, size=224)  # doctest: +SKIP
    """
    import torch
    from torchvision import datasets
    from torchvision.transforms import v2

    from gpufeed.pipelines.options import IMAGENET_MEAN, IMAGENET_STD, default_val_resize

    geometric = (
        [v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip()] if train
        else [v2.Resize(default_val_resize(size), antialias=True), v2.CenterCrop(size)]
    )
    tf = v2.Compose([*geometric, v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
                     v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    return datasets.ImageFolder(os.fspath(root), transform=tf, loader=_pil_loader_naming_the_file)


def _pil_loader_naming_the_file(path: str) -> Any:
    """torchvision's PIL loader; a file it cannot decode is named (PIL's words do not)."""
    from torchvision.datasets.folder import pil_loader

    try:
        return pil_loader(path)
    except Exception as exc:  # noqa: BLE001 - any failure, with the file that caused it
        raise OSError(f"{path}: {exc}") from exc


def clean_image_tree(root: str | os.PathLike[str]) -> Any:
    """The samples of the ImageFolder tree ``root``, refused when a file fails the loaders'
    byte checks (empty, truncated, not an image): the suites time every pipeline on the
    same images, and the baseline (a plain ImageFolder) stops at the first bad file.

    Raises:
        ValueError: naming the bad files and why.
    """
    from gpufeed.datasets.image_bytes import sample_fault
    from gpufeed.pipelines.sources import scan_image_folder

    samples = scan_image_folder(root)
    bad = []
    for i, path in enumerate(samples.paths):
        reason = sample_fault(samples.read_or_reason(i), pixels=False)
        if reason is not None:
            bad.append(f"{path} ({reason})")
    if bad:
        raise ValueError(f"{root}: {len(bad)} of {len(samples)} image file(s) cannot be decoded: "
                         f"{'; '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}. The benchmark times every "
                         "pipeline on the same images and its baseline (ImageFolder) stops at a bad file: "
                         "remove them, or benchmark a clean copy (gpufeed convert leaves them out)")
    return samples


def baseline_loader(dataset: Any, *, train: bool, batch_size: int, num_workers: int, pin_memory: bool,
                    persistent_workers: bool = True, prefetch_factor: int | None = 4) -> Any:
    """The baseline's ``torch.utils.data.DataLoader`` over ``dataset`` (shuffled when training).

    ``persistent_workers`` and ``prefetch_factor`` apply only with workers (the
    DataLoader refuses them with ``num_workers=0``), so they are dropped there.

    Args:
        dataset: e.g. :func:`baseline_dataset`, or a ``Subset`` of it.
        train: shuffle or not.
        batch_size, num_workers, pin_memory, persistent_workers, prefetch_factor: as for
            the DataLoader.

    Returns:
        The DataLoader.
    """
    import torch

    extra = {"persistent_workers": persistent_workers, "prefetch_factor": prefetch_factor} if num_workers else {}
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=train, num_workers=num_workers,
                                       pin_memory=pin_memory, **extra)


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


def _contender(name: str, root: str, mode: str, batch_size: int, size: int, workers: int,
               device: str, repeats: int) -> dict[str, Any]:
    """Build pipeline ``name`` and time it (runs in a fresh process)."""
    import torch

    torch.set_num_threads(1)  # the work belongs to the workers/threads, as configured
    train = mode == "train"
    check: dict[str, Any] = {}
    if name == "decode-only":
        from gpufeed.datasets.image_bytes import read_bytes
        from gpufeed.pipelines.sources import scan_image_folder
        from gpufeed.pipelines.torch_loader import decode_rgb

        paths = scan_image_folder(root).paths
        pool = ThreadPoolExecutor(workers)  # the decoders release the GIL

        def decode(p: str) -> int:  # the torch backend's decoder: JPEG, PNG, BMP, TIFF, WebP
            return decode_rgb(read_bytes(p)).shape[0]

        def run() -> float:
            list(pool.map(decode, paths, chunksize=16))
            check.update(samples=len(paths))
            return len(paths)

        timing = measure(run, warmup=1, repeats=repeats)
        return {"name": name, **timing.as_dict(), "check": check}
    if name == BASELINE:
        loader = baseline_loader(baseline_dataset(root, train=train, size=size), train=train,
                                 batch_size=batch_size, num_workers=workers,
                                 pin_memory=device.startswith("cuda"))
        timing = measure(epoch_runner(lambda: loader, device), warmup=1, repeats=repeats)
        return {"name": name, **timing.as_dict(), "check": _checked_epoch(loader, device)}
    from gpufeed.pipelines import classification_loader

    backend, where = name.split("-")
    loader = classification_loader(
        root, train=train, batch_size=batch_size, size=size, backend=backend,
        device="cuda" if where == "gpu" else "cpu", num_workers=workers,
    )
    timing = measure(epoch_runner(lambda: loader, device), warmup=1, repeats=repeats)
    check = _checked_epoch(loader, device)
    check["skipped"] = len(loader.skipped)
    return {"name": name, **timing.as_dict(), "check": check}


def _headline(rows: list[dict[str, Any]]) -> str:
    """The run's result in one line: the fastest of the kit's pipelines (a passed output
    check) over the baseline, or "" when either is missing."""
    kit = [r for r in rows if r["name"] not in (BASELINE, "decode-only") and r.get("ratio") and r["verdict"] == "ok"]
    if not kit:
        return ""
    best = max(kit, key=lambda r: r["ratio"])
    return (f"**Fastest: `{best['name']}` at {best['ratio']:.2f}× `{BASELINE}`** "
            f"({best['rate']:.0f} against {best['rate'] / best['ratio']:.0f} images/s, the same cores).")


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

    unavailable = unavailable_pipelines(dali=dali_installed(), cuda=cuda_available())
    refused = [n for n in dict.fromkeys(args.only or []) if n in unavailable]
    if refused:  # before generating or scanning anything: a baseline-only run is no answer
        raise ValueError("; ".join(f"--only {n}: cannot run on this machine ({unavailable[n]})" for n in refused)
                         + ": leave it out of --only (the baseline always runs, and alone it compares nothing)")
    # The device before the data: `--device cuda` without a GPU is refused before the default
    # set is generated (minutes for 1,024 images on two cores) or a tree is scanned.
    device = str(resolve_device(args.device))
    root = Path(args.data) if args.data else default_image_dataset(args.images)
    samples = clean_image_tree(root)
    files = len(samples)
    sizes = [os.path.getsize(p) for p in samples.paths]
    workers = args.workers or usable_cpus()
    names = [n for n in PIPELINES if n not in unavailable]
    if args.only:
        names = [n for n in names if n in args.only or n == BASELINE]
    # What this machine could not run: in the report and the JSON, so that a comparison with a
    # run that had them says why they are missing rather than that they failed.
    skipped = {} if args.only else unavailable
    each = f"{counted(workers, 'worker/thread', 'workers/threads')} each"
    print(f"gpufeed bench images: {counted(files, 'file')} ({sum(sizes) / files / 1024:.0f} KiB mean) in "
          f"{counted(len(samples.classes), 'class', 'classes')} at {root}; {args.mode}, batch {args.batch_size}, "
          f"{args.size}px, {each}, output float32 NCHW on {device}")
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for turn in range(1, args.rounds + 1):  # pipelines take turns, round after round
        for name in names:
            stage(f"[images] running {name} (round {turn} of {args.rounds}) ...")
            row = run_isolated(_contender, name, str(root), args.mode, args.batch_size, args.size, workers,
                               device, args.repeats)
            row.setdefault("name", name)
            rounds[name].append(row)
            if "error" in row:
                stage(f"[images] {name} failed: {row['error'].splitlines()[0]}")
    rows = [pool_rounds(rounds[name]) for name in names]
    base = next((r for r in rows if r["name"] == BASELINE and "rate" in r), None)
    ceiling = next((r for r in rows if r["name"] == "decode-only" and "rate" in r), None)
    for r in rows:
        if "rate" not in r:
            r["verdict"] = "failed"
            continue
        r["ratio"] = r["rate"] / base["rate"] if base else None
        r["ratio_rounds"] = spread(round_ratios(r, base)) if base else None
        r["of_ceiling"] = r["rate"] / ceiling["rate"] if ceiling else None
        r["spread"] = f"{r['rate_min']:.0f}–{r['rate_max']:.0f}"
        r["verdict"] = _verify(r, files, len(samples.classes), args.size)
    table = markdown_table(rows, [
        ("name", "pipeline"), ("rate", "images/s (median)"), ("spread", "min–max"),
        ("ratio", f"× {BASELINE}"), ("ratio_rounds", "× per round"), ("of_ceiling", "× decode-only"),
        ("verdict", "output check"),
    ])
    legend = "\n".join(f"- `{r['name']}`: {PIPELINES[r['name']]}" for r in rows)
    key = (f"Ratios are images/s over another pipeline's (above 1: faster): `× {BASELINE}` over the baseline's, "
           "`× per round` the same ratio's range over the rounds, `× decode-only` over the ceiling's "
           "(decode-only is the ceiling, not a contender).")
    table = f"{table}\n\n{key}\n\n{legend}"
    if headline := _headline(rows):
        table = f"{headline}\n\n{table}"
    if skipped:
        table += "\n\nNot run on this machine: " + "; ".join(f"`{n}` ({why})" for n, why in skipped.items())
    print(table)
    setup = {
        "data": str(root), "files": files, "classes": len(samples.classes),
        "mean_file_kib": sum(sizes) / files / 1024, "mode": args.mode, "batch_size": args.batch_size,
        "size": args.size, "workers": workers, "device": device, "repeats": args.repeats, "rounds": args.rounds,
        "baseline": f"{BASELINE}: torchvision ImageFolder (PIL) + transforms.v2 + DataLoader("
                    f"num_workers={workers}, persistent_workers, prefetch_factor=4, pin_memory on CUDA)",
    }
    summary = (
        f"{args.mode}, {counted(files, 'image')} ({setup['mean_file_kib']:.0f} KiB mean), batch {args.batch_size}, "
        f"{args.size}px, {each}, float32 normalised NCHW on {device}; "
        f"{rounds_text(args.rounds, args.repeats)}.\n\n{table}"
    )
    json_path, md_path = write_results(f"images-{args.mode}", {"setup": setup, "rows": rows, "skipped": skipped},
                                       summary, args.out)
    print(results_line(json_path))  # the JSON, the Markdown and the figures
    return 0 if all(r["verdict"] == "ok" for r in rows) else 1
