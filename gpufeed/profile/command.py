"""``gpufeed stall``: build a loader and a model, train a few dozen steps under the stall
meter, run the what-if, print both and write JSON + Markdown + a timeline PNG.

The other loaders compared in the what-if run alone, each in a fresh process (as the images
benchmark runs its contenders): DataLoader workers forked next to DALI's threads have
crashed, and one loader's threads must not take the next one's cores.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch


def _loader_alone(name: str, root: str, batch_size: int, size: int, device: str, workers: int,
                  steps: int, warmup: int) -> dict[str, Any]:
    """Loader ``name`` alone (runs in a fresh process): its rate in samples/s."""
    from gpufeed.profile.loaders import build_loader
    from gpufeed.profile.whatif import loader_rate

    built = build_loader(name, root, batch_size=batch_size, size=size, device=torch.device(device),
                         workers=workers)
    # In its own process, which ends after: nothing to settle for.
    report = loader_rate(built.loader, steps=steps, warmup=warmup, device=device, settle=False)
    return {"name": built.name, "samples_per_s": report.samples_per_s}


#: Why the pil loader is left out of the comparison on shards and raw caches (the report says so).
PIL_NOT_ON_SHARDS = "an ImageFolder baseline, not run on shards"


def run(args: argparse.Namespace) -> int:
    """Run ``gpufeed stall`` with parsed ``args``; returns the exit status."""
    from gpufeed.backends import resolve_device
    from gpufeed.bench.harness import results_line, run_isolated, write_results
    from gpufeed.datasets.images import default_image_dataset
    from gpufeed.datasets.shards import is_shard_spec
    from gpufeed.machine import usable_cpus
    from gpufeed.profile.loaders import build_loader, comparable_loaders, shards_or_raw
    from gpufeed.profile.models import TrainStep, build_model
    from gpufeed.profile.whatif import drain_for, what_if
    from gpufeed.progress import counted, stage

    out = Path(args.out)  # not inside the package: arguments.results_folder; shown as given, as the suites do
    if args.compare and "none" in args.compare and len(set(args.compare)) > 1:
        raise ValueError(f"--compare {' '.join(args.compare)}: 'none' measures no other loader; pass it alone, "
                         "or name the loaders")
    try:
        device = resolve_device(args.device)
    except ValueError as exc:
        raise ValueError(f"--device: {exc}") from None
    root = Path(args.data) if args.data else default_image_dataset()
    if not (root.is_dir() or is_shard_spec(str(root))):  # a folder, or shards as the loader reads them
        raise FileNotFoundError(f"--data {root}: no such folder, and no shard file or pattern")
    workers = usable_cpus() if args.workers is None else args.workers
    compare = comparable_loaders() if args.compare is None else [n for n in args.compare if n != "none"]
    left_out: dict[str, str] = {}
    kind = shards_or_raw(root)
    if kind is not None:  # the pil baseline is torchvision's ImageFolder: it reads class folders only
        for option, asked, instead in (("--loader", [args.loader], "use --loader torch, dali or auto"),
                                       ("--compare", args.compare or [], "leave pil out of --compare")):
            if "pil" in asked:
                raise ValueError(f"{option} pil: the pil loader (torchvision ImageFolder + DataLoader) needs an "
                                 f"ImageFolder tree (root/<class>/<image>); --data {root} is {kind}: {instead}")
        if "pil" in compare:
            compare = [n for n in compare if n != "pil"]
            left_out["pil"] = PIL_NOT_ON_SHARDS
    measure = {"batch_size": args.batch_size, "size": args.size, "device": str(device), "workers": workers,
               "steps": args.steps, "warmup": args.warmup}
    built = build_loader(args.loader, root, batch_size=args.batch_size, size=args.size, device=device,
                         workers=workers)
    # The header before the stage lines below (stderr): in a log (`> log 2>&1`) it came after
    # them. Flushed, since stdout to a file is block-buffered and stderr is not.
    print(f"gpufeed stall: {args.model} ({built.classes} classes) on {device}, loader {built.description}, "
          f"batch {args.batch_size}, {args.size}px, {counted(args.steps, 'step')} after "
          f"{counted(args.warmup, 'warm-up step')} (the loader runs first draw the "
          f"{counted(drain_for(built.loader, None), 'batch', 'batches')} it banks at start), "
          f"data {root}",
          flush=True)
    dataset = getattr(built.loader, "dataset", None)
    if dataset is not None and len(dataset) < args.batch_size:
        stage(f"[stall] --batch-size {args.batch_size} is more than the {len(dataset):,} samples of {root}: "
              "every step is one epoch's partial batch")
    # The others first, each alone in a fresh process, before this one starts its workers.
    alternatives: dict[str, float] = {}
    for name in (n for n in compare if n != built.name):
        stage(f"[stall] measuring the {name} loader alone ...")
        row = run_isolated(_loader_alone, name, str(root), **measure)
        if "error" in row:
            stage(f"[stall] {name} failed: {row['error'].splitlines()[0]}")
        else:
            alternatives[name] = row["samples_per_s"]
    model = build_model(args.model, built.classes, device)
    try:
        result = what_if(TrainStep(model, device), built.loader, steps=args.steps, warmup=args.warmup,
                         device=device, loader_name=built.name, alternatives=alternatives)
    except OSError as exc:
        if built.name != "pil":
            raise
        # A DataLoader worker's error arrives with the worker's whole traceback in its text:
        # its last line names the file. ImageFolder has no way to skip one.
        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise RuntimeError(f"the pil loader (torchvision ImageFolder + DataLoader) stopped at a file it cannot "
                           f"read: {last.removeprefix('OSError: ')}; it cannot skip one: --loader torch or dali "
                           "skip unreadable images and report them") from None
    text = f"{result.actual.to_text()}\n\n{result.to_text()}"
    text += "".join(f"\n  {name}: {why}" for name, why in left_out.items())
    print(text, flush=True)
    setup = {"data": str(root), "model": args.model, "classes": built.classes, "loader": built.description,
             **measure, "compared": compare, "not_compared": left_out}
    suite = f"stall-{args.model}-{built.name}"
    title = (f"{args.model} on {device}, {built.name} loader: stall {result.actual.stall_pct:.1f} % "
             f"({result.verdict.split(':')[0]})")
    json_path, _ = write_results(
        suite, {"setup": setup, "title": title, "report": result.actual.as_dict(), "what_if": result.as_dict()},
        f"```\n{text}\n```", out, command="gpufeed stall:",
    )
    print(results_line(json_path))  # the JSON, the Markdown and the timeline
    return 0
