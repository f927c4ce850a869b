"""The PyTorch backend: DataLoader workers decode with torchvision.io and crop/resize
with torch's channels-last uint8 kernels (:mod:`gpufeed.pipelines.geometry`, the same
code DALI's CPU mode uses). Batches leave the workers as uint8 (a quarter of float32's
bytes, through shared memory or across PCIe) and are normalised after the hand-over: in
this process into reused buffers on CPU, on the device on a GPU."""

from __future__ import annotations

import dataclasses
import io
import multiprocessing
import os
import re
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn

import numpy as np
import torch
import torchvision.io as tvio
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Sampler

from gpufeed.backends import BackendChoice
from gpufeed.datasets.image_bytes import (
    image_format,
    png_without_bad_ancillary_chunks,
    png_without_text,
    undecodable_reason,
    without_addresses,
)
from gpufeed.datasets.samples import SampleSource
from gpufeed.machine import worker_start_method
from gpufeed.pipelines import geometry
from gpufeed.pipelines.base import (
    Augment,
    ClassificationLoader,
    Normalizer,
    NumberedBatch,
    ReusedBuffers,
    pinned_empty,
    shared_empty,
)
from gpufeed.pipelines.options import LoaderOptions
from gpufeed.pipelines.plan import EpochPlan
from gpufeed.pipelines.seeds import sample_rng
from gpufeed.pipelines.threads import SamplePool, prefetched
from gpufeed.policies import OnError

# torchvision 0.29 deprecates its image codecs in favour of TorchCodec, warning on every
# call; they remain the fastest decoder a DataLoader user has today, so the kit keeps
# them (with PIL beside them) and silences that one message. A filter for that message
# alone, set once: a `catch_warnings` around each decode is not thread-safe, and the
# decodes run on threads.
warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision")


#: Formats PIL decodes here (see :func:`decode_rgb`); WebP too where torchvision has no WebP
#: decoder (before 0.20: its ``decode_image`` read only JPEG, PNG and GIF, so the torch
#: backend skipped every WebP file at the torchvision floor, 0.19).
_PIL_FORMATS = ("bmp", "tiff", "pnm") + (() if hasattr(tvio, "decode_webp") else ("webp",))


def decode_rgb(data: np.ndarray) -> torch.Tensor:
    """Decode image bytes to uint8 ``(H, W, 3)`` pixels (grayscale and CMYK become RGB).

    torchvision.io decodes JPEG and WebP (from torchvision 0.20; PIL before); PNG, BMP,
    TIFF, Netpbm (.pgm, .ppm) and animated WebP go through PIL. PNG because libpng's
    errors under torchvision's decoder crash the process (a PNG with bytes corrupted in
    its image data killed every DataLoader worker) where PIL raises; PIL is ~5-10% slower
    on PNG. A PNG's ancillary
    chunks with a bad CRC are dropped first, as libpng (DALI) ignores them where PIL
    refused the file; a PNG whose text PIL will not read (a chunk inflating past
    ``MAX_TEXT_CHUNK``, or all of them past ``MAX_TEXT_MEMORY``) is decoded without its
    text chunks, as libpng decodes it. Deeper images (16-bit PNG and TIFF) are scaled to
    8 bits, as DALI does.
    """
    fmt = image_format(data)
    if fmt == "png":
        data = png_without_bad_ancillary_chunks(data)
        try:
            return _pil_rgb(data)
        except ValueError as exc:  # PIL's limits on text, not the image: libpng (DALI) decodes it
            if "MAX_TEXT_CHUNK" not in str(exc) and "MAX_TEXT_MEMORY" not in str(exc):
                raise
            return _pil_rgb(png_without_text(data))
    if fmt in _PIL_FORMATS:
        return _pil_rgb(data)
    try:
        # torchvision returns CHW as a view of HWC memory: the channels-last layout we want.
        image = tvio.decode_image(torch.from_numpy(data), mode=tvio.ImageReadMode.RGB)
    except RuntimeError as exc:
        if "nimated" not in str(exc):  # torchvision refuses animated WebP; its first frame, as PIL and DALI
            raise
        return _pil_rgb(data)
    return image.permute(1, 2, 0)  # JPEG and WebP decode to uint8


def _pil_rgb(data: np.ndarray) -> torch.Tensor:
    """PIL's decode (first frame) as uint8 RGB; 16-bit and float grayscale (microscopy,
    medical TIFFs) scaled to 8 bits as DALI scales them: PIL's ``convert("RGB")`` clipped
    16-bit values to white and floats to black."""
    with Image.open(io.BytesIO(data.tobytes())) as img:
        if img.mode.startswith("I;16") or img.mode in ("I", "F"):
            values = np.array(img)
            if img.mode == "F":  # floats in [0, 1], as DALI reads them
                gray = np.rint(np.clip(np.nan_to_num(values), 0.0, 1.0) * 255.0).astype(np.uint8)
            else:  # the top 8 of 16 bits, as for 16-bit PNG
                gray = (np.clip(values, 0, 65535).astype(np.uint32) >> 8).astype(np.uint8)
            return torch.from_numpy(np.repeat(gray[:, :, None], 3, axis=2))
        # np.array, not asarray: PIL's buffer is read-only, which torch warns about.
        return torch.from_numpy(np.array(img.convert("RGB")))


#: What :func:`decode_rgb` raises on bytes it cannot decode.
#: PIL: SyntaxError("broken PNG file"); DecompressionBombError (an Exception of its own) for
#: a header claiming over twice ``Image.MAX_IMAGE_PIXELS`` (a BMP's or TIFF's size field
#: gone wrong), which had ended the epoch.
DECODE_ERRORS = (RuntimeError, OSError, ValueError, SyntaxError, Image.DecompressionBombError)


def decode_failure(exc: Exception) -> str:
    """The loaders' reason for a decoder's exception: ``"could not decode: <its words>"``
    (torchvision prefixes the C++ source location, which is dropped)."""
    words = re.sub(r"^[\w ()]+, \S+:\d+, ", "", (str(exc).splitlines() or [type(exc).__name__])[0])
    return f"could not decode: {without_addresses(words)}"


#: Batches of a pixel source (a raw cache) made ahead on this process's threads.
PIXEL_BATCHES_AHEAD = 4

#: From this many workers up, a pixel source's samples are made in worker processes, as
#: encoded images are (:func:`pixel_threads`).
PIXEL_PROCESSES_FROM = 8


def pixel_threads(samples: SampleSource, options: LoaderOptions) -> int:
    """Threads of this process that make a pixel source's (a raw cache's) batches:
    ``options.workers`` below :data:`PIXEL_PROCESSES_FROM` workers, else none (worker
    processes then, as for encoded images, and for any other source).

    Why threads on a few cores: decoded pixels need only a crop and a resize, and a worker
    process's hand-over (pickling, fresh shared memory, its page faults) cost more than
    that work on 2 cores. Why not on many: the threads share one GIL, and each sample's
    Python (its crop's seeded generator, the slicing, a dozen torch calls that each give
    the GIL up and take it back) serialises them. 16 threads on 16 cores made 2,029
    images/s on the H200 machine, where 16 worker processes decoding the same images'
    JPEGs made 3,955 (``storage-gpu16-20261127T100658Z``); on 2 cores 16 threads made half
    of what 2 did.
    """
    if samples.kind != "pixels" or options.workers >= PIXEL_PROCESSES_FROM:
        return 0
    return options.workers


def dataloader_batches_ahead(loader: Any) -> int | None:
    """Batches a ``torch.utils.data.DataLoader`` (or anything with its ``num_workers`` and
    ``prefetch_factor``) prepares ahead of the one taken: each worker process holds its
    prefetch factor (DataLoader's default 2), none without workers; None where ``loader``
    has no ``num_workers``."""
    workers = getattr(loader, "num_workers", None)
    if not isinstance(workers, int) or isinstance(workers, bool):
        return None
    return workers * (getattr(loader, "prefetch_factor", None) or 2) if workers > 0 else 0


class _Files(Dataset):
    """Key ``(epoch, batch number, i)`` -> ``(number, i, uint8 (1, 3, size, size) image or
    None, reason or None)``.

    Randomness comes from a generator per (seed, epoch, sample), not per worker, so a
    seeded run repeats whatever the number of workers, and from any batch on.

    A batch's bytes are read by one reader thread per process while the process decodes:
    the reads run ahead in the batch's order, so waits on the storage (a shard's open, a
    transfer) overlap decoding. One reader keeps every source's reads as serial as a plain
    DataLoader worker's: a folder on slow storage still waits for each file's open.
    """

    def __init__(self, source: SampleSource, options: LoaderOptions, plan: EpochPlan) -> None:
        self.source, self.options, self.plan = source, options, plan
        self._reader: tuple[int, ThreadPoolExecutor] | None = None  # (its process, it)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_reader": None}  # threads do not cross into workers

    def __len__(self) -> int:
        return len(self.source)

    def __getitems__(self, keys: list[tuple[int, int, int]]) -> list[tuple[int, int, torch.Tensor | None, str | None]]:
        if self._reader is None or self._reader[0] != os.getpid():  # a forked worker has no thread
            self._reader = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="gpufeed-read"))
        reads = self._reader[1].map(self.source.read_or_reason, [i for _, _, i in keys])  # all queued now
        items = [self._sample(key, data) for key, data in zip(keys, reads, strict=True)]
        bad = sum(image is None for _, _, image, _ in items)
        # drop/fill: stand-ins keep the batch full (on_error="raise": the main process
        # raises on the first bad file it is handed).
        if bad and self.plan.replaces_bad and self.options.on_error == OnError.SKIP:
            epoch, number, _ = keys[0]

            def take(i: int) -> bool:
                items.append(self._sample((epoch, number, i), self.source.read_or_reason(i)))
                return items[-1][2] is not None

            try:
                self.plan.fill_places(epoch, number, bad, take)
            except RuntimeError as exc:  # raised here, in a worker: the reasons go with it
                failed = [(i, why) for _, i, image, why in items if image is None][:3]
                shown = "; ".join(f"{self.source.name(i)}: {why}" for i, why in failed)
                raise RuntimeError(f"{exc}, e.g. {shown}") from None
        return items

    def __getitem__(self, key: tuple[int, int, int]) -> tuple[int, int, torch.Tensor | None, str | None]:
        return self._sample(key, self.source.read_or_reason(key[2]))

    def _sample(self, key: tuple[int, int, int], data: np.ndarray | str,
                ) -> tuple[int, int, torch.Tensor | None, str | None]:
        epoch, number, i = key
        if isinstance(data, str):  # could not be read
            return number, i, None, data
        if self.source.kind == "pixels":  # decoded ahead of time (a raw cache)
            image = geometry.hwc_view(torch.from_numpy(data))
        else:
            reason = undecodable_reason(data)
            if reason is not None:
                return number, i, None, reason
            try:
                image = geometry.hwc_view(decode_rgb(data))
            except DECODE_ERRORS as exc:
                return number, i, None, decode_failure(exc)
        o = self.options
        if o.train:
            rng = sample_rng(o.seed, epoch, i)
            return number, i, geometry.train_crop(image, rng, o.size, o.scale, o.ratio), None
        return number, i, geometry.val_crop(image, o.resize_shorter, o.size), None


class _Collate:
    """Write the good images of a batch into one output tensor (uint8 in shared memory
    inside a worker); carry the bad ones' reasons to the main process."""

    def __init__(self, labels: tuple[int, ...], options: LoaderOptions, finish: Normalizer) -> None:
        self.labels, self.size, self.finish = labels, options.size, finish

    def __call__(self, items: list[tuple[int, int, torch.Tensor | None, str | None]]
                 ) -> tuple[int, torch.Tensor, torch.Tensor, list[tuple[int, str | None]]]:
        number = items[0][0]
        good = [(i, img) for _, i, img, _ in items if img is not None]
        bad = [(i, reason) for _, i, img, reason in items if img is None]
        images, view = self.finish.output(len(good), self.size, self.size, torch.device("cpu"))
        for k, (_, img) in enumerate(good):
            self.finish.fill(view[k: k + 1], img)
        labels = torch.tensor([self.labels[i] for i, _ in good], dtype=torch.int64)
        return number, images, labels, bad


class _PlanSampler(Sampler):
    """Batches of ``(epoch, batch number, index)`` keys from the epoch plan, from batch
    ``start`` on; the loader sets the epoch and the start."""

    def __init__(self, plan: EpochPlan) -> None:
        self.plan, self.epoch, self.start = plan, 0, 0

    def __len__(self) -> int:
        return len(self.plan) - self.start

    def __iter__(self) -> Iterator[list[tuple[int, int, int]]]:
        for number, batch in enumerate(self.plan.batches(self.epoch)[self.start:], self.start):
            yield [(self.epoch, number, int(i)) for i in batch]


#: Modules the forkserver imports once, before forking workers from itself.
_FORKSERVER_PRELOAD = ("torch", "gpufeed.pipelines.torch_loader")


def _preload_forkserver() -> None:
    """Have the forkserver import torch and this module once, so that each worker forked
    from it starts with them loaded.

    Without it every worker imported torch itself: a loader's first epoch took 9.5 s
    instead of 1.5 s on 2 cores next to DALI, and every new loader paid it again (6.9 s
    per loader; 2.3 s preloaded). The first loader still waits for the forkserver's own
    import. No effect once the forkserver runs; modules the user asked to preload stay.
    """
    import multiprocessing.forkserver as forkserver

    asked = list(getattr(forkserver._forkserver, "_preload_modules", []))  # no public getter
    multiprocessing.set_forkserver_preload(list(dict.fromkeys([*asked, *_FORKSERVER_PRELOAD])))


class TorchLoader(ClassificationLoader):
    """DataLoader workers: torchvision.io decode, torch uint8 crop/resize, pinned memory on CUDA."""

    backend = "torch"

    def __init__(self, samples: SampleSource, options: LoaderOptions, device: torch.device,
                 choice: BackendChoice, gpu_augment: Augment | None = None) -> None:
        super().__init__(samples, options, device, choice, gpu_augment)
        o = self.options
        on_gpu = self.device.type == "cuda"
        raw = dataclasses.replace(o, dtype=torch.uint8, layout="NCHW")
        # Decoded pixels (a raw cache) on a few workers: threads of this process, not
        # worker processes (pixel_threads says why).
        self._threads = pixel_threads(samples, o)
        processes = 0 if self._threads else o.workers
        if on_gpu:
            # Batches cross PCIe as uint8 NCHW, a quarter of float32's bytes, and are
            # normalised on the device, copied from pinned memory (a copy from pageable
            # memory first waits for the GPU's queue to drain: every batch would wait for
            # the last training step). The DataLoader pins what its workers (or, without
            # workers, this process) made; batches of the pixel threads are made pinned.
            made = Normalizer(raw, shared_empty if processes else pinned_empty if self._threads
                              else ReusedBuffers(keep=8).empty)
            self._finish: Normalizer | None = Normalizer(o)
        elif processes:
            # Workers hand batches over as uint8 NCHW in shared memory (share_memory_()
            # would copy them), fresh for every batch: on a float32 batch its page faults
            # cost the workers more than the normalisation does, which runs here into
            # reused, already-mapped buffers.
            made, self._finish = Normalizer(raw, shared_empty), Normalizer(o, ReusedBuffers().empty)
        else:  # made in this process: normalised once, straight into reused buffers
            made, self._finish = Normalizer(o, ReusedBuffers(keep=8).empty), None
        self._files, self._made = _Files(self.samples, o, self.plan), made
        self._pool = SamplePool(self._threads, "gpufeed-pixels")
        self._sampler = _PlanSampler(self.plan)
        context = None if processes == 0 else worker_start_method()
        if context == "forkserver":
            _preload_forkserver()
        self._loader = None if self._threads else DataLoader(
            self._files,
            batch_sampler=self._sampler,
            num_workers=processes,
            collate_fn=_Collate(self.samples.labels, o, made),
            pin_memory=on_gpu,
            persistent_workers=processes > 0,
            prefetch_factor=4 if processes > 0 else None,
            multiprocessing_context=context,
        )

    def close(self) -> None:
        """Stop the DataLoader's persistent worker processes now; iterating again starts
        them afresh."""
        iterator = None if self._loader is None else getattr(self._loader, "_iterator", None)
        if iterator is not None:
            # DataLoader has no public close: this is what its iterator's __del__ calls.
            iterator._shutdown_workers()
            self._loader._iterator = None

    @property
    def batches_ahead(self) -> int:
        """Worker processes times their prefetch; a pixel source's thread-made batches:
        :data:`PIXEL_BATCHES_AHEAD`."""
        if self._loader is None:
            return PIXEL_BATCHES_AHEAD
        return dataloader_batches_ahead(self._loader) or 0

    def __getattr__(self, name: str) -> NoReturn:  # only called for attributes the loader lacks
        if name == "dali_iterator":
            # choose_image_backend records an explicit backend='torch' as "asked for"; any
            # other reason is backend='auto''s, which says why it did not pick DALI.
            why = ("you asked for backend='torch'" if self.choice.reason == "asked for"
                   else f"chosen by backend='auto': {self.choice.reason}")
            raise AttributeError(f"dali_iterator() needs backend='dali'; this loader uses the torch backend "
                                 f"({why})", name=name, obj=self)
        super().__getattr__(name)

    def _pixel_batch(self, keys: list[tuple[int, int, int]]) -> tuple:
        """One batch of a pixel source, its samples cropped, resized and written into the
        output on the thread pool (torch's resize and numpy release the GIL)."""
        out, view = self._made.output(len(keys), self.options.size, self.options.size, torch.device("cpu"))

        def one(k: int) -> None:  # pixels never fail to decode: every sample has its slot
            _, _, image, _ = self._files[keys[k]]
            self._made.fill(view[k: k + 1], image)

        self._pool.run(len(keys), one)
        labels = torch.tensor([self.samples.labels[i] for _, _, i in keys], dtype=torch.int64)
        return keys[0][1], out, labels.pin_memory() if self.device.type == "cuda" else labels, []

    def _batches(self) -> Iterator:
        if self._loader is None:  # a pixel source, made on this process's threads
            yield from prefetched(self._sampler, self._pixel_batch, depth=PIXEL_BATCHES_AHEAD)
            return
        try:
            yield from self._loader
        except RuntimeError as err:
            # The DataLoader holds the context it made of the start method's name (None without workers).
            context = self._loader.multiprocessing_context
            if context is None or context.get_start_method() == "fork" or "exited unexpectedly" not in str(err):
                raise
            raise RuntimeError(
                f"{err}. DALI is loaded in this process, so the torch backend starts its workers "
                "with forkserver (forking next to DALI's threads has crashed), which imports your "
                "script again in each worker: put its code under `if __name__ == \"__main__\":` "
                "(as for the spawn start method), or pass num_workers=0"
            ) from err

    def _epoch_batches(self, epoch: int, start: int) -> Iterator[NumberedBatch]:
        self._sampler.epoch, self._sampler.start = epoch, start
        for number, images, labels, bad in self._batches():
            for i, reason in bad:
                self.log.add(self.samples.name(i), reason)
            if len(labels) == 0:
                continue
            if self.device.type == "cuda":
                images = images.to(self.device, non_blocking=True)
                labels = labels.to(self.device, non_blocking=True)
            if self._finish is not None:
                images = self._finish(images)
            yield number, images, labels
