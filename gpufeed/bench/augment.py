"""Batch augmentation: the kit's stage against kornia eager and torchvision.transforms.v2.

Every contender runs in its own process on the same batches (uint8 NCHW, generated from
one seed and already on the target device), with the same torch thread count and the same
output contract: float32 normalised (B, 3, size, size) on the device. The recipe is the
ImageNet training one: random resized crop, horizontal flip, colour jitter (0.4, 0.4, 0.4,
0.1), normalise. Contenders:

- ``torchvision-per-sample``: the baseline: transforms.v2 applied image by image in a
  loop (one random draw per image, what per-sample randomness costs today);
- ``torchvision-per-sample-threads``: the same loop tuned for the cores: a pool of one
  thread per core, one intra-op thread each (like DataLoader workers, without processes);
- ``torchvision-per-batch``: transforms.v2 applied to the whole batch (one draw per batch,
  so every image gets the same crop and colours: fast, but not the same augmentation);
- ``kornia-eager``: kornia ``AugmentationSequential`` with the same ops (per-sample);
- ``gpufeed``: :class:`gpufeed.gpu_transforms.augment.GpuAugment` (per-sample);
- ``floor``: only the uint8 -> float conversion and normalisation every contender must
  do, the bound on how fast any augmentation of these batches can be.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from gpufeed.arguments import at_least, device_name
from gpufeed.bench.harness import (
    add_out_argument,
    markdown_table,
    measure,
    results_line,
    run_isolated,
    write_results,
)
from gpufeed.machine import peak_rss_bytes, usable_cpus
from gpufeed.progress import counted, stage

BASELINE = "torchvision-per-sample"
KORNIA = "kornia-eager"
THREADED = "torchvision-per-sample-threads"
CONTENDERS = ("floor", "gpufeed", KORNIA, "torchvision-per-batch", BASELINE, THREADED)
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
JITTER = (0.4, 0.4, 0.4, 0.1)
#: What a contender's ``peak_mem_mb`` is, by device (also in the report, under the table).
CUDA_MEMORY = ("peak CUDA memory allocated during the timed passes above what was allocated when they began "
               "(the input batches, the contender's state): torch.cuda.max_memory_allocated")
CPU_MEMORY = ("peak resident memory (RSS) of the contender's process during the timed passes: the whole "
              "process (Python, torch, the input batches, the contender's working memory)")
CPU_MEMORY_SINCE_START = ("peak resident memory (RSS) of the contender's process since it started (its "
                          "warm-up and the input's generation included): the whole process")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``gpufeed bench augment``."""
    parser.add_argument("--device", default="auto", type=device_name, help="auto | cpu | cuda")
    parser.add_argument("--batch-size", type=at_least(1), default=None, help="default: 64 on CPU, 256 on CUDA")
    parser.add_argument("--size", type=at_least(1), default=224, help="output height and width")
    parser.add_argument("--input-size", type=at_least(1), default=None, help="input height and width (default: --size)")
    parser.add_argument("--batches", type=at_least(1), default=2, help="distinct batches per timed pass")
    parser.add_argument("--repeats", type=at_least(1), default=5, help="timed passes per contender")
    parser.add_argument("--threads", type=at_least(1), default=None, help="torch threads each (default: all cores)")
    parser.add_argument("--only", nargs="*", choices=CONTENDERS, help="run only these contenders")
    add_out_argument(parser)


def make_batches(count: int, batch_size: int, size: int, device: str) -> list:
    """The shared input: ``count`` uint8 (B, 3, size, size) batches from a fixed seed.

    Smooth colour fields plus grain, so colour ops see real hues (speed does not depend on
    content, the correctness checks do).
    """
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(1234)
    out = []
    for _ in range(count):
        coarse = torch.rand(batch_size, 3, 8, 8, generator=g)
        smooth = F.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=False)
        grain = torch.rand(batch_size, 3, size, size, generator=g) * 0.1
        out.append(((smooth * 0.9 + grain) * 255).round().clamp(0, 255).to(torch.uint8).to(device))
    return out


def _build(name: str, size: int, device: str, threads: int) -> Callable:
    """The batch -> float32 normalised batch function of contender ``name``."""
    import torch

    if name == "gpufeed":
        from gpufeed.gpu_transforms.augment import (
            ColorJitter,
            GpuAugment,
            Normalize,
            RandomHorizontalFlip,
            RandomResizedCrop,
        )

        return GpuAugment([RandomResizedCrop(size), RandomHorizontalFlip(), ColorJitter(*JITTER),
                           Normalize(MEAN, STD)], seed=0)
    if name == KORNIA:
        import kornia.augmentation as K

        # mean/std made on the device: kornia keeps them in flags, which .to() does not move,
        # and copies CPU ones to the batch's device on every call, each copy from pageable
        # memory waiting for the GPU's queue to drain (a sync the contender should not pay).
        aug = K.AugmentationSequential(
            K.RandomResizedCrop((size, size)), K.RandomHorizontalFlip(), K.ColorJitter(*JITTER, p=1.0),
            K.Normalize(mean=torch.tensor(MEAN, device=device), std=torch.tensor(STD, device=device)),
        ).to(device)
        return lambda x: aug(x.float().div_(255))  # kornia takes float in [0, 1]
    if name == "floor":
        mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
        std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
        return lambda x: (x.float().div_(255) - mean) / std
    import torchvision.transforms.v2 as T

    tv = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ColorJitter(*JITTER),
                    T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])
    if name == "torchvision-per-batch":
        return tv
    if name == THREADED:
        from concurrent.futures import ThreadPoolExecutor

        # Small per-image ops gain nothing from intra-op threads and lose to their
        # barriers on a busy machine; one image per thread uses the cores instead.
        torch.set_num_threads(1)
        pool = ThreadPoolExecutor(threads)
        return lambda x: torch.stack(list(pool.map(tv, x)))
    return lambda x: torch.stack([tv(img) for img in x])


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _reset_peak_rss() -> bool:
    """Start this process's peak-RSS record (``VmHWM``) afresh from its current RSS (Linux:
    ``/proc/self/clear_refs``); False where that cannot be done."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _contender(name: str, batch_size: int, size: int, input_size: int, batches: int, device: str,
               repeats: int, threads: int) -> dict[str, Any]:
    """Time contender ``name`` on the shared batches (runs in a fresh process)."""
    import torch

    torch.set_num_threads(threads)
    data = make_batches(batches, batch_size, input_size, device)
    fn = _build(name, size, device, threads)
    cuda = device.startswith("cuda")

    def run() -> float:
        for x in data:
            fn(x)
        return batches * batch_size

    run()  # build caches before the memory baseline
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        memory = CUDA_MEMORY
    else:
        base = _rss_mb()
        # The peak during timing: the high-water mark restarted here, else the one since the
        # process started (its warm-up and the batches' generation included).
        memory = CPU_MEMORY if _reset_peak_rss() else CPU_MEMORY_SINCE_START
    timing = measure(run, warmup=0, repeats=repeats)
    if cuda:
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:  # the process's own high-water mark (not its parent's: see peak_rss_bytes)
        peak = peak_rss_bytes() / 2**20
    # Correctness after timing: the output contract, finite values in the normalised range.
    out = fn(data[0])
    lo = min((0 - m) / s for m, s in zip(MEAN, STD, strict=True)) - 1e-3
    hi = max((1 - m) / s for m, s in zip(MEAN, STD, strict=True)) + 1e-3
    problems = []
    if tuple(out.shape) != (batch_size, 3, size, size):
        problems.append(f"shape {tuple(out.shape)}")
    if out.dtype != torch.float32 or out.device.type != torch.device(device).type:
        problems.append(f"{out.dtype} on {out.device}")
    if not torch.isfinite(out).all() or out.min() < lo or out.max() > hi:
        problems.append(f"values in [{float(out.min()):.3f}, {float(out.max()):.3f}]")
    per_sample = bool((out.flatten(1).std(0) > 0).any()) if batch_size > 1 else None
    return {
        **timing.as_dict(), "peak_mem_mb": peak, "memory": memory, "rss_at_start_mb": None if cuda else base,
        "check": "ok" if not problems else "; ".join(problems), "samples_differ": per_sample,
        "input_checksum": int(sum(int(x.sum()) for x in data)), "threads": threads,
    }


def run(args: argparse.Namespace) -> int:
    """Run the suite, print the Markdown summary and write JSON + Markdown results."""
    from gpufeed.backends import resolve_device

    device = str(resolve_device(args.device))
    cuda = device.startswith("cuda")
    batch_size = args.batch_size or (256 if cuda else 64)
    input_size = args.input_size or args.size
    threads = args.threads or usable_cpus()
    # The threaded loop tunes the per-sample baseline for CPU cores; on a GPU it only adds
    # host threads racing for one device, so it runs there only when asked for.
    default = [n for n in CONTENDERS if n != THREADED or not device.startswith("cuda")]
    names = [n for n in CONTENDERS if n in args.only] if args.only else default
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        stage(f"[augment] running {name} ...")
        results[name] = run_isolated(_contender, name, batch_size, args.size, input_size, args.batches, device,
                                     args.repeats, threads, timeout=600)
        r = results[name]
        stage(f"[augment] {name}: {r['rate']:,.1f} images/s" if "rate" in r
              else f"[augment] {name} failed: {r['error'][:300]}")
    checksums = {r["input_checksum"] for r in results.values() if "input_checksum" in r}
    rows = []
    for name in names:
        r = results[name]
        row = {"name": name, **{k: r.get(k) for k in ("rate", "rate_min", "rate_max", "peak_mem_mb", "check")}}
        if "error" in r:
            row["check"] = "error: " + r["error"].splitlines()[0][:80]
        for ref, key in ((BASELINE, "vs_per_sample"), (THREADED, "vs_threads"), (KORNIA, "vs_kornia")):
            if "rate" in r and "rate" in results.get(ref, {}):
                row[key] = r["rate"] / results[ref]["rate"]
        rows.append(row)
    table = markdown_table(rows, [
        ("name", "contender"), ("rate", "images/s (median)"), ("rate_min", "min"), ("rate_max", "max"),
        ("vs_per_sample", "× tv per-sample"), ("vs_threads", "× tv per-sample threads"),
        ("vs_kornia", "× kornia eager"),
        ("peak_mem_mb", "peak CUDA MiB above the start" if cuda else "peak RSS MiB (whole process)"),
        ("check", "check"),
    ])
    ours = next((r for r in rows if r["name"] == "gpufeed"), {})

    def measured(key: str, against: str) -> str | None:
        ratio = ours.get(key)
        return f"{ratio:.2f}× {against}" if ratio else None

    if device.startswith("cuda"):
        parts = [measured("vs_kornia", "kornia eager")]
        goal = "target on GPU: ≥ 5× kornia eager at batch 256"
    else:
        # Judged against the loop tuned for the cores (a thread per core), the fair baseline;
        # the one-thread loop, the wording, beside it.
        tuned = ours.get("vs_threads")
        parts = [measured("vs_threads", "the loop on a thread per core") and
                 f"{measured('vs_threads', 'the loop on a thread per core')} ({'met' if tuned >= 2 else 'missed'})",
                 measured("vs_per_sample", "the one-thread loop")]
        goal = "target on CPU: ≥ 2× torchvision per-sample at batch 64"
    parts = [p for p in parts if p]
    # A contender left out (--only) has no ratio: said so, not "0.00×".
    target = (f"{goal} — measured {', '.join(parts)}, at batch {batch_size}" if parts
              else f"{goal} — not measured in this run (the stage or its baseline did not run)")
    if cuda:
        memory = f"Peak memory: the {CUDA_MEMORY}."
    else:
        input_mib = args.batches * batch_size * 3 * input_size * input_size / 2**20
        measured = {r["memory"] for r in results.values() if r.get("memory")}
        what = CPU_MEMORY_SINCE_START if CPU_MEMORY_SINCE_START in measured else CPU_MEMORY
        memory = (f"Peak memory: the {what}; the input batches are {input_mib:,.1f} MiB of it. Compare "
                  "contenders by their difference: each process also holds Python and torch, and kornia's "
                  "contender the kornia import.")
    summary = (
        f"Recipe: RandomResizedCrop({args.size}) + HorizontalFlip + ColorJitter{JITTER} + Normalize, "
        f"uint8 input {input_size}², batch {batch_size} × {counted(args.batches, 'batch', 'batches')} per pass, "
        f"{counted(args.repeats, 'timed pass', 'timed passes')} after a warm-up, device {device}, "
        f"{counted(threads, 'torch thread')} each; every contender in "
        f"its own process on the same batches (input checksums equal: {len(checksums) == 1}).\n\n{table}\n\n"
        f"{target}. `torchvision-per-batch` draws one crop/colour per batch (not per-sample augmentation); "
        f"`floor` is the conversion + normalisation alone. {memory}"
    )
    payload = {
        "device": device, "batch_size": batch_size, "size": args.size, "input_size": input_size,
        "batches": args.batches, "repeats": args.repeats, "threads": threads, "results": results,
        "summary_rows": rows,
    }
    json_path, md_path = write_results("augment", payload, summary, args.out)
    print(summary)
    print(results_line(json_path))  # the JSON, the Markdown and the figures
    return 0 if all("error" not in r for r in results.values()) else 1
