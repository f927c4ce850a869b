"""The DALI backend: the kit's pipeline, on the GPU or in DALI's CPU-only mode.

On a GPU the whole pipeline runs in DALI: hardware JPEG decode (``device="mixed"``),
resize and normalisation on the device, copied once into a torch tensor.

In CPU-only mode DALI decodes (only the random crop's region of each JPEG, on DALI's
threads) and torch does the geometry and normalisation on the decoded pixels while DALI
decodes the next batch, with the torch backend's code (:mod:`gpufeed.pipelines.geometry`,
which says why). The val geometry is torchvision's own, so val batches match the torch
backend's.

Either way the loader adds what DALI leaves to the user: the shared epoch plan,
skipped-file accounting, and recovery when a decoder fails on a file the byte checks let
through (the pipeline is rebuilt and the epoch goes on from the failed batch, without
the bad file).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from nvidia.dali.plugin.pytorch import DALIClassificationIterator, LastBatchPolicy, feed_ndarray

from gpufeed.backends import BackendChoice
from gpufeed.datasets.image_bytes import pil_reason, sample_fault
from gpufeed.datasets.samples import SampleSource
from gpufeed.datasets.shards.webdataset import JSON_LABEL
from gpufeed.pipelines import geometry
from gpufeed.pipelines.base import (
    Augment,
    ClassificationLoader,
    Normalizer,
    NumberedBatch,
    ResumePoint,
    ReusedBuffers,
)
from gpufeed.pipelines.dali_pipeline import build_pipeline
from gpufeed.pipelines.dali_readers import STATE_FORMAT as READER_STATE_FORMAT
from gpufeed.pipelines.dali_readers import load_into, reader_iterator, shard_format
from gpufeed.pipelines.feed_workers import FeedWorkers, feed_processes
from gpufeed.pipelines.feeds import FileFeed, IteratorSkips, crop_inputs, dali_input, sample_stamp
from gpufeed.pipelines.options import LastBatch, LoaderOptions
from gpufeed.pipelines.plan import EpochPlan
from gpufeed.pipelines.threads import SamplePool

_TORCH_DTYPE = {"FLOAT": torch.float32, "FLOAT16": torch.float16, "UINT8": torch.uint8}


class _PlannedIterator(DALIClassificationIterator):
    """DALI's classification iterator with ``len()`` from the epoch plan (DALI knows it
    only from a reader, or from ``size=``, which forbids the partial last batch), a
    per-epoch skipped-file report (``gpufeed_skipped``) and the loader's ``state_dict()``."""

    planned_batches = 0
    planned_samples = 0
    gpufeed_feed: FileFeed | None = None
    gpufeed_skipped: IteratorSkips | None = None
    #: Why the kit's feed drives this iterator rather than DALI's readers (for errors).
    gpufeed_fed_because = "the source is not WebDataset or TFRecord shards"
    #: Batches returned so far in the epoch under way (0 between epochs).
    _taken = 0
    #: The loader's state at this iterator's start (dataset, settings), which
    #: :meth:`state_dict` fills in with the position.
    _state_of: Callable[[ResumePoint], dict[str, Any]] | None = None
    #: The next batch to return, and the samples returned before it in its epoch.
    _at = ResumePoint(0, 0, 0, [])
    #: A state at an epoch's end was loaded: the first pass is that epoch's rest, nothing.
    _ended_pass = False
    #: Built from a state: the first iter() is the resumed pass, not a cut-short one.
    _resumed = False

    def __len__(self) -> int:
        return self.planned_batches

    @property
    def size(self) -> int:
        """Samples of this rank slice per epoch; with ``fill``, the samples delivered,
        padding included (``len(it) * batch_size``), as the kit's shard iterator counts
        them (:attr:`ReaderIterator.size <gpufeed.pipelines.dali_readers.ReaderIterator.size>`).

        DALI's own reader iterators count otherwise, by reader: over a reader with
        ``pad_last_batch=True`` their ``size`` is the (largest) slice's samples, the FILL
        padding not counted (320 for 320 samples in batches of 48, where 336 come); over
        an unpadded reader (DALI's default) it is rounded up to whole batches under FILL
        and PARTIAL alike (336). The kit counts what this iterator delivers under
        ``fill`` (so ``size / batch_size`` is ``len(it)`` on every rank, also on a slice
        padded to a larger one's batch count) and the slice's own samples otherwise.

        DALI's private ``_size`` stays -1: given a size, DALI asserts that every batch is
        full (a partial last batch fails) and ends the epoch by its own count. A script
        that computes its steps per epoch from ``_size``, as NVIDIA's ImageNet example does
        (``ceil(_size / batch_size)``), uses ``len(it)`` or this instead.
        """
        return self.planned_samples

    def state_dict(self) -> dict[str, Any]:
        """Where this iterator is, in the loader's state format: call it after any batch;
        ``loader.dali_iterator(checkpoint=state)`` in a new process goes on from the next
        batch with the same samples, crops and flips (the feed draws them from seed, epoch
        and sample), and ``loader.load_state_dict(state)`` resumes the loader itself there
        (and the loader's own state resumes this iterator). As the loader's: after an
        epoch's last batch, that epoch's end (resumed, the first pass is empty); after its
        ``StopIteration``, the next epoch's start."""
        epoch, batch, yielded, _, _ = self._at
        skipped = self.gpufeed_skipped.skipped if batch and self.gpufeed_skipped is not None else []
        return self._state_of(ResumePoint(epoch, batch, yielded, skipped))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (this iterator's or a loader's ``state_dict()``) in place, as
        ``loader.dali_iterator(checkpoint=state)`` would (:func:`.dali_readers.load_into`;
        PyTorch Lightning resumes a loader so, before its first ``iter()``)."""
        load_into(self, state)

    def __iter__(self) -> _PlannedIterator:
        if self._resumed:  # the resumed pass: the rest of the state's epoch
            self._resumed = False
            return self
        if self._taken >= len(self):  # every batch taken, the end not asked for (a loop that counts)
            self._taken = 0
        if self._taken:
            # DALI's reader iterators log "does not support resetting while epoch is not
            # finished"; fed by the kit, this one went on with the epoch without a word.
            warnings.warn(
                f"dali_iterator(): iter() after {self._taken} of this epoch's {len(self)} batches goes on with "
                f"the remaining {max(len(self) - self._taken, 0)}, as DALI's iterators do (they cannot restart an "
                "epoch), so this pass is short. A framework that stops a pass early and iterates again does "
                "this: PyTorch Lightning's sanity check (num_sanity_val_steps) and limit_train_batches / "
                "limit_val_batches. Hand the framework the loader itself (each iter() is a whole new epoch), "
                "or take every batch of each pass (Trainer(num_sanity_val_steps=0), no limit_*_batches)",
                stacklevel=2)
            # Not DALI's __iter__: its reset() mid-epoch, which reader iterators ignore, could
            # run this fed pipeline on into the next epoch (1 + 3 batches in one pass).
            return self
        return super().__iter__()

    def __next__(self) -> Any:
        try:
            if self._ended_pass:  # resumed at an epoch's end: nothing is left of it
                self._ended_pass = False
                raise StopIteration
            batch = super().__next__()
        except StopIteration:
            self._resumed, self._taken = False, 0
            self._at = ResumePoint(self._at.epoch + 1 if self._at.batch else self._at.epoch, 0, 0, [])
            raise
        except RuntimeError as exc:
            raise _named_decode_error(self.gpufeed_feed, exc) from exc
        self._resumed = False
        self._taken += 1
        feed = self.gpufeed_feed
        if feed is not None and feed.in_flight:
            # DALI returns batches in the order the feed handed them over: this one's epoch
            # and number (popping also keeps the record of batches in flight from growing).
            epoch, number, _ = feed.in_flight.popleft()
            self.gpufeed_skipped.delivered(epoch)
            before = self._at.samples_yielded if epoch == self._at.epoch else 0
            self._at = ResumePoint(epoch, number + 1, before + len(batch[0]["label"]), [])
        return batch


class DaliLoader(ClassificationLoader):
    """NVIDIA DALI on the GPU (``device="mixed"`` decode) or in CPU-only mode."""

    backend = "dali"

    def __init__(self, samples: SampleSource, options: LoaderOptions, device: torch.device,
                 choice: BackendChoice, gpu_augment: Augment | None = None) -> None:
        super().__init__(samples, options, device, choice, gpu_augment)
        # resolve_device gives a GPU its index: the current one (set per rank under torchrun).
        self.device_id = None if self.device.type == "cpu" else self.device.index
        self._on_cpu = self.device_id is None
        self._finish = Normalizer(self.options, ReusedBuffers().empty)
        self._processes = feed_processes(self.samples, self.options, on_gpu=not self._on_cpu)
        self._workers: FeedWorkers | None = None
        # Forked now, while the loader is made: a training script makes its loaders before
        # training starts, before any DALI pipeline runs (forking while pipelines run has
        # crashed DataLoader workers here). Not at the first pass: a validation loader made
        # first and iterated after the first epoch forked beside the running train pipeline.
        self._feed = FileFeed(self.samples, self.plan, self.log, self.options, self._feed_workers())
        self._pipe = None
        self._follows: int | None = None  # the epoch the current pipeline can go on with
        self._probe = None
        self._pool = SamplePool(self.options.workers, "gpufeed-resize")

    def _feed_workers(self) -> FeedWorkers | None:
        """This loader's feed worker processes (shared by its ``dali_iterator()`` feeds),
        forked when the loader is made, and again at the first pass after :meth:`close` (or
        after they stopped); None where the feed prepares its batches itself."""
        if self._processes and (self._workers is None or self._workers.closed):
            self._workers = FeedWorkers(self.samples, self.options, self._processes)
        return self._workers

    def close(self) -> None:
        """Release the DALI pipeline and stop the feed's worker processes now, rather than
        when the loader is collected (DALI's pipeline holds the loader in a reference
        cycle: that waits for a full garbage collection). Iterating again starts afresh."""
        self._feed.close()
        self._feed.workers = self._workers = None  # the shared memory goes with the last reference
        self._pipe = self._probe = None
        self._follows = None

    @property
    def _prefetch(self) -> int:
        # CPU: a deeper queue lets DALI's threads decode ahead while torch resizes.
        return 3 if self._on_cpu else 2

    @property
    def batches_ahead(self) -> int:
        """DALI's queue, plus the batches the feed's worker processes (running, or forked at
        the next pass) prepare ahead of it."""
        return self._prefetch + self._processes

    def _new_pipeline(self, stream: tuple[int, ...]) -> Any:
        return build_pipeline(self._feed, self.options, self.device_id, decode_only=self._on_cpu,
                              prefetch=self._prefetch, stream=stream,
                              pixels=self.samples.kind == "pixels")

    def _epoch_batches(self, epoch: int, start: int) -> Iterator[NumberedBatch]:
        if self._pipe is not None and self._follows == epoch and start == 0:
            # The last epoch ran dry and this is the next one: go on with the same
            # pipeline (the feed draws the crops, so nothing random carries over).
            self._pipe.reset()
        else:
            # A first epoch, a jump (set_epoch), or an epoch left half-way, whose batches
            # may still be queued inside DALI: a fresh pipeline, fed from this epoch.
            self._pipe = None  # free the old pipeline's buffers before allocating new ones
            self._feed.resume(epoch, start)
            self._feed.in_flight.clear()
            self._feed.workers = self._feed_workers()
            self._pipe = self._new_pipeline((epoch,))
        self._follows = None  # until this epoch runs dry
        while True:
            if self._pipe is None:
                raise RuntimeError("the loader was closed during this pass: iterate it again for a new one")
            try:
                images, labels = self._pipe.run()
            except StopIteration:
                break
            except RuntimeError as err:
                self._recover(err)
                continue
            number = self._feed.in_flight.popleft()[1]
            # Both conversions read DALI's buffers before the next run() reuses them.
            labels = torch.from_numpy(np.asarray(labels.as_tensor())).view(-1).to(torch.int64)
            if self._on_cpu:
                yield number, self._geometry_on_cpu(images), labels
                continue
            images = self._from_gpu(images)
            # From pinned memory: a copy from pageable memory first waits for the GPU's
            # queue to drain (CUDA's documented behaviour for pageable host-to-device
            # copies), so every batch would have waited for the previous training step.
            yield number, images, labels.pin_memory().to(images.device, non_blocking=True)
        self._follows = epoch + 1

    def _geometry_on_cpu(self, decoded: Any) -> torch.Tensor:
        """Variable-size uint8 HWC images -> the contract's batch (resize, crop, normalise).

        Samples are resized and normalised on a pool of as many threads as DALI has
        (torch's kernels release the GIL), each sample straight into its slice of the
        output while it is still in cache: done on the main thread alone, this hand-off
        becomes the pipeline's bottleneck.
        """
        size, o = self.options.size, self.options
        out, view = self._finish.output(len(decoded), size, size, torch.device("cpu"))

        def one(i: int) -> None:
            image = geometry.hwc_view(torch.from_numpy(np.asarray(decoded[i])))  # DALI's buffer, no copy
            if o.train:  # DALI already cropped (in the decoder) and flipped
                image = geometry.resize(image, size)
            else:
                image = geometry.val_crop(image, o.resize_shorter, size)
            self._finish.fill(view[i: i + 1], image)

        self._pool.run(len(decoded), one)
        return out

    def _from_gpu(self, images: Any) -> torch.Tensor:
        tensor = images.as_tensor()
        out = torch.empty(tensor.shape(), dtype=_TORCH_DTYPE[str(tensor.dtype).split(".")[-1]],
                          device=self.device)
        feed_ndarray(tensor, out, cuda_stream=torch.cuda.current_stream(self.device))
        return out

    def _recover(self, err: RuntimeError) -> None:
        """Find the file(s) DALI failed on among the batches in flight, record them, and
        rebuild the pipeline to go on from the first batch not yet delivered."""
        in_flight = list(self._feed.in_flight)
        if not in_flight:
            raise err
        names = self.samples.name
        # The samples fed to DALI (the feed's skips never reached it), each once.
        suspects = [i for i in dict.fromkeys(i for _, _, indices in in_flight for i in indices)
                    if self.log.known(names(i)) is None]
        found = False
        for i in suspects:
            data = self.samples.read_or_reason(i)
            reason = self._probe_sample(data)
            if reason is not None:
                found = True
                # Remembered with the version probed: not fed again while the file is unchanged
                # (each time would cost a pipeline rebuild). Raises under on_error="raise".
                self.log.add(names(i), reason, sample_stamp(self.samples, i, data))
        if not found:
            shown = ", ".join(map(names, suspects[:4])) + (" ..." if len(suspects) > 4 else "")
            raise RuntimeError(f"DALI failed on a batch of {len(suspects)} files ({shown}), "
                               f"yet each decodes on its own: {err}") from err
        epoch, batch_number = in_flight[0][:2]
        self._feed.resume(epoch, batch_number)
        self._feed.in_flight.clear()
        self._pipe = None
        self._pipe = self._new_pipeline((epoch, batch_number))

    def _probe_sample(self, data: np.ndarray | str) -> str | None:
        """Decode one sample (``data`` as ``read_or_reason`` gives it) through the same
        pipeline, alone: the reason it fails, or None."""
        pixels = self.samples.kind == "pixels"
        reason = sample_fault(data, pixels)
        if reason is not None:
            return reason
        if self._probe is None:
            self._probe = build_pipeline(None, self.options, self.device_id, batch_size=1, prefetch=1,
                                         pixels=pixels)
        crop = crop_inputs(data, self.options, 0, 0, pixels) if self.options.train else None
        if isinstance(crop, str):
            return crop
        # As the feed sends it (a file with stray header bytes was blamed here, the bytes
        # DALI refused being ones the feed drops); DALI wants dense arrays.
        fed = dali_input(data, crop, pixels)
        if isinstance(fed, str):  # handed over decoded, and that decoder failed
            return fed
        inputs = {"encoded": np.ascontiguousarray(fed), "label": np.zeros((), np.int32)}
        if crop is not None:
            if pixels:  # the window's pixels and its flip
                inputs["flip"] = crop[2]
            else:
                inputs.update(zip(("start", "shape", "flip"), crop, strict=True))
        for name, value in inputs.items():
            self._probe.feed_input(name, [value])
        try:
            self._probe.run()
        except RuntimeError as exc:
            self._probe = None  # a pipeline that raised is not reused
            # DALI's message: the operator, a traceback, then the decoder's own words.
            text = str(exc)
            cause = [ln.strip(" :") for ln in text.split("encountered:", 1)[-1].splitlines()
                     if ln.strip(" :") and "pipeline object is no longer valid" not in ln]
            op = "image decoder" if "decoders" in text else "pipeline"
            pil = None if pixels else pil_reason(data)
            return (f"DALI's {op} failed on it" + (f" ({'; '.join(cause)})" if cause else "")
                    + (f"; PIL: {pil}" if pil else ""))
        return None

    def dali_iterator(self, *, auto_reset: bool = True,
                      checkpoint: dict[str, Any] | None = None) -> DALIClassificationIterator:
        """A real ``DALIClassificationIterator`` over the kit's pipeline, for training
        scripts written against DALI.

        For WebDataset and TFRecord shards it reads with DALI's own reader
        (``fn.readers.webdataset`` / ``fn.readers.tfrecord``) and returns a
        :class:`~gpufeed.pipelines.dali_readers.ReaderIterator`: DALI's order, crops and
        last-batch handling (:mod:`gpufeed.pipelines.dali_readers` says how they differ
        from the loader's), no skipped-file report, and DALI's checkpointing:
        ``it.state_dict()`` after any batch, ``loader.dali_iterator(checkpoint=state)``
        to go on from the next one with the same samples, crops and flips. What follows
        is the iterator of other sources (image folders, raw and RAM caches).

        It yields ``[{"data": images, "label": labels}]`` like any DALI classification
        iterator (labels int32 ``(N, 1)``, as DALI gives them), with ``len()`` and
        ``size`` (samples per epoch, with ``fill`` padding included; DALI's private
        ``_size`` is -1: use ``len(it)`` or ``it.size``, see :attr:`_PlannedIterator.size`),
        and with the whole pipeline in DALI (decode, resize, normalise) on this loader's
        device, follows this loader's plan (shuffle, shard, last-batch policy)
        with its own epoch count, and skips files that fail the byte checks. Those are
        listed per epoch, like ``loader.skipped``, in ``it.gpufeed_skipped.skipped`` (an
        :class:`IteratorSkips`: the files left out of the epoch of the last batch
        returned). Decoder failures beyond those end the epoch with DALI's error (the file
        named), as in DALI; the loader itself recovers from them. Its crops and flips are
        the loader's, drawn by the feed from (seed, epoch, sample), so they repeat on a
        resumed run: ``it.state_dict()`` after any batch (the loader's state format, plain
        data), ``loader.dali_iterator(checkpoint=state)`` goes on from the next batch,
        the files skipped before it still listed; the state also resumes the loader
        itself, and a loader's state resumes this iterator.

        Without a GPU the iterator runs the whole graph in DALI's CPU mode, whose resize
        is slower than the loader's torch threads: about 0.6-0.7x the loader itself on
        2 cores (``docs/storage.md``), on any source.

        Args:
            auto_reset: as in DALI's iterators: start the next epoch after the last.
            checkpoint: an ``it.state_dict()`` to resume from: for shards read by DALI's
                readers, that iterator's DALI checkpoint; for other sources, a loader state
                (this iterator's or a loader's ``state_dict()``).

        Raises:
            ValueError: a loader with ``gpu_augment`` (the stage runs in the loader, not in
                DALI's iterator); the plan has no batch for this rank slice, where DALI would
                fail with "no data in the pipeline": a slice with no sample (fewer samples
                than ranks, e.g. a small validation set, under ``partial`` or ``drop``), or
                ``last_batch="drop"`` with fewer samples in the slice than ``batch_size``; the
                error says which, and that the loader itself yields 0 batches there. A
                ``checkpoint`` of the other kind (a DALI reader state for a fed source, or
                the reverse), or one taken on another dataset or plan (the difference named).
        """
        if self.gpu_augment is not None:
            # DALI's iterator hands over its pipeline's outputs; the stage runs in the loader.
            raise ValueError(
                "dali_iterator() yields DALI's own outputs, which gpu_augment does not reach: iterate "
                "the loader itself (for images, labels in loader: the stage applied), or build the loader "
                "without gpu_augment and call the stage on each batch's data yourself")
        if len(self.plan) == 0:
            raise ValueError(_no_batch(self.plan))
        if shard_format(self.samples) is not None:
            reader = reader_iterator(self.samples, self.options, self.device_id, checkpoint=checkpoint,
                                   auto_reset=auto_reset)
            reader._gpufeed_rebuild = functools.partial(self.dali_iterator, auto_reset=auto_reset)
            return reader
        start = None if checkpoint is None else self._iterator_start(checkpoint)
        log = IteratorSkips(self.options.on_error)
        feed = FileFeed(self.samples, self.plan, log, self.options, self._feed_workers())
        log.feed = feed
        ended = False
        if start is not None:
            log.carry(start.epoch, start.skipped)
            # An epoch's end, or a cut after which every file of the epoch is bad (partial),
            # goes on with the next epoch's start behind one empty pass: DALI refuses a
            # pipeline whose first epoch has no batch ("no data in the pipeline").
            ended = start.batch >= len(self.plan) or not feed.yields_from(start.epoch, start.batch)
            feed.next_epoch = start.epoch + 1 if ended else start.epoch
            if not ended:
                feed.resume(start.epoch, start.batch)
        pipe = build_pipeline(feed, self.options, self.device_id, pixels=self.samples.kind == "pixels")
        # The feed already applied the last-batch policy, which PARTIAL passes through.
        try:  # DALI runs the first batches while the iterator is built
            iterator = _PlannedIterator([pipe], last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=auto_reset)
        except RuntimeError as exc:
            raise _named_decode_error(feed, exc) from exc
        iterator.planned_batches = len(self.plan)
        # fill: the samples delivered, padding included, as the kit's reader iterator counts
        # them (DALI's own count them by their reader's padding: see _PlannedIterator.size)
        iterator.planned_samples = (len(self.plan) * self.plan.batch_size if self.plan.last_batch == LastBatch.FILL
                                    else self.plan.shard_size)
        iterator.gpufeed_feed = feed
        iterator.gpufeed_skipped = log
        iterator.gpufeed_fed_because = _why_fed(self.samples)
        iterator._state_of = self._state
        if start is not None:
            iterator._at, iterator._taken = start, start.batch
            iterator._resumed = True
            iterator._ended_pass = ended
        iterator._gpufeed_rebuild = functools.partial(self.dali_iterator, auto_reset=auto_reset)
        iterator._gpufeed_check = self._iterator_start
        return iterator

    def _iterator_start(self, checkpoint: dict[str, Any]) -> ResumePoint:
        """Where a fed ``dali_iterator(checkpoint=...)`` starts: a loader state, checked as
        :meth:`load_state_dict` checks it; a DALI reader state is refused by name."""
        if isinstance(checkpoint, dict) and checkpoint.get("format") == READER_STATE_FORMAT:
            raise ValueError(
                f"dali_iterator(checkpoint=...): this is a DALI reader state (a shard iterator's), but this "
                f"loader's iterator is fed by the kit ({_why_fed(self.samples)}): it resumes from "
                "it.state_dict() of such an iterator, or from a loader's state_dict() (same format, "
                "also for loader.load_state_dict())")
        return self._resume_point(checkpoint)


def _named_decode_error(feed: FileFeed | None, exc: RuntimeError) -> RuntimeError:
    """DALI's decoder error of a fed iterator, with the file at fault named: DALI names its
    codec's error code only. The failing batch is the oldest handed over and not taken
    out (DALI returns batches in order); PIL says which of its files does not decode."""
    if feed is None or not feed.in_flight:
        return exc
    epoch, number, indices = feed.in_flight[0]

    def reason(i: int) -> str | None:  # a file gone since it was fed is named, not raised on
        data = feed.samples.read_or_reason(i)
        return data if isinstance(data, str) else pil_reason(data)

    bad = [(feed.samples.name(i), reason(i)) for i in indices]
    bad = [(path, why) for path, why in bad if why] or [(feed.samples.name(i), None) for i in indices]
    shown = "; ".join(f"{path}" + (f" (PIL: {why})" if why else "") for path, why in bad[:3])
    return RuntimeError(
        f"dali_iterator(): DALI's decoder failed in epoch {epoch}, batch {number}, on "
        f"{'one of ' if len(bad) > 1 else ''}{shown}{' ...' if len(bad) > 3 else ''}. The iterator ends "
        "the epoch there, as DALI does; the loader itself (for images, labels in loader) skips such files "
        f"and lists them in loader.skipped. DALI's words: {str(exc).splitlines()[0] if str(exc) else exc!r}")


def _no_batch(plan: EpochPlan) -> str:
    """Why ``dali_iterator()`` refuses a rank slice whose plan has no batch, and what to do,
    for the cause at hand: a slice with no sample (fewer samples than ranks, any policy but
    ``fill``, which refuses that when the loader is built), or ``drop`` with fewer samples
    than ``batch_size``."""
    where = f"dali_iterator(): rank slice {plan.shard_id} of {plan.num_shards}"
    cannot = ("DALI cannot run a pipeline with no batch. The loader itself yields 0 batches on this rank: "
              "iterate the loader (for images, labels in loader) on every rank, with DDP's join() for "
              "the ranks without a batch")
    if plan.shard_size == 0:
        return (f"{where} has no sample: {plan.num_samples} sample(s) split over {plan.num_shards} ranks "
                f"leave some ranks none (last_batch={plan.last_batch.value!r}; 'fill' refuses such a split). "
                f"{cannot}; or use at most {plan.num_samples} rank(s) for this set")
    return (f"{where} has {plan.shard_size} samples, fewer than batch_size={plan.batch_size}, and "
            f"last_batch='drop' drops that incomplete batch: no batch to iterate. {cannot}; or use a "
            "smaller batch_size or last_batch='partial' / 'fill'")


def _why_fed(samples: SampleSource) -> str:
    """Why ``dali_iterator()`` reads ``samples`` through the kit's feed, in words."""
    label_key = str(getattr(samples, "label_key", None) or "")
    if label_key.startswith(JSON_LABEL):
        return (f"label_key={label_key!r}: labels from a JSON field, which DALI's readers do not read "
                "(DALI's graph has no JSON parser)")
    kinds = {"SampleList": "an image folder or file list", "RawCache": "a raw cache",
             "RamCache": "a RAM cache (cache='ram')"}
    kind = kinds.get(type(samples).__name__, f"a {type(samples).__name__}")
    return f"the source is {kind}; DALI's readers read WebDataset and TFRecord shards only"
