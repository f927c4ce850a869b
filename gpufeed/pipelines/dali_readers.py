"""DALI's own readers for WebDataset and TFRecord shards, with DALI's checkpointing.

For shard sources, :meth:`DaliLoader.dali_iterator
<gpufeed.pipelines.dali_loader.DaliLoader.dali_iterator>` reads with
``fn.readers.webdataset`` / ``fn.readers.tfrecord`` instead of the kit's Python feed: the
whole input side then runs on DALI's threads, and DALI's checkpointing can save and
restore it. After the reader the graph is the kit's
(:func:`~gpufeed.pipelines.dali_pipeline.classification_outputs`).

What differs from the loader (and from the feed-based iterator):

- **Order.** DALI's readers take their shard of the samples in file order and, with
  ``shuffle``, mix them in a buffer of ``shuffle_buffer`` samples (``initial_fill``); the
  loader's plan also permutes the shard files. DALI splits the samples into
  ``num_shards`` contiguous slices as the plan does, and (its default,
  ``stick_to_shard=False``) each rank moves on to the next slice every epoch: within an
  epoch every sample is still read by exactly one rank.
- **Crops.** There is no Python feed to draw the loader's crop windows, so DALI draws
  them (``fn.decoders.image_random_crop`` over ``scale`` and ``ratio``, with a
  ``fn.random.coin_flip`` flip) from the pipeline's seed: other windows than the
  loader's, which repeat only through a DALI checkpoint.
- **Bad files.** No byte checks before DALI: a file the decoder fails on ends the epoch
  with DALI's error, and nothing is listed as skipped.
- **Last batch.** All three are DALI's policies over a padded reader
  (``pad_last_batch``), so each epoch starts at a slice boundary and every rank reads
  its whole slice: ``partial`` and ``drop`` are DALI's PARTIAL and DROP; ``fill`` is
  DALI's FILL, which pads each slice to the largest one's full batches by repeating
  its last sample (the loader wraps round the shard instead). Every rank then has
  ``len(loader)`` batches every epoch, ``len(it)`` of them (``it.size`` counts their
  samples, padding included), and together they hold every sample of the epoch. (Over
  an unpadded reader DALI's FILL fills the last batch from the next epoch, whose
  batches then differ in number from rank to rank and epoch to epoch, and miss the
  samples read ahead.)

Checkpoints (``it.state_dict()``) hold DALI's own: every reader's position and shuffle
buffer, every random operator's generator, and the iterator's counters. A pipeline
built from one yields what the saved pipeline would have yielded next: the same
samples, crops and flips.
"""

from __future__ import annotations

import base64
import gc
from dataclasses import dataclass
from typing import Any

import numpy as np
import nvidia.dali
import nvidia.dali.fn as fn
import nvidia.dali.tfrecord as tfrec
import nvidia.dali.types as types
from nvidia.dali import math as dmath
from nvidia.dali import pipeline_def
from nvidia.dali.data_node import DataNode
from nvidia.dali.pipeline import Pipeline
from nvidia.dali.plugin.pytorch import DALIClassificationIterator, LastBatchPolicy

from gpufeed.datasets.samples import SampleSource
from gpufeed.datasets.shards import format_of_name
from gpufeed.datasets.shards.tfrecord import (  # TensorFlow's ImageNet feature names
    IMAGE_KEY,
    LABEL_KEY,
)
from gpufeed.datasets.shards.webdataset import IMAGE_EXTENSIONS, JSON_LABEL, LABEL_EXTENSION
from gpufeed.pipelines.dali_pipeline import classification_outputs
from gpufeed.pipelines.options import LastBatch, LoaderOptions
from gpufeed.pipelines.seeds import dali_seed
from gpufeed.pipelines.states import differences, settings_of

#: The ``state_dict`` format of a reader iterator; a state of another format is refused.
STATE_FORMAT = "gpufeed.dali_reader/1"
#: The reader's name in the pipeline: the iterator asks it for the epoch size.
READER_NAME = "shards"
#: WebDataset components read unless the source names others: the image (the first
#: member, in file order, of one of these extensions) and the label. The same as
#: :class:`~gpufeed.datasets.shards.webdataset.WebDatasetShards` reads.
WEBDATASET_EXT = [";".join(IMAGE_EXTENSIONS), LABEL_EXTENSION]

#: Settings that must match for a checkpoint to mean the same pipeline: the reader's
#: (shard, shuffling, padding), the graph's random operators and their seeds, and the
#: outputs' geometry.
_STATE_SETTINGS = ("train", "batch_size", "shuffles", "seed", "shard_id", "num_shards", "last_batch",
                   "shuffle_buffer", "size", "scale", "ratio", "dtype", "layout")
#: Longest decimal label text a WebDataset ``.cls`` may hold (digits and whitespace).
_LABEL_CHARS = 16

#: ``last_batch`` -> (the reader's ``pad_last_batch``, the iterator's policy). Always
#: padded: DALI's FILL over an unpadded reader borrows from the next epoch (module notes).
_LAST_BATCH = {
    LastBatch.PARTIAL: (True, LastBatchPolicy.PARTIAL),
    LastBatch.DROP: (True, LastBatchPolicy.DROP),
    LastBatch.FILL: (True, LastBatchPolicy.FILL),
}


@dataclass(frozen=True)
class ShardFiles:
    """What DALI's reader needs to read a shard source.

    Attributes:
        format: ``"webdataset"`` or ``"tfrecord"``.
        files: the shard files, in the source's order.
        index_files: DALI's index of each shard file (``wds2idx`` / ``tfrecord2idx``
            format), or empty: DALI then indexes WebDataset tars itself when the pipeline
            is built (TFRecord needs them).
        image_key: WebDataset: the image extensions, ``;``-separated (DALI's ``ext``);
            TFRecord: the image feature.
        label_key: WebDataset: the label member's extension; TFRecord: the label feature.
    """

    format: str
    files: tuple[str, ...]
    index_files: tuple[str, ...]
    image_key: str = ""
    label_key: str = ""


def shard_format(samples: SampleSource) -> str | None:
    """``"webdataset"`` or ``"tfrecord"`` when DALI's own reader can read ``samples``
    (shard files of one format, and a ``dali_index_files()`` method); None otherwise
    (image folders, raw caches, RAM caches keep the kit's feed, and so do WebDataset
    shards whose labels are a JSON field: DALI's graph has no JSON parser)."""
    if not callable(getattr(samples, "dali_index_files", None)):
        return None
    if str(getattr(samples, "label_key", "")).startswith(JSON_LABEL):
        return None
    fmt = getattr(samples, "format", None)
    if fmt in ("webdataset", "tfrecord"):
        return fmt
    formats = {format_of_name(f) for f in samples.files}
    if len(formats) != 1 or None in formats:
        return None
    return formats.pop()


def shard_files(samples: SampleSource) -> ShardFiles:
    """The files and DALI indexes of a shard source (see :func:`shard_format`).

    Raises:
        ValueError: ``samples`` is not a shard source DALI reads, or its index list does
            not match its files (TFRecord needs one index per file).
    """
    fmt = shard_format(samples)
    if fmt is None:
        raise ValueError(f"{type(samples).__name__} is not a WebDataset or TFRecord shard source")
    files, index = tuple(samples.files), tuple(samples.dali_index_files())
    if len(index) != len(files) and (index or fmt == "tfrecord"):
        raise ValueError(f"{len(files)} {fmt} shard files but {len(index)} DALI index files: DALI's reader "
                         "needs one index per file" + (" (or none, for WebDataset)" if fmt == "webdataset" else ""))
    # The members the source read, so DALI reads the same ones (sources without keys:
    # the defaults).
    image_key = getattr(samples, "image_key", None)
    if fmt == "webdataset":
        image = WEBDATASET_EXT[0] if image_key is None else ";".join(image_key)
        label = getattr(samples, "label_key", None) or WEBDATASET_EXT[1]
    else:
        image, label = image_key or IMAGE_KEY, getattr(samples, "label_key", None) or LABEL_KEY
    return ShardFiles(fmt, files, index, image, label)


def decimal_label(text: DataNode) -> DataNode:
    """A DALI node of int32 labels from ``text``, 1-D uint8 nodes holding a decimal
    number as text of up to 16 characters (WebDataset's ``.cls``, e.g. ``b"42"`` or
    ``b"42\\n"``).

    DALI reads ``.cls`` as raw bytes and has no text parser, so the digits are weighed
    in the graph: the text is padded to a fixed width, each digit multiplied by its power
    of ten counted from the right end of the field, and the sum divided by the power of
    ten the field extends past the last digit. Whitespace around the number is ignored;
    the digits must be contiguous (no sign: labels are class indices).
    """
    digits = fn.cast(text, dtype=types.INT64) - 48  # ASCII '0'
    is_digit = fn.cast((digits >= 0) & (digits <= 9), dtype=types.INT64)
    digits = fn.pad(digits * is_digit, fill_value=0, shape=[_LABEL_CHARS])
    weights = np.array([10 ** (_LABEL_CHARS - 1 - i) for i in range(_LABEL_CHARS)], np.int64)
    positions = np.arange(1, _LABEL_CHARS + 1, dtype=np.int64)
    field = fn.reductions.sum(digits * types.Constant(weights, dtype=types.INT64))
    is_digit = fn.pad(is_digit, fill_value=0, shape=[_LABEL_CHARS])
    end = fn.reductions.max(is_digit * types.Constant(positions, dtype=types.INT64))  # after the last digit
    # 10 ** k is exact in float64 for the widths here
    scale = fn.cast(dmath.pow(10.0, fn.cast(_LABEL_CHARS - end, dtype=types.FLOAT64)), dtype=types.INT64)
    return fn.cast(field // scale, dtype=types.INT32)


def _reader(shards: ShardFiles, options: LoaderOptions, pad_last_batch: bool) -> tuple[DataNode, DataNode]:
    """DALI's reader for ``shards``: ``(encoded, labels)`` nodes, labels int32 (one per
    sample; the graph gives them as ``(1,)``)."""
    o = options
    common = dict(
        name=READER_NAME, shard_id=o.shard_id, num_shards=o.num_shards, random_shuffle=o.shuffles,
        initial_fill=o.shuffle_buffer, pad_last_batch=pad_last_batch,
    )
    if shards.format == "webdataset":
        encoded, text = fn.readers.webdataset(
            paths=list(shards.files), index_paths=list(shards.index_files) or None,
            ext=[shards.image_key or WEBDATASET_EXT[0], shards.label_key or WEBDATASET_EXT[1]],
            # the kit's source matches extensions in any case (".JPG" too)
            case_sensitive_extensions=False,
            # a sample without its label would otherwise come out empty, i.e. label 0
            missing_component_behavior="error", **common,
        )
        return encoded, decimal_label(text)
    image, label = shards.image_key or IMAGE_KEY, shards.label_key or LABEL_KEY
    features = {
        image: tfrec.FixedLenFeature((), tfrec.string, ""),
        label: tfrec.FixedLenFeature([1], tfrec.int64, -1),
    }
    out = fn.readers.tfrecord(path=list(shards.files), index_path=list(shards.index_files), features=features,
                              **common)
    return out[image], fn.cast(out[label], dtype=types.INT32)


def build_reader_pipeline(shards: ShardFiles, options: LoaderOptions, device_id: int | None, *,
                          checkpoint: bytes | None = None, prefetch: int = 2) -> Pipeline:
    """The classification pipeline over DALI's own shard reader, with checkpointing on.

    Args:
        shards: the shard files and their DALI indexes (:func:`shard_files`).
        options: the loader settings; the reader takes ``shard_id``/``num_shards``,
            ``shuffle`` (``random_shuffle``), ``shuffle_buffer`` (``initial_fill``) and
            ``last_batch`` (``pad_last_batch``: see the module notes).
        device_id: CUDA device (``device="mixed"`` decoding), or None for CPU-only mode.
        checkpoint: a serialized DALI checkpoint (``Pipeline.checkpoint()``) to resume
            from, or None for a fresh start.
        prefetch: batches DALI prepares ahead.

    Returns:
        A built pipeline with outputs ``(images, labels)`` and reader ``READER_NAME``.
    """
    o = options
    pad, _ = _LAST_BATCH[o.last_batch]

    @pipeline_def(enable_conditionals=False)
    def classification() -> tuple[DataNode, DataNode]:
        encoded, labels = _reader(shards, o, pad)
        return classification_outputs(encoded, labels, o, device_id)

    # One seed per shard, which the reader's shuffle and the crop and flip operators
    # derive theirs from (a stream of its own: the feed pipelines mix in an epoch).
    pipe = classification(
        batch_size=o.batch_size, num_threads=max(1, o.workers), device_id=device_id,
        seed=dali_seed(o.seed, o.shard_id), prefetch_queue_depth=prefetch,
        enable_checkpointing=True, checkpoint=checkpoint,
    )
    pipe.build()
    return pipe


def load_into(iterator: DALIClassificationIterator, state: dict[str, Any]) -> None:
    """Make ``iterator`` (one the loader's ``dali_iterator()`` built) go on from ``state``, in
    place: a new iterator is built from the state (``dali_iterator(checkpoint=state)``) and
    ``iterator`` takes over its pipeline and position, its own dropped.

    Why in place: PyTorch Lightning treats a loader as resumable when it has
    ``state_dict()`` and ``load_state_dict()``, saves the first in a checkpoint and, resumed,
    calls the second on the loader ``train_dataloader()`` returned, before its first
    ``iter()``; DALI's pipeline, built with its position, cannot be moved to another one.

    Raises:
        ValueError: as ``dali_iterator(checkpoint=state)``: a state of another kind,
            dataset or pipeline (the difference named).
    """
    rebuild = getattr(iterator, "_gpufeed_rebuild", None)
    if rebuild is None:
        raise ValueError("load_state_dict(): this iterator was not made by a gpufeed loader's dali_iterator()")
    # A state of another pipeline is refused before anything is dropped.
    if isinstance(iterator, ReaderIterator):
        _checkpoint_of(state, iterator.gpufeed_identity)
    else:
        iterator._gpufeed_check(state)
    # The old pipeline (its prefetched batches; on a GPU, its buffers) is freed before the
    # new one is built: both at once could run a GPU near its memory limit out of it.
    iterator.__dict__.clear()
    gc.collect()
    fresh = rebuild(checkpoint=state)
    iterator.__dict__.update(fresh.__dict__)


class ReaderIterator(DALIClassificationIterator):
    """DALI's classification iterator over a shard reader, whose position is a
    checkpoint: :meth:`state_dict` after any batch, ``loader.dali_iterator(checkpoint=
    state)`` to go on from the next one. ``len()`` is DALI's, from the reader."""

    #: What a state must match: format, dataset fingerprint, settings, DALI version.
    gpufeed_identity: dict[str, Any] = {}
    #: ``last_batch="fill"``: :attr:`size` counts the padded last batch.
    gpufeed_fill = False
    #: Batches returned in the epoch under way (0 once its ``StopIteration`` came).
    _taken = 0
    #: Resumed from a state taken right after an epoch's last batch: the first pass is that
    #: epoch's rest, nothing (DALI's own checkpoint there is the next epoch's start).
    _ended_pass = False
    #: That empty pass ended: the ``reset()`` after it has nothing to reset.
    _reset_skipped = False

    @property
    def size(self) -> int:
        """Samples per epoch in this shard, as DALI's reader counts them; with ``fill``,
        the samples delivered (``len(it) * batch_size``, the padding included), where
        DALI's own iterator over this padded reader counts the largest slice, unpadded."""
        size = super().size
        return -(-size // self.batch_size) * self.batch_size if self.gpufeed_fill else size

    def __iter__(self) -> ReaderIterator:
        if self._taken >= len(self):  # every batch taken, the end not asked for (a loop that counts)
            self._taken = 0
        return super().__iter__()

    def __next__(self) -> Any:
        if self._ended_pass:
            self._ended_pass, self._reset_skipped = False, self._auto_reset != "yes"
            raise StopIteration
        try:
            batch = super().__next__()
        except StopIteration:
            self._taken = 0
            raise
        self._taken += 1
        return batch

    def reset(self) -> None:
        """DALI's ``reset()``; after the empty pass of a state taken at an epoch's end,
        nothing (DALI is at the next epoch's start already, and would warn)."""
        if self._reset_skipped:
            self._reset_skipped = False
            return
        super().reset()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (:meth:`state_dict`) in place, as
        ``loader.dali_iterator(checkpoint=state)`` would (:func:`load_into`; PyTorch
        Lightning resumes a loader so)."""
        load_into(self, state)

    def state_dict(self) -> dict[str, Any]:
        """Where this iterator is, as DALI checkpoints it: plain data (the checkpoint is
        base64 text), so ``torch.save`` and JSON both keep it. As the loader's: right after
        an epoch's last batch, that epoch's end (resumed, the first pass is empty); after
        its ``StopIteration``, the next epoch's start.

        It holds the dataset's fingerprint and the settings that shape the pipeline, the
        DALI version (DALI reads only its own version's checkpoints) and DALI's
        checkpoint of the pipeline (reader position and shuffle buffer, random
        generators, the iterator's epoch counters). DALI warns that taking one has an
        observable cost: take it when saving a training checkpoint, not every batch.
        """
        return {
            **self.gpufeed_identity,
            "checkpoints": [base64.b64encode(bytes(c)).decode("ascii") for c in self.checkpoints()],
            # DALI's checkpoint cannot say it: right after the last batch it already holds the
            # next epoch's start, so a loop over range(saved_epoch, E) ran one epoch too many.
            "epoch_end": self._ended_pass or self._taken >= len(self),
        }


def _identity(samples: SampleSource, options: LoaderOptions, device_id: int | None) -> dict[str, Any]:
    """What a state of this pipeline records, and a restoring one must match: the decoder
    too (the GPU graph's operators are not the CPU graph's, so neither's checkpoint fits
    the other)."""
    return {"format": STATE_FORMAT, "dali": nvidia.dali.__version__, "dataset": samples.fingerprint(),
            "settings": settings_of(options, _STATE_SETTINGS), "decoder": "cpu" if device_id is None else "mixed",
            "pad_last_batch": _LAST_BATCH[options.last_batch][0]}


def _checkpoint_of(state: dict[str, Any], identity: dict[str, Any]) -> bytes:
    """The DALI checkpoint in ``state``, after checking it belongs to this pipeline.

    Raises:
        ValueError: ``state`` is not a reader iterator state, or was taken with another
            DALI version, on another dataset or with settings that change the pipeline;
            each difference is named.
    """
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        got = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"not a gpufeed DALI reader state (expected format {STATE_FORMAT!r}, got {got!r}); "
                         "a loader's state_dict() goes to loader.load_state_dict()")
    problems = []
    if state.get("dali") != identity["dali"]:
        problems.append(f"DALI version: saved {state.get('dali')!r}, installed {identity['dali']!r} "
                        "(DALI reads only its own version's checkpoints)")
    if "decoder" in state and state["decoder"] != identity["decoder"]:  # states before it was recorded: unchecked
        problems.append(f"decoder: saved on {state['decoder']!r}, this pipeline decodes on {identity['decoder']!r} "
                        "(a GPU pipeline's checkpoint does not fit a CPU one, nor the other way)")
    # States before it was recorded padded every policy but fill.
    padded = state.get("pad_last_batch", state.get("settings", {}).get("last_batch") != LastBatch.FILL.value)
    if padded != identity["pad_last_batch"]:
        problems.append(f"reader padding: saved with pad_last_batch={padded}, this pipeline's reader has "
                        f"pad_last_batch={identity['pad_last_batch']} (a last_batch='fill' state from before "
                        "fill padded the reader: its epochs had other lengths)")
    for group in ("dataset", "settings"):
        problems += differences(group, state.get(group, {}), identity[group])
    if problems:
        raise ValueError("this DALI reader state belongs to another pipeline: " + "; ".join(problems))
    checkpoints = state.get("checkpoints")
    if not isinstance(checkpoints, list) or len(checkpoints) != 1:
        raise ValueError("a DALI reader state holds one pipeline checkpoint")
    return base64.b64decode(checkpoints[0])


def reader_iterator(samples: SampleSource, options: LoaderOptions, device_id: int | None, *,
                    checkpoint: dict[str, Any] | None = None, auto_reset: bool = True) -> ReaderIterator:
    """A :class:`ReaderIterator` over DALI's own reader of ``samples``' shards.

    Args:
        samples: a WebDataset or TFRecord shard source (:func:`shard_format`).
        options: the loader settings.
        device_id: CUDA device, or None for DALI's CPU-only mode.
        checkpoint: a :meth:`ReaderIterator.state_dict` to resume from, or None.
        auto_reset: as in DALI's iterators.

    Returns:
        The iterator, yielding ``[{"data": images, "label": labels}]`` (labels int32).

    Raises:
        ValueError: see :func:`shard_files`, and a ``checkpoint`` of another pipeline.
    """
    shards = shard_files(samples)
    identity = _identity(samples, options, device_id)
    saved = None if checkpoint is None else _checkpoint_of(checkpoint, identity)
    pipe = build_reader_pipeline(shards, options, device_id, checkpoint=saved)
    _, policy = _LAST_BATCH[options.last_batch]
    iterator = ReaderIterator([pipe], reader_name=READER_NAME, last_batch_policy=policy, auto_reset=auto_reset)
    iterator.gpufeed_identity = identity
    iterator.gpufeed_fill = policy == LastBatchPolicy.FILL
    iterator._ended_pass = bool(checkpoint and checkpoint.get("epoch_end"))  # states before it: absent
    return iterator
