"""Data-parallel training with torchrun and a gpufeed loader, resumable mid-epoch.

    torchrun --nproc_per_node=2 examples/train_ddp.py --data /path/to/train --epochs 2
    torchrun --nproc_per_node=2 examples/train_ddp.py --data shards/ --stop-after 5 --checkpoint ckpt
    torchrun --nproc_per_node=2 examples/train_ddp.py --data shards/ --checkpoint ckpt --resume
    python examples/train_ddp.py --model tiny --epochs 1        # one process, no torchrun

Sharding: each process (rank) reads its own slice of every epoch.
``classification_loader`` takes the rank and the world size from torch.distributed (or
torchrun's ``RANK`` / ``WORLD_SIZE``), so a script passes neither; every rank must use
the same ``seed``, which fixes the epoch's global order that the ranks split.

The last batch: DistributedDataParallel needs every rank to take the same number of
steps (a rank with one step more waits for ever in the gradient all-reduce).
``--last-batch drop`` (every rank keeps the smallest shard's full batches) and ``fill``
(every rank pads to the largest shard's batch count) guarantee it. ``partial`` yields
every sample exactly once across ranks, so ranks may differ by one batch: the script
then trains inside ``model.join()``, DDP's support for uneven inputs.

Resume: the loader's ``state_dict()`` says where this rank is in the epoch (it names its
shard, so each rank saves its own, beside the model and the optimizer). After a restart,
``loader.load_state_dict(state)`` makes the next ``iter()`` yield exactly the rest of that
epoch: the same samples, crops and flips as an uninterrupted run, whichever backend, with
the same ``--data``, batch size, seed, ``--last-batch`` and number of processes (a state
taken otherwise is refused, naming what differs). ``--stop-after N`` plays a preempted job
that checkpoints and exits after N steps. Checkpoint with ``drop`` or ``fill``: with
``partial`` the ranks' step counts drift apart at epoch ends, so step N is not the same
point of training on every rank.

``--record FILE`` appends one JSON line per step to ``FILE.rank<R>.jsonl``: the epoch and
the labels of the batch this rank trained on (on a dataset with one image per class,
which samples it saw).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel

from gpufeed.datasets.images import generate_image_folder
from gpufeed.pipelines import classification_loader


def tiny_net(num_classes: int) -> torch.nn.Module:
    """A few-thousand-parameter CNN, for trying the script out on a CPU."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, num_classes),
    )


def start_process_group(device: torch.device) -> None:
    """NCCL between GPUs, gloo between CPU processes; a group of one without torchrun."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    if "RANK" in os.environ:  # torchrun set the rendezvous (MASTER_ADDR, RANK, WORLD_SIZE)
        dist.init_process_group(backend)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)  # in memory


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="ImageFolder tree, shards or a converted folder (default: generated)")
    p.add_argument("--backend", choices=("auto", "dali", "torch"), default="auto")
    p.add_argument("--model", choices=("resnet18", "tiny"), default="resnet18")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16, help="per process")
    p.add_argument("--size", type=int, default=64, help="crop size (224 for ImageNet)")
    p.add_argument("--last-batch", choices=("drop", "fill", "partial"), default="drop")
    p.add_argument("--workers", type=int, default=None, help="per process")
    p.add_argument("--seed", type=int, default=0, help="the same on every rank")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--checkpoint", help="folder for per-rank checkpoints")
    p.add_argument("--resume", action="store_true", help="go on from --checkpoint")
    p.add_argument("--stop-after", type=int, help="checkpoint and exit after this many steps (a preemption)")
    p.add_argument("--record", help="append per-step JSON lines to RECORD.rank<R>.jsonl")
    args = p.parse_args(argv)
    if (args.resume or args.stop_after is not None) and not args.checkpoint:
        p.error("--resume and --stop-after need --checkpoint")
    for option, value, low in (("--epochs", args.epochs, 1), ("--batch-size", args.batch_size, 1),
                               ("--size", args.size, 1), ("--workers", args.workers, 0),
                               ("--stop-after", args.stop_after, 1), ("--seed", args.seed, 0)):
        if value is not None and value < low:
            p.error(f"{option} must be >= {low}, got {value}")
    if not args.lr > 0:
        p.error(f"--lr must be > 0, got {args.lr}")

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    start_process_group(device)
    rank, world = dist.get_rank(), dist.get_world_size()

    scratch = None
    if args.data is None:  # a small generated set (the same bytes on every rank)
        scratch = tempfile.TemporaryDirectory(prefix="gpufeed-example-")
        args.data = str(generate_image_folder(scratch.name, num_images=64, num_classes=4,
                                              min_side=80, max_side=120))
    # No shard_id / num_shards: the loader reads them from the process group.
    try:  # what the loader refuses (a missing folder, no images), as one line per rank
        loader = classification_loader(
            args.data, train=True, batch_size=args.batch_size, size=args.size, backend=args.backend,
            device=str(device), num_workers=args.workers, seed=args.seed, last_batch=args.last_batch,
        )
    except (OSError, ValueError, RuntimeError) as exc:
        raise SystemExit(f"rank {rank}: {exc}") from None
    torch.manual_seed(args.seed)  # before the model: the same --seed, the same first weights
    net = tiny_net(len(loader.classes)) if args.model == "tiny" else torchvision.models.resnet18(
        num_classes=len(loader.classes))  # DDP copies rank 0's weights to the other ranks
    model = DistributedDataParallel(net.to(device), device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    ckpt = Path(args.checkpoint or ".") / f"rank{rank}.pt"
    step, first_epoch = 0, 0
    if args.resume:
        if not ckpt.exists():  # e.g. resumed with more ranks than saved: say so on every rank
            saved_ranks = len(list(ckpt.parent.glob("rank*.pt")))
            hint = (f"{saved_ranks} rank(s) saved checkpoints there; resume with --nproc_per_node={saved_ranks} "
                    "(each rank resumes its own)" if saved_ranks else "none was saved: run once without --resume")
            raise SystemExit(f"rank {rank}: no checkpoint {ckpt}: {hint}")
        # map_location: the tensors come back to this rank's device, whatever saved them.
        saved = torch.load(ckpt, map_location=device, weights_only=True)
        model.module.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        try:  # a state of another dataset, batch size or rank count: named, one line per rank
            loader.load_state_dict(saved["loader"])  # the next iter() is the rest of that epoch
        except ValueError as exc:
            raise SystemExit(f"rank {rank}: cannot resume from {ckpt}: {exc}") from None
        step, first_epoch = saved["step"], saved["loader"]["epoch"]

    def save() -> None:
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                    "loader": loader.state_dict(), "step": step}, ckpt)

    print(f"rank {rank}/{world}: {loader.backend} loader, {len(loader)} batches per epoch on {device}",
          flush=True)
    loss = torch.zeros(())
    for epoch in range(first_epoch, args.epochs):
        before = step
        # With "partial" ranks may get one batch more than others: join() lets DDP finish.
        with model.join(enable=args.last_batch == "partial"):
            for images, labels in loader:  # this epoch (after a resume, the rest of it)
                loss = torch.nn.functional.cross_entropy(model(images), labels)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                step += 1
                if args.record:
                    with open(f"{args.record}.rank{rank}.jsonl", "a") as record:
                        record.write(json.dumps({"epoch": epoch, "step": step, "labels": labels.tolist()}) + "\n")
                if step == args.stop_after:
                    break
        if rank == 0 and step > before:  # a resumed epoch's rest may be empty (a checkpoint at its end)
            print(f"epoch {epoch}  step {step}  loss {loss.item():.3f}", flush=True)
        if step == args.stop_after:
            break
    if args.checkpoint:  # a run to the end: the next epoch's start; a break: where it stopped
        save()
    print(f"rank {rank}: trained {step} steps" + (f", checkpoint {ckpt}" if args.checkpoint else ""), flush=True)
    dist.destroy_process_group()
    if scratch is not None:
        scratch.cleanup()
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
