"""DataLoader tuning sweep: the settings that feed this machine fastest, beside the kit's loaders.

Which ``num_workers``, ``pin_memory``, ``persistent_workers``, ``prefetch_factor`` and batch
size feed this machine fastest, and how the kit's loaders compare with the best found.

The pipeline swept is the baseline users have (torchvision ``ImageFolder`` + PIL +
transforms.v2 in a ``DataLoader``: :func:`gpufeed.bench.images.baseline_dataset`). A full
grid explodes, so the sweep moves one knob at a time around a starting point (a worker
per core, the DataLoader's defaults otherwise), then measures the configuration that
takes every knob's best value. Every configuration runs in its own process: a warm-up
epoch, then whole epochs until ``--time-per-config`` seconds have passed (an epoch is
never cut, so starting workers each epoch costs what it costs in training). The kit's
``classification_loader`` (torch and, when installed, DALI backends) is timed the same
way beside the best configuration.

Shards (WebDataset, TFRecord) and raw caches have no ImageFolder to sweep: there the
pipeline swept is the kit's own torch backend (a DataLoader inside), over its two knobs,
``num_workers`` and batch size, and the code printed builds that loader; DALI is timed
beside the best. They are swept whole (``--max-images`` picks from folders only).
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from gpufeed.arguments import at_least, device_name, number_at_least
from gpufeed.bench.harness import (
    add_out_argument,
    epoch_runner,
    markdown_table,
    measure_for,
    results_line,
    run_isolated,
    write_results,
)
from gpufeed.progress import counted, stage

#: The knobs swept, in sweep order.
KNOBS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "batch_size")
KIT_BACKENDS = ("torch", "dali")
#: The knobs of the kit's torch loader, swept for shards and raw caches.
_KIT_KNOBS = ("num_workers", "batch_size")


@dataclass(frozen=True)
class LoaderConfig:
    """One DataLoader configuration (the knobs of the sweep)."""

    num_workers: int
    batch_size: int
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = 2
    #: The kit's torch loader (shards, raw caches) instead of DataLoader + ImageFolder: only
    #: ``num_workers`` and ``batch_size`` are its knobs (it sets the others itself).
    kit: bool = False

    def __post_init__(self) -> None:
        if self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {self.num_workers}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.prefetch_factor is not None and self.prefetch_factor < 1:
            raise ValueError(f"prefetch_factor must be >= 1 or None, got {self.prefetch_factor}")

    def normalised(self) -> LoaderConfig:
        """The configuration the DataLoader really runs: without workers there is nothing to
        keep alive or prefetch (it refuses both), so those knobs go to their defaults."""
        if self.num_workers == 0:
            return replace(self, persistent_workers=False, prefetch_factor=None)
        return self

    def label(self) -> str:
        """A short name for tables: ``workers=2 batch=64 pin=off persistent=on prefetch=2``."""
        c = self.normalised()
        if c.kit:
            return f"workers={c.num_workers} batch={c.batch_size}"
        on = {True: "on", False: "off"}
        return (f"workers={c.num_workers} batch={c.batch_size} pin={on[c.pin_memory]} "
                f"persistent={on[c.persistent_workers]} prefetch={c.prefetch_factor or '-'}")


def worker_counts(cores: int) -> list[int]:
    """num_workers values to try: 0, 1, 2, 4, ... up to ``cores``, ``cores`` itself, and
    one step beyond (the next power of two), to show where more workers stop paying.

    Example:
        >>> worker_counts(2), worker_counts(12)
        ([0, 1, 2, 4], [0, 1, 2, 4, 8, 12, 16])
    """
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    counts, n = {0, cores}, 1
    while n <= cores:
        counts.add(n)
        n *= 2
    counts.add(n)
    return sorted(counts)


def sweep_plan(start: LoaderConfig, values: dict[str, list[Any]]) -> list[tuple[str, Any, LoaderConfig]]:
    """One-knob-at-a-time configurations around ``start``.

    Args:
        start: the starting point; every knob's sweep includes it.
        values: ``{knob: [values]}`` for the knobs to sweep (names from :data:`KNOBS`).

    Returns:
        ``(knob, value, config)`` triples, the start first (knob ``"start"``); a value
        that gives the start's configuration again is listed under its knob but runs once.

    Example:
        >>> plan = sweep_plan(LoaderConfig(2, 64), {"num_workers": [0, 2, 4]})
        >>> [(knob, value) for knob, value, _ in plan]
        [('start', None), ('num_workers', 0), ('num_workers', 2), ('num_workers', 4)]
    """
    unknown = set(values) - set(KNOBS)
    if unknown:
        raise ValueError(f"values: unknown knob(s) {sorted(unknown)}; choose from {', '.join(KNOBS)}")
    plan: list[tuple[str, Any, LoaderConfig]] = [("start", None, start.normalised())]
    for knob in KNOBS:
        for value in values.get(knob, []):
            plan.append((knob, value, replace(start, **{knob: value}).normalised()))
    return plan


def dataloader_code(config: LoaderConfig, *, train: bool, dataset: str = "dataset", size: int = 224,
                    device: str | None = None) -> str:
    """Ready-to-paste Python that builds the DataLoader of ``config`` (for a ``kit``
    configuration, the kit's ``classification_loader`` on the torch backend).

    Args:
        config: the configuration.
        train: shuffle (training) or not.
        dataset: the name of the dataset variable in the user's code (for a ``kit``
            configuration: the source, written as a string).
        size, device: a ``kit`` configuration's output size (written when not the default
            224) and device (written when given): what the sweep measured.

    Returns:
        Source code: the import, then ``loader = DataLoader(...)`` (runs as pasted, given
        ``dataset``).

    Example:
        >>> print(dataloader_code(LoaderConfig(0, 32), train=False))
        from torch.utils.data import DataLoader
        loader = DataLoader(
            dataset,
            batch_size=32,
            shuffle=False,
            num_workers=0,
            pin_memory=False,
        )
    """
    c = config.normalised()
    if c.kit:
        args = [repr(dataset), f"train={train}", f"batch_size={c.batch_size}",
                *([f"size={size}"] if size != 224 else []), 'backend="torch"',
                *([f"device={device!r}"] if device else []), f"num_workers={c.num_workers}"]
        body = "".join(f"    {a},\n" for a in args)
        return f"from gpufeed.pipelines import classification_loader\nloader = classification_loader(\n{body})"
    args = [dataset, f"batch_size={c.batch_size}", f"shuffle={train}", f"num_workers={c.num_workers}",
            f"pin_memory={c.pin_memory}"]
    if c.num_workers:
        args += [f"persistent_workers={c.persistent_workers}", f"prefetch_factor={c.prefetch_factor}"]
    body = "".join(f"    {a},\n" for a in args)
    return f"from torch.utils.data import DataLoader\nloader = DataLoader(\n{body})"


def _int_list(text: str, option: str, minimum: int) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{option}: expected a comma list of integers, got {text!r}") from None
    if not values:
        raise ValueError(f"{option}: no values in {text!r}")
    if min(values) < minimum:  # named here, not by the DataLoader of one configuration
        raise ValueError(f"{option}: every value must be >= {minimum}, got {min(values)}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``gpufeed tune``."""
    parser.add_argument("data", nargs="?", default=None,
                        help="ImageFolder tree, or shards / a raw cache (the kit's torch loader is swept; "
                             "default: the generated, cached ImageNet-like set)")
    parser.add_argument("--images", type=at_least(1), default=1024, help="size of the generated default set")
    parser.add_argument("--max-images", type=at_least(1), default=1024,
                        help="sweep over at most this many images, picked evenly (default 1024)")
    parser.add_argument("--mode", choices=("train", "val"), default="train", help="default: train")
    parser.add_argument("--size", type=at_least(1), default=224, help="output size (default: 224)")
    parser.add_argument("--batch-sizes", default="32,64,128",
                        help="batch sizes to try (default 32,64,128; the start is 64 when listed, else the middle)")
    parser.add_argument("--workers", default=None,
                        help="num_workers values to try (default: 0, 1, 2, 4, ... up to the cores and one beyond)")
    parser.add_argument("--prefetch-factors", default="1,2,4,8", help="prefetch_factor values (default 1,2,4,8)")
    parser.add_argument("--knobs", default=",".join(KNOBS), help=f"knobs to sweep (default: {','.join(KNOBS)})")
    parser.add_argument("--kit", default=",".join(KIT_BACKENDS),
                        help="the kit's loader backends timed beside the best (default torch,dali; '' for none)")
    parser.add_argument("--time-per-config", type=number_at_least(0, above=True), default=5.0,
                        help="timed seconds per configuration after a warm-up epoch (default 5)")
    parser.add_argument("--start-repeats", type=int, default=2, choices=(1, 2),
                        help="measure the start again after the sweep (default 2): the two runs' spread is "
                             "the noise a knob's gain must beat")
    parser.add_argument("--device", default="auto", type=device_name, help="auto | cpu | cuda (default: auto)")
    add_out_argument(parser)


def _subset(n: int, limit: int) -> list[int] | None:
    """``limit`` indices spread evenly over ``range(n)`` (every class keeps its share), or
    None when all ``n`` fit."""
    if n <= limit:
        return None
    return [i * n // limit for i in range(limit)]


def _worker(kind: str, root: str, mode: str, size: int, config: dict[str, Any], device: str, seconds: float,
            max_images: int) -> dict[str, Any]:
    """Time one DataLoader configuration (``kind="dataloader"``) or one kit backend (runs in a
    fresh process)."""
    import torch

    from gpufeed.bench.images import baseline_dataset, baseline_loader

    train = mode == "train"
    cfg = LoaderConfig(**config)
    dataset = None if cfg.kit else baseline_dataset(root, train=train, size=size)
    picked = None if cfg.kit else _subset(len(dataset), max_images)
    if kind == "dataloader" and not cfg.kit:
        # With workers the main process only moves batches: one thread, as in the images
        # suite. Without workers it does all the work, with torch's default threads, as a
        # user's num_workers=0 script does.
        if cfg.num_workers:
            torch.set_num_threads(1)
        # More workers than cores is one of the points the sweep tries on purpose.
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        if picked is not None:
            dataset = torch.utils.data.Subset(dataset, picked)
        knobs = {k: v for k, v in asdict(cfg.normalised()).items() if k != "kit"}
        loader = baseline_loader(dataset, train=train, **knobs)
        expected = len(dataset)
    else:
        from gpufeed.pipelines import classification_loader

        torch.set_num_threads(1)
        pairs = [dataset.samples[i] for i in picked] if picked is not None else None
        loader = classification_loader(None if pairs else root, file_list=pairs, train=train,
                                       batch_size=cfg.batch_size, size=size, device=device,
                                       backend="torch" if kind == "dataloader" else kind,
                                       num_workers=cfg.num_workers)
        expected = len(pairs) if pairs else len(loader.samples)
    # At least 3 epochs: a slow configuration's median of one epoch was chosen from noise.
    timing = measure_for(epoch_runner(lambda: loader, device), seconds, warmup=1, min_repeats=MIN_EPOCHS)
    skipped = len(getattr(loader, "skipped", []))
    check = "ok" if timing.work + skipped == expected else f"yielded {timing.work:.0f} of {expected} samples"
    return {**timing.as_dict(), "epochs": len(timing.seconds), "images": expected, "check": check}


#: Timed epochs per configuration, at least (then on until ``--time-per-config``).
MIN_EPOCHS = 3


def _with_workers(rates: dict[Any, float], workers: Callable[[Any], int]) -> list[Any]:
    """The candidates a recommendation may take: those with workers (loading beside the
    training step) that ran, unless none did."""
    return [k for k, r in rates.items() if workers(k) > 0 and r] or list(rates)


def _in_background(knob: str, by_value: dict[Any, float]) -> list[Any]:
    """The values of ``knob`` a recommendation may take (:func:`_with_workers` for
    ``num_workers``; any value of the others)."""
    return _with_workers(by_value, int) if knob == "num_workers" else list(by_value)


def _kit_only(root: str | Path) -> bool:
    """Whether ``root`` is shards or a raw cache (read by the kit's loaders only), not an
    ImageFolder tree."""
    from gpufeed.datasets import shards

    return shards.is_shard_spec(str(root)) or shards.converted_format(root) is not None


def _measure(kind: str, cfg: LoaderConfig, args: argparse.Namespace, root: Path, device: str,
             label: str) -> dict[str, Any]:
    stage(f"[tune] {label} ...")
    r = run_isolated(_worker, kind, str(root), args.mode, args.size, asdict(cfg), device, args.time_per_config,
                     args.max_images, timeout=max(600.0, 60 * args.time_per_config) * (MIN_EPOCHS + 1) / 2)
    if "error" in r:
        r["check"] = "error: " + r["error"].splitlines()[0][:100]
    stage(f"[tune] {label}: " + (f"{r['rate']:,.0f} images/s over {counted(r['epochs'], 'epoch')}" if "rate" in r
                                 else r["check"]))
    return r


def _knob_values(args: argparse.Namespace, cores: int, cuda: bool) -> tuple[LoaderConfig, dict[str, list[Any]]]:
    """The starting point and each swept knob's values, from the options."""
    for option, value in (("--time-per-config", args.time_per_config), ("--max-images", args.max_images),
                          ("--size", args.size)):
        if value <= 0:
            raise ValueError(f"{option} must be > 0, got {value}")
    batches = _int_list(args.batch_sizes, "--batch-sizes", 1)
    workers = _int_list(args.workers, "--workers", 0) if args.workers else worker_counts(cores)
    prefetch = _int_list(args.prefetch_factors, "--prefetch-factors", 1)
    knobs = [k.strip() for k in args.knobs.split(",") if k.strip()]
    unknown = set(knobs) - set(KNOBS)
    if unknown:
        raise ValueError(f"--knobs: unknown {sorted(unknown)}; choose from {', '.join(KNOBS)}")
    start_batch = 64 if 64 in batches else sorted(batches)[len(batches) // 2]
    start = LoaderConfig(num_workers=min(cores, max(workers)), batch_size=start_batch, pin_memory=cuda)
    values = {"num_workers": workers, "batch_size": batches, "prefetch_factor": prefetch,
              "persistent_workers": [False, True],
              # Pinning only matters for copies to a GPU; without one it does nothing.
              "pin_memory": [False, True] if cuda else []}
    if knobs == ["pin_memory"] and not cuda:
        raise ValueError("--knobs pin_memory: pinning only speeds up copies to a CUDA GPU, and this run has none "
                         "(--device cpu, or no GPU): nothing to sweep")
    return start, {k: values[k] for k in KNOBS if k in knobs and values[k]}


def _kit_backends(text: str) -> list[str]:
    backends = [b.strip() for b in text.split(",") if b.strip()]
    unknown = [b for b in backends if b not in KIT_BACKENDS]
    if unknown:
        raise ValueError(f"--kit: unknown backend(s) {unknown}; choose from {', '.join(KIT_BACKENDS)}")
    return backends


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _beyond(gain: float | None, noise: float | None) -> bool | None:
    """Whether a gain over the start beats the start's own run-to-run spread (None: unknown)."""
    if gain is None or noise is None:
        return None
    return gain - 1 > noise


def _sweep(args: argparse.Namespace, start: LoaderConfig, values: dict[str, list[Any]], root: Path,
           device: str) -> tuple[list[dict[str, Any]], dict[LoaderConfig, float], dict[str, dict[str, Any]], float | None]:
    """Run the plan, the start again, then every knob's best value together.

    Returns:
        The sweep's rows, the rate of each configuration (the start's: the mean of its
        runs), each knob's gain, and the noise (half the relative spread of the start's runs).
    """
    measured: dict[LoaderConfig, dict[str, Any]] = {}
    sweep = []
    for knob, value, cfg in sweep_plan(start, values):
        if cfg not in measured:
            measured[cfg] = _measure("dataloader", cfg, args, root, device, f"{len(measured) + 1}. {cfg.label()}")
        sweep.append({"knob": knob, "value": value, "config": cfg.label(), **measured[cfg]})
    rate = {cfg: r.get("rate", 0.0) for cfg, r in measured.items()}
    first = start.normalised()
    noise: float | None = None  # half the relative spread of the start's two runs
    if args.start_repeats > 1:
        # The machine drifts during a sweep: the start measured again at the end gives the
        # reference (the mean of both) and the noise a gain must beat (their spread).
        again = _measure("dataloader", first, args, root, device, f"{len(measured) + 1}. the start again")
        sweep.append({"knob": "start again", "value": None, "config": first.label(), **again})
        if rate[first] and again.get("rate"):
            noise = abs(rate[first] - again["rate"]) / (rate[first] + again["rate"])
            rate[first] = (rate[first] + again["rate"]) / 2
    start_rate = rate[first]
    gains, combined = {}, start
    for knob, tried in values.items():
        by_value = {v: rate[replace(start, **{knob: v}).normalised()] for v in tried}
        # num_workers=0 loads each batch while the training step waits: alone it can run
        # fastest (no hand-over between processes), in training it is the slowest.
        best_value = max(_in_background(knob, by_value), key=by_value.get)
        gain = _ratio(by_value[best_value], start_rate)
        real = _beyond(gain, noise)
        if real is not False:  # a gain within the noise keeps the start's value
            combined = replace(combined, **{knob: best_value})
        kept = real is False and best_value != getattr(start, knob)
        note = f"within the noise: keep {getattr(start, knob)}" if kept else ""
        if knob == "num_workers" and by_value.get(0, 0) > by_value[best_value]:
            note = "; ".join(filter(None, [note, f"0 ran {by_value[0]:,.0f} images/s alone, but loads each batch "
                                                 "while the training step waits: not recommended"]))
        gains[knob] = {"best": best_value, "gain": gain, "note": note}
    combined = combined.normalised()
    if combined not in rate:
        r = _measure("dataloader", combined, args, root, device, f"{len(rate) + 1}. every knob's best: {combined.label()}")
        sweep.append({"knob": "combined", "value": None, "config": combined.label(), **r})
        rate[combined] = r.get("rate", 0.0)
    for row in sweep:
        row["shown"] = row["knob"] if row["value"] is None else f"{row['knob']}={row['value']}"
        if "rate" in row:
            row["vs_start"] = _ratio(row["rate"], start_rate)
            row["spread"] = f"{row['rate_min']:,.0f}–{row['rate_max']:,.0f}"
    return sweep, rate, gains, noise


def run(args: argparse.Namespace) -> int:
    """Sweep, print the table and the best ``DataLoader(...)``, write JSON + Markdown + PNG.

    Returns:
        0 when every configuration ran and yielded every sample, else 1.
    """
    from gpufeed.backends import dali_installed, resolve_device
    from gpufeed.datasets.images import default_image_dataset
    from gpufeed.machine import usable_cpus

    device = str(resolve_device(args.device))
    cores = usable_cpus()
    start, values = _knob_values(args, cores, device.startswith("cuda"))
    backends = _kit_backends(args.kit)
    root = Path(args.data) if args.data else default_image_dataset(args.images)
    kit_only = _kit_only(root)
    if not (root.is_dir() or kit_only):
        raise FileNotFoundError(f"{root}: no such folder, and no shard file or pattern (expected an ImageFolder "
                                "tree root/<class>/<image>, shards or a raw cache)")
    from gpufeed.pipelines.sources import open_source

    # A file that is no shard, or a folder without class folders or images, is refused here
    # in one line naming it, not once per configuration (an empty folder had failed 11
    # configurations with FileNotFoundError before saying "no configuration ran").
    open_source(str(root))
    if kit_only:
        # No ImageFolder to build a DataLoader on: the kit's torch loader is the one swept.
        dropped = [k for k in values if k not in _KIT_KNOBS]
        if dropped:
            print(f"gpufeed tune: {root} is shards or a raw cache: sweeping the kit's torch loader, whose knobs are "
                  f"{' and '.join(_KIT_KNOBS)} ({', '.join(dropped)}: set by the loader itself)", flush=True)
        start = replace(start, kit=True, pin_memory=False, persistent_workers=False, prefetch_factor=None)
        values = {k: v for k, v in values.items() if k in _KIT_KNOBS}
        backends = [b for b in backends if b != "torch"]  # the torch backend is the sweep itself
    print(f"gpufeed tune: {root}, {args.mode}, {args.size}px, output float32 NCHW on {device}, {cores} cores; "
          f"{counted(len({c for _, _, c in sweep_plan(start, values)}), 'configuration')} "
          f"(then {'the start again and ' if args.start_repeats > 1 else ''}every knob's best together, "
          "where it differs), "
          f"{args.time_per_config:g} s each, at least {MIN_EPOCHS} epochs, after a warm-up epoch", flush=True)
    sweep, rate, gains, noise = _sweep(args, start, values, root, device)
    if not any(rate.values()):  # nothing to recommend: say why instead of printing code
        first = next((r["check"] for r in sweep if r.get("check") != "ok"), "no configuration ran")
        raise RuntimeError(f"gpufeed tune: no configuration ran on {root} ({first})")
    start_rate = rate[start.normalised()]
    fastest = max(_with_workers(rate, lambda c: c.num_workers), key=rate.get)
    # The fastest configuration, unless it beat the start by no more than the noise.
    best = start.normalised() if _beyond(_ratio(rate[fastest], start_rate), noise) is False else fastest
    best_rate = rate[best]
    kit = []
    for backend in backends:
        if backend == "dali" and not dali_installed():
            kit.append({"loader": "kit-dali", "check": "skipped: DALI not installed"})
            continue
        # The kit's default: all cores. `kit` says the source is shards or a raw cache.
        kit_cfg = LoaderConfig(num_workers=cores, batch_size=best.batch_size, kit=kit_only)
        r = _measure(backend, kit_cfg, args, root, device, f"kit {backend} backend, batch {best.batch_size}")
        kit.append({"loader": f"kit-{backend}", **r, "vs_best": _ratio(r.get("rate"), best_rate),
                    "vs_start": _ratio(r.get("rate"), start_rate)})
    swept = "kit torch loader" if kit_only else "DataLoader"
    code = dataloader_code(best, train=args.mode == "train", dataset=str(root) if kit_only else "dataset",
                           size=args.size, device=None if args.device == "auto" else device)
    ratios = {f"best {swept} vs start": _ratio(best_rate, start_rate)}
    ratios.update({f"{row['loader']} vs best {swept}": row.get("vs_best") for row in kit})
    top = max((row for row in kit if row.get("vs_best")), key=lambda row: row["vs_best"], default=None)
    tuned = f"best {swept} {ratios[f'best {swept} vs start'] or 0:.2f}× the start point"
    headline = ({"what": f"{top['loader']} vs the best {swept} found", "ratio": top["vs_best"], "detail": tuned}
                if top else {"what": f"best {swept} vs start", "ratio": ratios[f"best {swept} vs start"],
                             "detail": best.label()})
    sweep_md = markdown_table(sweep, [("shown", "knob = value"), ("config", "configuration"),
                                      ("rate", "images/s (median epoch)"), ("spread", "min–max"),
                                      ("vs_start", "× start"), ("epochs", "epochs"), ("check", "check")])
    gains_md = markdown_table([{"knob": k, **g} for k, g in gains.items()],
                              [("knob", "knob"), ("best", "best value"), ("gain", "gain × start"), ("note", "note")])
    noise_md = (f"The start ran twice (first and last): ±{100 * noise:.1f} % between the two, the noise a gain "
                f"must beat; × start is relative to their mean ({start_rate:,.0f} images/s)." if noise is not None
                else "The start ran once: no noise estimate.")
    if best != fastest:
        noise_md += (f" The fastest configuration ({fastest.label()}, {rate[fastest]:,.0f} images/s) was within it: "
                     "the start is recommended.")
    together = next((r for r in sweep if r["knob"] == "combined" and r.get("rate")), None)
    if together is not None and together["rate"] < best_rate:
        noise_md += (f" Every knob's best together ({together['config']}) measured {together['rate']:,.0f} images/s, "
                     f"below the recommended configuration: the gains did not add up on this machine, so the "
                     "fastest configuration measured is recommended.")
    kit_md = markdown_table([{"loader": f"best {swept}", "rate": best_rate, "vs_best": 1.0,
                              "vs_start": _ratio(best_rate, start_rate), "check": best.label()}, *kit],
                            [("loader", "loader"), ("rate", "images/s"), ("vs_best", f"× best {swept}"),
                             ("vs_start", "× start"), ("check", "check")])
    images = next((r["images"] for r in sweep if r.get("images")), None)
    shown = f"{images:,} images" if images else f"at most {args.max_images:,} images"
    summary = (
        f"{args.mode}, {root} ({shown}), {args.size}px, float32 normalised NCHW on "
        f"{device}, {cores} cores. Start: {start.normalised().label()}; one knob at a time, then every knob's "
        f"best together; each configuration in its own process, a warm-up epoch then whole epochs for "
        f"{args.time_per_config:g} s.\n\n## Sweep\n\n{sweep_md}\n\n## Gain of each knob (its best value vs the "
        f"start)\n\n{gains_md}\n\n{noise_md}\n\n## Recommended configuration ({best_rate:,.0f} images/s)\n\n```python\n{code}\n```\n\n"
        f"## The kit's loaders beside it (batch {best.batch_size}, a worker/thread per core)\n\n{kit_md}"
    )
    print(summary, flush=True)
    payload = {
        "setup": {"data": str(root), "mode": args.mode, "size": args.size, "device": device, "cores": cores,
                  "max_images": args.max_images, "time_per_config": args.time_per_config,
                  "start": asdict(start.normalised()), "values": values},
        "sweep": sweep, "gains": gains, "noise": noise, "best": asdict(best), "fastest": asdict(fastest), "best_rate": best_rate, "start_rate": start_rate,
        "code": code, "kit": kit, "ratio_to_baseline": ratios, "headline": headline,
    }
    json_path, md_path = write_results(f"tune-{args.mode}", payload, summary, args.out)
    print(results_line(json_path))  # the JSON, the Markdown and the figures
    failed = [r for r in [*sweep, *kit] if r.get("check") != "ok" and not str(r.get("check")).startswith("skipped")]
    return 0 if not failed else 1
