"""The DALI backend: the kit's pipeline behind DALI's own PyTorch iterator.

The loader is a thin layer over ``nvidia.dali.plugin.pytorch.DALIGenericIterator`` (which
copies each output once into a torch tensor); it adds what DALI leaves to the user: the
shared epoch plan, skipped-file accounting, and recovery when a decoder fails on a file
the byte checks let through (the pipeline is rebuilt and the epoch goes on from the
failed batch, without the bad file).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from nvidia.dali.plugin.pytorch import (
    DALIClassificationIterator,
    DALIGenericIterator,
    LastBatchPolicy,
)

from gpufeed.pipelines.base import Batch, ClassificationLoader
from gpufeed.pipelines.dali_pipeline import FileFeed, build_pipeline
from gpufeed.pipelines.sources import SkipLog, read_bytes, undecodable_reason


class DaliLoader(ClassificationLoader):
    """NVIDIA DALI on the GPU (``device="mixed"`` decode) or in CPU-only mode."""

    backend = "dali"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.device_id = None if self.device.type == "cpu" else (self.device.index or 0)
        self._feed = FileFeed(self.samples, self.plan, self.log)
        self._iterator: DALIGenericIterator | None = None
        self._finished_epoch = False
        self._probe = None

    def _new_iterator(self) -> DALIGenericIterator:
        pipe = build_pipeline(self._feed, self.options, self.device_id)
        # The feed already applied the last-batch policy; PARTIAL passes its batches through.
        return DALIGenericIterator(
            [pipe], ["images", "labels"], last_batch_policy=LastBatchPolicy.PARTIAL,
            auto_reset=False, prepare_first_batch=False,
        )

    def _epoch_batches(self, epoch: int) -> Iterator[Batch]:
        if self._iterator is not None and self._finished_epoch:
            self._iterator.reset()  # iter(feed): the next epoch of the plan
        else:
            # First epoch, or the last one was left half-way: batches of it may still be
            # queued inside DALI, so start from a fresh pipeline.
            self._iterator = None
            self._feed.next_epoch = epoch
            self._feed.in_flight.clear()
            self._iterator = self._new_iterator()
        self._finished_epoch = False
        while True:
            try:
                out = next(self._iterator)[0]
            except StopIteration:
                break
            except RuntimeError as err:
                self._recover(err)
                continue
            self._feed.in_flight.popleft()
            images = out["images"]
            labels = out["labels"].view(-1).to(torch.int64)
            yield images, labels.to(images.device, non_blocking=True)
        self._finished_epoch = True

    def _recover(self, err: RuntimeError) -> None:
        """Find the file(s) DALI failed on among the batches in flight, record them, and
        rebuild the pipeline to go on from the first batch not yet delivered."""
        in_flight = list(self._feed.in_flight)
        if not in_flight:
            raise err
        suspects = [p for _, _, paths in in_flight for p in paths if self.log.known(p) is None]
        found = False
        for path in suspects:
            reason = self._probe_file(path)
            if reason is not None:
                found = True
                self.log.add(path, reason)  # raises BadImageError under on_error="raise"
        if not found:
            shown = ", ".join(suspects[:4]) + (" ..." if len(suspects) > 4 else "")
            raise RuntimeError(f"DALI failed on a batch of {len(suspects)} files ({shown}), "
                               f"yet each decodes on its own: {err}") from err
        self._feed.resume(*in_flight[0][:2])
        self._feed.in_flight.clear()
        self._iterator = None
        self._iterator = self._new_iterator()

    def _probe_file(self, path: str) -> str | None:
        """Decode one file through the same pipeline, alone: the reason it fails, or None."""
        data = read_bytes(path)
        reason = undecodable_reason(data)
        if reason is not None:
            return reason
        if self._probe is None:
            self._probe = build_pipeline(None, self.options, self.device_id, batch_size=1, prefetch=1)
        self._probe.feed_input("encoded", [data])
        self._probe.feed_input("label", [np.zeros((), np.int32)])
        try:
            self._probe.run()
        except RuntimeError as exc:
            self._probe = None  # a pipeline that raised is not reused
            # DALI's message: the operator, a traceback, then the decoder's own words.
            text = str(exc)
            cause = text.split("encountered:", 1)[-1].strip().splitlines()
            op = "image decoder" if "decoders" in text else "pipeline"
            return f"DALI's {op} failed on it" + (f" ({cause[0].strip()})" if cause else "")
        return None

    def dali_iterator(self, *, auto_reset: bool = True) -> DALIClassificationIterator:
        """A real ``DALIClassificationIterator`` over the kit's pipeline, for training
        scripts written against DALI.

        It yields ``[{"data": images, "label": labels}]`` like any DALI classification
        iterator (labels ``(B, 1)`` int32), follows this loader's plan (shuffle, shard,
        last-batch policy) with its own epoch count, and skips files that fail the byte
        checks (listed in the returned iterator's ``gpufeed_skipped`` log). Decoder
        failures beyond those end the epoch with DALI's error, as in DALI; the loader
        itself recovers from them.
        """
        log = SkipLog(self.options.on_error)
        feed = FileFeed(self.samples, self.plan, log)
        pipe = build_pipeline(feed, self.options, self.device_id)
        iterator = DALIClassificationIterator(
            [pipe], last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=auto_reset,
        )
        iterator.gpufeed_skipped = log
        return iterator
