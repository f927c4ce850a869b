"""Input stall per loader: the same training loop fed by DataLoader + PIL and by each of the kit's loaders, under the stall meter.

``gpufeed bench stalls``. Where ``gpufeed stall`` asks "is *my* training waiting, and what would fix it", this suite
draws the answer for every loader side by side: the share of each training step's time
spent waiting for the next batch, and the training rate it gives, for DataLoader + PIL +
transforms.v2 (the baseline) and the kit's loaders, on one model and one dataset. Each
loader trains in a fresh process (DataLoader workers forked next to DALI's threads have
crashed, and one loader's threads must not take the next one's cores).

The default model is ``tiny`` (a small conv net): on a CPU a ResNet's step is so slow that
every loader keeps up and every bar reads ~0 %; on a GPU, ``--model resnet18`` or
``resnet50`` is the question users bring.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gpufeed.bench.harness import (
    add_out_argument,
    markdown_table,
    results_line,
    run_isolated,
    write_results,
)
from gpufeed.progress import counted, stage

#: The baseline every other loader's training rate is divided by.
BASELINE = "pil"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``gpufeed bench stalls``."""
    from gpufeed.arguments import add_training_loop_arguments

    add_out_argument(parser)
    parser.add_argument("--data", default=None, help="ImageFolder tree (default: the generated, cached set)")
    parser.add_argument("--model", choices=("resnet18", "resnet50", "tiny"), default="tiny",
                        help="the model trained (default: tiny, a small conv net: a ResNet on a CPU "
                             "is slower than every loader)")
    parser.add_argument("--loaders", default=None,
                        help="comma list of pil, torch, dali (default: those installed here)")
    add_training_loop_arguments(parser)


def _train_metered(name: str, root: str, *, model: str, batch_size: int, size: int, device: str,
                   workers: int, steps: int, warmup: int) -> dict[str, Any]:
    """Train ``model`` fed by loader ``name`` under the stall meter (runs in a fresh process)."""
    import torch

    from gpufeed.profile.batches import take
    from gpufeed.profile.loaders import build_loader
    from gpufeed.profile.models import TrainStep, build_model
    from gpufeed.profile.stall import StallMeter
    from gpufeed.profile.whatif import drain_for, skip_first

    dev = torch.device(device)
    built = build_loader(name, root, batch_size=batch_size, size=size, device=dev, workers=workers)
    step = TrainStep(build_model(model, built.classes, dev), dev)
    drain = drain_for(built.loader, None)  # the batches its workers bank at the start, drawn first
    meter = StallMeter(skip_first(take(built.loader, drain + warmup + steps), drain), warmup=warmup, device=dev)
    for batch in meter:
        step(batch)
    report = meter.report().as_dict()
    return {"name": built.name, "description": built.description, "stall_pct": report["stall_pct"],
            "samples_per_s": report["samples_per_s"], "wait_s": report["wait_s"], "step_s": report["step_s"],
            "steps": report["steps"], "drained_batches": drain, "clock": report["clock"]}


def run(args: argparse.Namespace) -> int:
    """Run ``gpufeed bench stalls`` with parsed ``args``; returns the exit status (1 when a
    loader failed)."""
    from gpufeed.backends import resolve_device
    from gpufeed.datasets.images import default_image_dataset
    from gpufeed.machine import usable_cpus
    from gpufeed.profile.loaders import comparable_loaders

    try:
        device = resolve_device(args.device)
    except ValueError as exc:
        raise ValueError(f"--device: {exc}") from None
    available = comparable_loaders()
    if args.loaders is None:
        names = [BASELINE, *(n for n in available if n != BASELINE)]
    else:
        names = list(dict.fromkeys(n.strip() for n in args.loaders.split(",") if n.strip()))
        unknown = [n for n in names if n not in ("pil", "torch", "dali")]
        if unknown or not names:
            raise ValueError(f"--loaders: unknown {unknown or 'none given'}; choose from pil, torch, dali")
        absent = [n for n in names if n not in available]
        if absent:
            raise ValueError(f"--loaders: {', '.join(absent)} not installed here (available: {', '.join(available)})")
    root = Path(args.data) if args.data else default_image_dataset()  # after the checks: it may generate
    if not root.is_dir():
        raise FileNotFoundError(f"--data {root}: " + ("not a folder (an image folder, shards or a raw cache)"
                                                       if root.exists() else "no such folder"))
    workers = usable_cpus() if args.workers is None else args.workers
    measure = {"model": args.model, "batch_size": args.batch_size, "size": args.size, "device": str(device),
               "workers": workers, "steps": args.steps, "warmup": args.warmup}
    rows: list[dict[str, Any]] = []
    for name in names:
        stage(f"[stalls] training {args.model} fed by the {name} loader ...")
        row = run_isolated(_train_metered, name, str(root), **measure)
        if "error" in row:
            stage(f"[stalls] {name} failed: {row['error'].splitlines()[-1]}")
            row = {"name": name, "error": row["error"]}
        rows.append(row)
    base = next((r for r in rows if r["name"] == BASELINE and "error" not in r), None)
    for r in rows:
        if base and "error" not in r:
            r["ratio"] = r["samples_per_s"] / base["samples_per_s"]
    ran = [r for r in rows if "error" not in r]
    kit = [r for r in ran if r["name"] != BASELINE and "ratio" in r]
    best = max(kit, key=lambda r: r["ratio"]) if kit else None
    headline = {"what": f"training {args.model} fed by {best['name']} vs DataLoader + PIL", "ratio": best["ratio"],
                "detail": f"input stall {base['stall_pct']:.0f} % (pil) -> {best['stall_pct']:.0f} % ({best['name']})"
                } if best and base else {"what": "no kit loader and baseline both ran", "ratio": None, "detail": ""}
    table = markdown_table(
        [{**r, "stall": f"{r['stall_pct']:.1f} %", "rate": f"{r['samples_per_s']:,.1f}",
          "x": f"{r['ratio']:.2f}" if "ratio" in r else "—"} if "error" not in r
         else {"name": r["name"], "stall": "failed", "rate": r["error"].splitlines()[-1]} for r in rows],
        [("name", "loader"), ("stall", "waiting for data"), ("rate", "training images/s"),
         ("x", f"× {BASELINE}"), ("drained_batches", "drained")])
    title = f"Input stall per loader: {args.model} on {device}, batch {args.batch_size}, {args.size}px"
    warm = (f"{counted(args.warmup, 'warm-up step')} (after the batches each loader banks at start, "
            "drawn first: drained column)")
    summary = (f"{title}; {counted(args.steps, 'step')} after {warm} per loader, each in its own "
               f"process; data {root}.\n\n{table}\n\nThe stall is the share of each step's time spent "
               "waiting for the next batch (StallMeter); a loader that keeps up with the model reads ~0 %.")
    print(f"\n{summary}")
    setup = {"data": str(root), **measure, "loaders": names}
    ratios = {r["name"]: r["ratio"] for r in kit}  # what `gpufeed bench compare` reads
    json_path, _ = write_results("stalls", {"setup": setup, "title": title, "rows": rows, "headline": headline,
                                            "ratio_to_baseline": ratios}, summary, args.out)
    print(results_line(json_path))
    return 0 if len(ran) == len(rows) else 1
