"""The DALI loader with its feed in worker processes (the default on a GPU) and in the feed's
own thread, side by side, each configuration in a fresh process, train and val.

    python bench/feed_ab.py [--device cuda] [--images 1024] [--batch-size 64] [--epochs 3]

Prints one line per configuration (images/s over ``--epochs`` epochs after an untimed one)
and the ratio; ``bash bench/gpu_check.sh feed`` runs it on a lent GPU. Every figure in
``bench/README.md`` about the feed workers came from this comparison.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def _one(mode: str, workers: str, device: str, images: int, batch_size: int, epochs: int) -> dict:
    import torch

    import gpufeed.pipelines.dali_loader as dali_loader
    from gpufeed.datasets.images import default_image_dataset
    from gpufeed.pipelines import classification_loader

    if workers == "thread":
        dali_loader.feed_processes = lambda *a, **k: 0
    elif device == "cpu":  # DALI's CPU-only mode keeps the feed in its thread: force the workers
        dali_loader.feed_processes = lambda samples, options, on_gpu: options.workers
    loader = classification_loader(default_image_dataset(images), train=mode == "train", batch_size=batch_size,
                                   backend="dali", device=device)

    def epoch() -> int:
        return sum(len(y) for _, y in loader)

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    epoch()
    sync()
    start = time.perf_counter()
    n = sum(epoch() for _ in range(epochs))
    sync()
    rate = n / (time.perf_counter() - start)
    processes = 0 if loader._workers is None else loader._workers.processes
    loader.close()
    return {"mode": mode, "feed": workers, "processes": processes, "images_per_s": rate, "images": n}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--one", nargs=2, metavar=("MODE", "FEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(*args.one, args.device, args.images, args.batch_size, args.epochs)))
        return 0
    status = 0
    for mode in ("train", "val"):
        rates = {}
        for feed in ("thread", "workers"):
            out = subprocess.run([sys.executable, __file__, "--one", mode, feed, "--device", args.device,
                                  "--images", str(args.images), "--batch-size", str(args.batch_size),
                                  "--epochs", str(args.epochs)], capture_output=True, text=True)
            if out.returncode != 0:
                print(f"{mode} feed in {feed}: FAILED\n{out.stderr[-2000:]}", flush=True)
                status = 1
                continue
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rates[feed] = row["images_per_s"]
            print(f"{mode} feed in {feed} ({row['processes']} processes): {row['images_per_s']:,.0f} images/s "
                  f"({row['images']} images)", flush=True)
        if len(rates) == 2:
            print(f"{mode}: workers / thread = {rates['workers'] / rates['thread']:.2f}x", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
