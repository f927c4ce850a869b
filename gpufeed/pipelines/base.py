"""What every image-classification loader shares: the contract, whatever the backend.

A backend only implements :meth:`ClassificationLoader._epoch_batches`; epochs, shards,
``len()``, the skipped-file report, mid-epoch resume (``state_dict``) and the optional
device augmentation live here.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, NoReturn

import numpy as np
import torch

from gpufeed.backends import BackendChoice
from gpufeed.datasets.samples import SampleSource
from gpufeed.gpu_transforms.arrays import constant
from gpufeed.pipelines.options import LoaderOptions
from gpufeed.pipelines.plan import EpochPlan
from gpufeed.pipelines.seeds import augment_seed
from gpufeed.pipelines.skips import SkipLog, Skipped
from gpufeed.pipelines.states import differences, settings_of

Batch = tuple[torch.Tensor, torch.Tensor]
Augment = Callable[[torch.Tensor, torch.Tensor], Batch]
#: A batch and its number in the epoch's plan (backends yield these).
NumberedBatch = tuple[int, torch.Tensor, torch.Tensor]

#: The ``state_dict`` format; a state of another format is refused.
STATE_FORMAT = "gpufeed.loader/1"
#: Settings that must match for a saved state to mean the same samples in the same order.
_STATE_SETTINGS = ("train", "batch_size", "shuffles", "seed", "shard_id", "num_shards", "last_batch",
                   "shuffle_buffer")


class ResumePoint(NamedTuple):
    """A position in a loader's epochs, as a state saves it: the next batch to deliver
    (``batch`` of ``epoch``), the samples delivered and files skipped in that epoch before
    it, and the epoch last given to ``set_epoch`` (None if none)."""

    epoch: int
    batch: int
    samples_yielded: int
    skipped: list[Skipped]
    set_epoch: int | None = None


#: What accelerate's ``skip_first_batches`` and code written for DataLoaders reach for to skip
#: or reorder samples, and the kit's loaders and table batches do not have.
DATALOADER_ONLY = ("sampler", "dataset")


def missing_attribute(obj: object, name: str, shard_hint: str) -> AttributeError:
    """The error for an attribute ``obj`` lacks: for :data:`DATALOADER_ONLY` names it says
    what the kit has instead (its own order, ``state_dict`` to go on from a batch), so that
    ``skip_first_batches`` does not fail naming an attribute only; ``getattr(obj, name,
    None)`` still gives None."""
    kind = type(obj).__name__
    if name in DATALOADER_ONLY:
        return AttributeError(
            f"{kind} has no {name}: it orders its samples itself (shuffle=, seed=, set_epoch). To go on from "
            "a batch, save its state_dict() and call load_state_dict(state) on a new one (accelerate: "
            f"register_for_checkpointing(it)); {shard_hint}", name=name, obj=obj)
    return AttributeError(f"{kind!r} object has no attribute {name!r}", name=name, obj=obj)


class EpochHook:
    """``loader.batch_sampler``: where PyTorch Lightning tells a loader which epoch it runs.

    Lightning never calls a loader's own ``set_epoch``: at the start of every epoch it calls
    ``set_epoch(epoch)`` on ``dataloader.sampler`` and on ``dataloader.batch_sampler.sampler``
    (a ``DistributedSampler``'s hook), with the number of epochs it has finished. This
    object is that ``batch_sampler`` and its ``sampler``, and its ``set_epoch`` is the
    loader's. Without it, a run resumed from a checkpoint taken after an epoch's last batch
    (``ModelCheckpoint(every_n_train_steps=...)``) got that epoch's empty rest as its next
    epoch, and trained nothing more (or, under ``limit_train_batches``, only the rest of
    the cut epoch).

    Not a torch ``Sampler``: it yields no indices. The loader has no ``sampler``, so
    Lightning's checks of a shuffling sampler and ``overfit_batches``' rewiring of it leave
    the loader alone.
    """

    def __init__(self, loader: ClassificationLoader) -> None:
        self._loader = loader

    @property
    def sampler(self) -> EpochHook:
        """This object: Lightning looks for ``set_epoch`` on ``batch_sampler.sampler``."""
        return self

    def set_epoch(self, epoch: int) -> None:
        """The loader's :meth:`ClassificationLoader.set_epoch`."""
        self._loader.set_epoch(epoch)


class ClassificationLoader:
    """An iterable of ``(images, labels)`` batches; re-iterable epoch after epoch.

    - ``images``: ``(B, 3, size, size)`` (``NCHW``) or ``(B, size, size, 3)`` (``NHWC``),
      of the requested dtype, on the requested device; float dtypes are normalised with
      ``mean``/``std``, ``uint8`` holds raw 0..255 pixels.
    - ``labels``: ``(B,)`` int64 on the same device.

    Attributes:
        backend: ``"dali"`` or ``"torch"``; ``choice.reason`` says why it was picked.
        classes: class names, index = label (``class_to_idx``: name -> label).
        skipped: the files the last epoch left out, with reasons.
        epoch: the number of the epoch last started (0 for the first).
        samples_yielded: samples yielded so far in the current epoch (after
            :meth:`load_state_dict`, counted from the epoch's start, batches before the
            cut included).
    """

    backend = "abstract"

    def __getattr__(self, name: str) -> NoReturn:  # only called for attributes the loader lacks
        raise missing_attribute(self, name, "to shard, pass shard_id= and num_shards=")

    def __init__(self, samples: SampleSource, options: LoaderOptions, device: torch.device,
                 choice: BackendChoice, gpu_augment: Augment | None = None) -> None:
        self.samples, self.options, self.device, self.choice = samples, options, device, choice
        self.gpu_augment = gpu_augment
        self.plan = EpochPlan(
            len(samples), options.batch_size, shuffle=options.shuffles, seed=options.seed,
            shard_id=options.shard_id, num_shards=options.num_shards, last_batch=options.last_batch,
            groups=samples.groups, shuffle_buffer=options.shuffle_buffer,
        )
        if len(self.plan) == 0 and self.plan.shard_size > 0:
            warnings.warn(
                f"gpufeed: rank slice {self.plan.shard_id} of {self.plan.num_shards} has {self.plan.shard_size} "
                f"sample(s), fewer than batch_size={options.batch_size}, and last_batch='drop' drops that "
                "incomplete batch: this loader yields no batch; use a smaller batch_size or "
                "last_batch='partial' / 'fill'", stacklevel=3)
        if options.train:  # 'partial' suits evaluation: each sample once, whatever the steps
            self.plan.warn_uneven_steps(
                "gpufeed: with last_batch='partial'", "samples", "Train with last_batch='drop' (the smallest "
                "slice's full batches) or 'fill' (padded to the largest); 'partial' suits evaluation, each "
                "sample once", stacklevel=3)
        self.log = SkipLog(options.on_error)
        self.epoch = -1
        self.samples_yielded = 0
        self._next_batch = 0  # the plan's next batch in the current epoch
        self._start_at = 0  # the batch the next iter() starts from (load_state_dict)
        # Whether the next iter() has yet to start: state_dict() then names where it will
        # start, not where the last epoch stopped (a checkpoint taken right after a resume).
        self._pending = True
        # What load_state_dict carried over of the epoch's batches before the cut.
        self._carried: tuple[int, list[Skipped]] = (0, [])
        # Whether the last iter() ran to its end (StopIteration): the epoch is closed, and
        # a state taken now is the next epoch's start, not this epoch's end.
        self._closed = False
        # Counts iter() calls: an iterator resumed after a newer one started is refused.
        self._iterations = 0
        # The epoch last given to set_epoch (saved in the state), and after load_state_dict
        # the one the state saved: Lightning cycles a shorter train loader within its epoch
        # (max_size_cycle), so a state may be a pass past the epoch Lightning sets on resume.
        self._set: int | None = None
        self._resumed_set: int | None = None

    @property
    def classes(self) -> list[str]:
        """Class names, in label order (index ``i`` is label ``i``): a list, as torchvision
        ``ImageFolder``'s ``classes`` (a tuple compared unequal to it)."""
        return list(self.samples.classes)

    @property
    def class_to_idx(self) -> dict[str, int]:
        """Class name -> label, as torchvision ``ImageFolder``'s ``class_to_idx``."""
        return {name: label for label, name in enumerate(self.classes)}

    @property
    def skipped(self) -> list[Skipped]:
        """The files left out so far (``on_error="skip"``), each with its path and reason."""
        return self.log.skipped

    @property
    def batch_size(self) -> int:
        """Samples per batch, as a ``DataLoader``'s ``batch_size`` (what Lightning and
        Accelerate read)."""
        return self.options.batch_size

    @property
    def dataset(self) -> SampleSource:
        """The samples of all shards (``len(loader.dataset)``, as with a ``DataLoader``;
        this rank's share is ``len(loader) * batch_size`` at most); for an image folder or
        a file list, with ImageFolder's ``class_to_idx``, ``targets``, ``samples`` and
        ``imgs`` (:class:`~gpufeed.pipelines.sources.SampleList`)."""
        return self.samples

    def close(self) -> None:
        """Stop this loader's worker processes (and free DALI's pipeline) now, rather than
        when the loader is collected. Iterating again starts them afresh. Also on leaving a
        ``with`` block."""
        raise NotImplementedError

    def __enter__(self) -> ClassificationLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def batches_ahead(self) -> int:
        """Batches this loader holds or prepares ahead of the one taken (worker processes'
        prefetch, DALI's queue): a measurement that starts with its first batches times
        how fast they were banked, not how fast they are made (``gpufeed stall`` warms up
        past them)."""
        raise NotImplementedError

    @property
    def batch_sampler(self) -> EpochHook:
        """Where PyTorch Lightning sets the epoch: ``batch_sampler.sampler.set_epoch(k)`` is
        :meth:`set_epoch` (see :class:`EpochHook`; it yields no indices)."""
        return EpochHook(self)

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` run epoch ``epoch``, e.g. when resuming training from
        a checkpoint.

        Epoch ``k`` of a resumed loader is epoch ``k`` of an uninterrupted run with the
        same settings: the same shuffle order and, on every backend, the same random
        crops and flips (they depend only on ``seed``, the shard and the epoch). So is a
        ``gpu_augment`` stage built without a seed of its own, which the loader reseeds
        every batch; a stage given ``seed=`` keeps its own stream across epochs, so its
        draws repeat only in a run started from epoch 0.

        After :meth:`load_state_dict`, ``set_epoch`` of the epoch that had been set when the
        state was taken keeps its position (the rest of that epoch comes next: nothing, for
        a state taken after the epoch's last batch; with Lightning's ``max_size_cycle``,
        which iterates this, the shorter train loader, again within its epoch, the rest of
        that later pass). For a state taken without ``set_epoch``, the epoch the state
        resumes keeps it. Any other epoch starts afresh (the loaded position is dropped
        without a word: a loop that caps its steps per epoch does this on purpose, and
        Lightning resumed after its epoch's last step sets the next epoch, which the run
        that never stopped also started afresh).
        """
        if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral):
            raise TypeError(f"epoch must be an int, got {epoch!r}")
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        epoch = int(epoch)
        resumed_set, self._resumed_set, self._set = self._resumed_set, None, epoch
        # A state that names the epoch set when it was taken keeps its cut for that epoch
        # only: Lightning resumed after the last step of its epoch k sets k + 1, which is
        # the epoch a cycled loader's state may be in, and the run that never stopped
        # started that epoch afresh there.
        keeps = self.epoch + 1 if resumed_set is None else resumed_set
        if self._start_at and self._pending and epoch == keeps:
            # The epoch a loaded state resumes mid-way: a loop that calls set_epoch every
            # epoch (as with DistributedSampler) keeps the cut instead of replaying it.
            return
        self.epoch = epoch - 1
        self._start_at = 0
        self._pending = True
        self._carried = (0, [])
        self._restart()

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is: call it after any batch, save it with the checkpoint, and
        :meth:`load_state_dict` it into a new loader to go on from the next batch.

        A training loop checkpoints the model, the optimizer and this state together,
        after the same step; in a distributed job every rank saves its own (the state
        names its shard)::

            state = {"model": model.state_dict(), "optim": opt.state_dict(),
                     "loader": loader.state_dict()}
            torch.save(state, f"ckpt-rank{rank}.pt")
            ...  # later, in a new process, with a loader built with the same settings
            loader.load_state_dict(torch.load(f"ckpt-rank{rank}.pt")["loader"])
            for images, labels in loader:  # the rest of the epoch, then go on as usual

        Taken inside the loop after an epoch's last batch (a step-based checkpoint), the
        state is that epoch's end (``batch`` = ``len(loader)``): loaded, the next ``iter()``
        yields the rest of that epoch, nothing, so a loop whose own counter was saved at
        that epoch finishes it and goes on, and one that calls ``set_epoch`` resumes
        exactly with either that epoch's number or the next one's. Taken after the loop
        ran to its end, the state is the next epoch's start. After :meth:`set_epoch` or
        :meth:`load_state_dict` it is where the next ``iter()`` starts. Mid-epoch it also
        carries the epoch's count so far
        (:attr:`samples_yielded`) and the files skipped so far, so the resumed loader's
        ``samples_yielded`` and ``skipped`` at the end of the epoch are those of an
        uninterrupted run. Plain data (ints, strings, lists), so ``torch.save``,
        ``torch.load(weights_only=True)`` and JSON all keep it.

        Returns:
            ``{"format", "dataset", "settings", "epoch", "batch", "samples_yielded",
            "skipped", "set_epoch"}``: the dataset's fingerprint and the plan's settings
            (checked on load), the position (the next batch to deliver) and the epoch last
            given to :meth:`set_epoch` (None if none).
        """
        if self._pending:
            epoch, batch = self.epoch + 1, self._start_at
            yielded, skipped = self._carried
        elif self._closed:  # the epoch ran to its end: the next one's start
            epoch, batch, yielded, skipped = self.epoch + 1, 0, 0, []
        else:
            epoch, batch = self.epoch, self._next_batch
            yielded, skipped = self.samples_yielded, self.log.skipped
        return self._state(ResumePoint(epoch, batch, yielded, skipped, self._set))

    def _state(self, point: ResumePoint) -> dict[str, Any]:
        """The state of this loader's dataset and plan at ``point`` (also what
        ``dali_iterator()`` fed by the kit saves, so either one's state resumes the other)."""
        return {
            "format": STATE_FORMAT,
            "dataset": self.samples.fingerprint(),
            "settings": settings_of(self.options, _STATE_SETTINGS),
            "epoch": point.epoch,
            "batch": point.batch,
            "samples_yielded": point.samples_yielded,
            "skipped": [[s.path, s.reason] for s in point.skipped],
            "set_epoch": point.set_epoch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Make the next ``iter()`` yield exactly the rest of the epoch ``state`` was
        taken in: the batches after the last one delivered, with the same samples, crops,
        flips and (for a ``gpu_augment`` stage without its own seed) augmentation.

        The loader must be built with the same dataset and the same plan settings;
        everything else (backend, device, workers, dtype) may differ. A state of another
        rank of the same split (Lightning saves rank 0's alone and loads it on every rank)
        resumes this rank's own slice from the same epoch and batch.

        Raises:
            ValueError: ``state`` is not a loader state, or was taken on another dataset
                (other files or shard files), or with settings that change the plan
                (batch size, seed, shuffling, shard, last-batch policy); each difference
                is named.
        """
        point = self._resume_point(state)
        self.set_epoch(point.epoch)
        self._start_at = point.batch
        if point.batch > 0:  # a state at an epoch's start carries nothing
            self._carried = (point.samples_yielded, point.skipped)
        self._set = self._resumed_set = point.set_epoch

    def _resume_point(self, state: dict[str, Any]) -> ResumePoint:
        """Where ``state`` (:meth:`state_dict`) goes on from on this loader, checked as
        :meth:`load_state_dict` says (a state of another rank: this rank's own counts)."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a gpufeed loader state (expected format {STATE_FORMAT!r}, got "
                             f"{state.get('format') if isinstance(state, dict) else type(state).__name__!r})")
        missing = [k for k in ("dataset", "settings", "epoch", "batch") if k not in state]
        if missing or not isinstance(state["dataset"], dict) or not isinstance(state["settings"], dict):
            raise ValueError(f"not a gpufeed loader state: {', '.join(missing) or 'dataset or settings'} "
                             "missing or malformed")
        mine = settings_of(self.options, _STATE_SETTINGS)
        saved = dict(state["settings"])
        # Another rank's state, of the same split: Lightning saves rank 0's loader state
        # alone and loads it on every rank. The ranks stand at the same epoch and batch
        # (drop and fill step alike), so this rank goes on from there with its own slice;
        # what the state counted of rank 0's samples and files is not carried over.
        other_rank = saved.get("shard_id") != mine["shard_id"] and saved.get("num_shards") == mine["num_shards"]
        if other_rank:
            saved["shard_id"] = mine["shard_id"]
        problems = (differences("dataset", state["dataset"], self.samples.fingerprint())
                    + differences("settings", saved, mine))
        if problems:
            raise ValueError("this loader state belongs to another dataset or plan: " + "; ".join(problems))
        # Whole numbers as saved, not coerced: "3", 2.7 or True for a batch is a damaged
        # or hand-made state, and int() would resume from a position nobody saved.
        counts = {k: state.get(k, 0) for k in ("epoch", "batch", "samples_yielded")}
        set_before = state.get("set_epoch")  # None: never set, or a state from before the key
        if set_before is not None:
            counts["set_epoch"] = set_before
        bad = {k: v for k, v in counts.items() if isinstance(v, bool) or not isinstance(v, numbers.Integral)}
        if bad:
            raise ValueError(f"not a gpufeed loader state: {bad} (each must be a whole number)")
        epoch, batch, yielded = (int(counts[k]) for k in ("epoch", "batch", "samples_yielded"))
        try:
            skipped = [Skipped(str(path), str(reason)) for path, reason in state.get("skipped", [])]
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not a gpufeed loader state: bad skipped list ({exc})") from None
        if other_rank and batch > len(self.plan) >= 0:
            # With last_batch="partial" ranks may differ by a batch: past this rank's last
            # batch, the other rank's position is this rank's epoch end.
            batch = len(self.plan)
        if epoch < 0 or not 0 <= batch <= len(self.plan):
            raise ValueError(f"state epoch {epoch}, batch {batch} is outside this plan "
                             f"({len(self.plan)} batches per epoch)")
        if other_rank:  # this rank's own count of the batches before the cut, no skipped files
            size = self.plan.batch_size
            yielded = batch * size if self.plan.replaces_bad else min(batch * size, self.plan.shard_size)
            skipped = []
        return ResumePoint(epoch, batch, yielded, skipped, None if set_before is None else int(set_before))

    def _restart(self) -> None:
        """Backends that keep state across epochs drop it here."""

    def __len__(self) -> int:
        """Planned batches per epoch for this shard (with ``partial`` a batch whose files
        were all skipped is not yielded, so an epoch with bad files can come out shorter;
        ``drop`` and ``fill`` fill bad files' places)."""
        return len(self.plan)

    def __iter__(self) -> Iterator[Batch]:
        self._iterations += 1
        this = self._iterations
        self.epoch += 1
        mine = self.epoch
        start, self._start_at = self._start_at, 0
        self._closed = False
        self._next_batch = start
        self._pending = False
        self.log.start_epoch()
        # A resumed epoch goes on counting from the cut (load_state_dict), and the files
        # skipped before it are known bad: not read again, and listed in loader.skipped.
        (self.samples_yielded, carried), self._carried = self._carried, (0, [])
        for skipped in carried:
            self.log.add(skipped.path, skipped.reason)
        reseed = self.gpu_augment is not None and getattr(self.gpu_augment, "has_own_seed", True) is False
        rest = self._epoch_batches(self.epoch, start) if start < len(self.plan) else iter(())
        for number, images, labels in rest:
            self.samples_yielded += len(labels)
            if reseed:  # per batch, so a run resumed mid-epoch draws what this one draws
                self.gpu_augment.seed_stream(
                    augment_seed(self.options.seed, self.options.shard_id, self.epoch, number))
            if self.gpu_augment is not None:
                images, labels = self.gpu_augment(images, labels)
            self._next_batch = number + 1
            yield images, labels
            if self._iterations != this:
                # The newer iterator reset the workers or the pipeline this one reads from:
                # going on would hand out another epoch's batches, some twice, some never.
                raise RuntimeError(
                    "this iterator of the loader was superseded: a newer iter(loader) started epoch "
                    f"{self.epoch} while it was in epoch {mine} "
                    "(a loader runs one epoch at a time, as a DataLoader with persistent workers does); "
                    "for two streams (zip(loader, loader)), build two loaders")
        self._next_batch = len(self.plan)
        self._closed = True
        self.log.warn_new(self.epoch, self.plan.shard_size)

    def _epoch_batches(self, epoch: int, start: int) -> Iterator[NumberedBatch]:
        """``(batch number, images, labels)`` for the plan's batches of ``epoch`` from
        batch ``start`` on, leaving out batches whose files were all skipped."""
        raise NotImplementedError

    def __repr__(self) -> str:
        o = self.options
        return (
            f"{type(self).__name__}(samples={len(self.samples)}, classes={len(self.classes)}, "
            f"train={o.train}, batch_size={o.batch_size}, size={o.size}, dtype={o.dtype}, "
            f"layout={o.layout}, device={self.device}, shard={o.shard_id}/{o.num_shards}, "
            f"last_batch={o.last_batch.value})"
        )


Allocator = Callable[[tuple[int, ...], torch.dtype], torch.Tensor]


def shared_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor in shared memory: what a DataLoader worker returns
    travels to the main process without the copy ``share_memory_()`` would make."""
    storage = torch.UntypedStorage._new_shared(torch.Size(shape).numel() * dtype.itemsize)
    return torch.empty(0, dtype=dtype).set_(storage, 0, shape)


def pinned_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor in pinned (page-locked) memory, for batches bound for a
    GPU: ``.to(device, non_blocking=True)`` from it is a real asynchronous copy, where a copy
    from pageable memory first waits for the GPU's queue to drain (CUDA's pageable
    host-to-device rule), i.e. for the previous training step. Fresh from torch's caching
    host allocator every time, which hands a block out again only once the copies recorded
    on it have finished, so a batch still being copied is never overwritten (pooled
    :class:`ReusedBuffers` could not tell)."""
    return torch.empty(shape, dtype=dtype, pin_memory=True)


class ReusedBuffers:
    """CPU output tensors whose memory is reused once nobody holds them any more.

    glibc maps large blocks anew on every allocation, so a fresh tensor per batch pays
    page faults on every page it writes. A pooled buffer is handed out again only when its
    storage has no reference but the pool's (no batch, view or numpy array of it alive),
    so a batch a user keeps is never overwritten.
    """

    def __init__(self, keep: int = 4) -> None:
        self.keep = keep
        self._storages: list[torch.UntypedStorage] = []
        self._can_count = hasattr(torch._C, "_storage_Use_Count")

    def _free(self, storage: torch.UntypedStorage) -> bool:
        return torch._C._storage_Use_Count(storage._cdata) == 1

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised contiguous CPU tensor of ``shape`` and ``dtype``."""
        if not self._can_count:
            return torch.empty(shape, dtype=dtype)
        nbytes = torch.Size(shape).numel() * dtype.itemsize
        for storage in self._storages:
            if storage.nbytes() == nbytes and self._free(storage):
                return torch.empty(0, dtype=dtype).set_(storage, 0, shape)
        out = torch.empty(shape, dtype=dtype)
        if len(self._storages) >= self.keep:  # make room: forget a free buffer of another size
            free = [s for s in self._storages if self._free(s)]
            if not free:
                return out
            self._storages.remove(free[0])
        self._storages.append(out.untyped_storage())
        return out


class Normalizer:
    """uint8 ``(B, 3, H, W)`` batch (any memory layout) -> the contract's dtype and layout.

    ``(x / 255 - mean) / std`` is ``x * scale + bias`` with ``scale = 1 / (255 std)`` and
    ``bias = -mean / std``: one fused pass from uint8 to the output, written straight
    into the output's layout (no separate transpose).
    """

    def __init__(self, options: LoaderOptions, allocate: Allocator | None = None) -> None:
        std = torch.tensor(options.std, dtype=torch.float32).view(1, 3, 1, 1)
        mean = torch.tensor(options.mean, dtype=torch.float32).view(1, 3, 1, 1)
        self.scale, self.bias = 1.0 / (255.0 * std), -mean / std
        self._scale_np, self._bias_np = self.scale.numpy(), self.bias.numpy()
        self.options, self.allocate = options, allocate

    def _empty(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        if self.allocate is not None and device.type == "cpu":
            return self.allocate(shape, self.options.dtype)
        return torch.empty(shape, dtype=self.options.dtype, device=device)

    def output(self, batch: int, height: int, width: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """An uninitialised output batch, and its ``(B, 3, H, W)`` view to :meth:`fill`."""
        if self.options.layout == "NHWC":
            out = self._empty((batch, height, width, 3), device)
            return out, out.permute(0, 3, 1, 2)
        out = self._empty((batch, 3, height, width), device)
        return out, out

    def fill(self, view: torch.Tensor, images: torch.Tensor) -> None:
        """Write uint8 ``images`` into ``view`` (a slice of an :meth:`output` view), normalised."""
        if not self.options.normalizes:
            view.copy_(images)
        elif view.device.type == "cpu":
            # numpy's single-threaded ufuncs: torch's intra-op threads, spinning against the
            # loader's workers (or DALI's threads) for the same few cores, measured ~6x
            # slower on this (1, 3, H, W) slice on 2 cores. Computed in float32, then
            # stored in the output's dtype (float16 rounds once, as on the GPU).
            out = view.numpy()
            scaled = np.multiply(images.numpy(), self._scale_np, out=out if out.dtype == np.float32 else None)
            np.add(scaled, self._bias_np, out=out, casting="same_kind")
        elif self.options.dtype == torch.float32:
            # One pass, uint8 in, float32 out (no float copy of the batch to multiply-add)
            torch.addcmul(self._on(view.device, self.bias), images, self._on(view.device, self.scale), out=view)
        else:  # compute in float32, store in half
            view.copy_(torch.addcmul(self._on(view.device, self.bias), images.to(torch.float32),
                                     self._on(view.device, self.scale)))

    @staticmethod
    def _on(device: torch.device, values: torch.Tensor) -> torch.Tensor:
        """``values`` (1, 3, 1, 1) on ``device``, copied there once, not per batch."""
        return constant(tuple(values.flatten().tolist()), device).view(1, 3, 1, 1)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if not self.options.normalizes and self.options.layout == "NCHW" and images.is_contiguous():
            return images
        b, _, h, w = images.shape
        out, view = self.output(b, h, w, images.device)
        if images.device.type == "cpu":
            # Image by image: one image's input and output stay in cache (a broadcast
            # multiply-add over a whole float32 batch measured ~4x slower here).
            for k in range(b):
                self.fill(view[k: k + 1], images[k: k + 1])
        else:
            self.fill(view, images)
        return out
