"""Train ResNet-18 for a few steps on a gpufeed loader.

    python examples/train_resnet18.py --backend dali --steps 20            # generated data
    python examples/train_resnet18.py --backend torch --data /path/to/train
    python examples/train_resnet18.py --backend dali --dali-iterator       # DALI's own iterator

Runs on the GPU with mixed precision (AMP) when one is present, else on the CPU.
Ends with the stall report: how much of the time went to waiting for data (gpufeed.profile).
One process: for training on several processes (torchrun, DDP) see examples/train_ddp.py.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator

import torch
import torchvision

from gpufeed.datasets.images import generate_image_folder
from gpufeed.pipelines import classification_loader
from gpufeed.profile import StallMeter


def batches(loader, dali_iterator=None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:  # noqa: ANN001
    """Endless (images, labels) batches, epoch after epoch, from the loader or from
    ``dali_iterator`` (one made by ``loader.dali_iterator()``, which resets itself)."""
    while True:
        if dali_iterator is not None:  # the code a script written against DALI already has
            for data in dali_iterator:
                yield data[0]["data"], data[0]["label"].squeeze(-1).long()
        else:
            yield from loader


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", "--loader", dest="backend", choices=("auto", "dali", "torch"), default="auto",
                   help="the loader backend, as classification_loader(backend=) and train_ddp.py (--loader: the older name)")
    p.add_argument("--data", help="an ImageFolder tree, shards or a raw cache from gpufeed convert "
                                   "(default: 64 generated images)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--size", type=int, default=64, help="crop size (224 for ImageNet)")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (default 0.01 for small batches)")
    p.add_argument("--dali-iterator", action="store_true", help="use DALIClassificationIterator directly")
    args = p.parse_args(argv)
    for option, value, low in (("--steps", args.steps, 1), ("--batch-size", args.batch_size, 1),
                               ("--size", args.size, 1), ("--workers", args.workers, 0)):
        if value is not None and value < low:
            p.error(f"{option} must be >= {low}, got {value}")
    if not args.lr > 0:
        p.error(f"--lr must be > 0, got {args.lr}")

    if args.data is None:  # a small generated set, removed when the script ends
        scratch = tempfile.TemporaryDirectory(prefix="gpufeed-example-")
        args.data = str(generate_image_folder(scratch.name, num_images=64, num_classes=4,
                                              min_side=80, max_side=120))
    data = args.data
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:  # what the loader refuses (a missing folder, no images), as one line
        loader = classification_loader(
            data, train=True, batch_size=args.batch_size, size=args.size, backend=args.backend,
            device=str(device), num_workers=args.workers,
        )
    except (OSError, ValueError, RuntimeError) as exc:
        p.error(str(exc))
    if args.dali_iterator and loader.backend != "dali":
        p.error(f"--dali-iterator needs the DALI backend: use --backend dali (this loader: {loader.backend}, "
                f"{loader.choice.reason})")
    # One iterator for the whole run (auto_reset): its skipped-file report is per epoch.
    dali_iterator = loader.dali_iterator(auto_reset=True) if args.dali_iterator else None
    print(f"loader: {loader.backend} ({loader.choice.reason}); {len(loader.samples)} images, "
          f"{len(loader.classes)} classes, device {device}")

    model = torchvision.models.resnet18(num_classes=len(loader.classes)).to(device)
    model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-5)
    amp = device.type == "cuda"
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    # The meter times each step's wait for data against the step (synchronising the GPU at
    # each step's end); the first two steps (start-up) are left out of its figures.
    meter = StallMeter(batches(loader, dali_iterator), warmup=min(2, args.steps - 1), device=device)
    start, seen = time.perf_counter(), 0
    for step, (images, labels) in zip(range(args.steps), meter, strict=False):
        with torch.autocast(device.type, dtype=torch.float16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(model(images.to(device)), labels.to(device))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        seen += len(labels)
        if not torch.isfinite(loss):  # a one-line error, not a traceback: the fix is the user's setting
            print(f"train_resnet18.py: error: the loss became {loss.item()} at step {step}: training diverged; "
                  f"lower --lr (now {args.lr:g})", file=sys.stderr)
            return 1
        print(f"step {step:3d}  loss {loss.item():.4f}")
    elapsed = time.perf_counter() - start
    print(f"trained {args.steps} steps, {seen} images in {elapsed:.1f} s ({seen / elapsed:.1f} images/s)")
    print(meter.report().to_text())
    # The loader and DALI's iterator read files separately: report the one that ran. An
    # iterator on DALI's own shard readers checks no bytes, so it lists nothing.
    log = getattr(dali_iterator, "gpufeed_skipped", None)
    skipped = (log.skipped if log is not None else []) if dali_iterator is not None else loader.skipped
    if skipped:
        where = "it.gpufeed_skipped.skipped" if dali_iterator is not None else "loader.skipped"
        print(f"skipped {len(skipped)} files in the last epoch (see {where}): "
              + "; ".join(f"{s.path} ({s.reason})" for s in skipped[:3]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
