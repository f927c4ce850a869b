"""What the DALI pipeline reads: planned batches of encoded files, checked before DALI
sees them, and the per-epoch report of the files left out of DALI's own iterator.

Pure Python (no DALI import), so the pipeline builder, the loader and the iterator all
import it without importing each other.
"""

from __future__ import annotations

import warnings
import weakref
from collections import deque
from concurrent.futures import BrokenExecutor, CancelledError, Future, ThreadPoolExecutor

import numpy as np

from gpufeed.datasets.image_bytes import (
    beyond_dali,
    image_size,
    jpeg_without_stray_bytes,
    pil_reason,
    sample_fault,
)
from gpufeed.datasets.samples import SampleSource
from gpufeed.pipelines.feed_workers import FeedWorkers
from gpufeed.pipelines.geometry import train_window
from gpufeed.pipelines.options import LoaderOptions
from gpufeed.pipelines.plan import EpochPlan
from gpufeed.pipelines.seeds import sample_rng
from gpufeed.pipelines.skips import FIXED, BadFileMemory, FileStamp, Skipped, file_stamp
from gpufeed.pipelines.sources import SampleList
from gpufeed.policies import OnError


def crop_inputs(data: np.ndarray, options: LoaderOptions, epoch: int, index: int,
                pixels: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
    """The train pipeline's per-sample crop inputs ``(start [top, left], shape [h, w],
    flip)`` for sample ``index`` of ``epoch``, drawn as the torch backend draws them
    (:func:`gpufeed.pipelines.geometry.train_window`) from the size in the image's header
    (or of ``(H, W, 3)`` pixels); or the reason the header gives no size."""
    size = data.shape[:2] if pixels else image_size(data)
    if size is None or min(size) < 1:
        # In the torch backend's words for the same file (it fails there in PIL's decoder).
        pil = None if pixels else pil_reason(data)
        return f"could not decode: {pil or 'no width and height in its header'}"
    rng = sample_rng(options.seed, epoch, index)
    top, left, h, w, flip = train_window(rng, size[0], size[1], options.scale, options.ratio)
    return (np.array([top, left], np.int32), np.array([h, w], np.int32), np.array(flip, np.int32))


def pixel_input(pixels: np.ndarray, crop: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> np.ndarray:
    """What DALI is given of decoded ``(H, W, 3)`` pixels: the ``crop`` window
    (:func:`crop_inputs`) alone when training, else the whole image, as one dense array.

    DALI refuses strided arrays, so a window, or a padded raw cache's sample (a view of
    its square's rows), is copied once; a dense array is not. Sending the window alone:
    copying each whole image into the pipeline and slicing it there cost the DALI backend
    on a raw cache more CPU per image than the torch backend's crop of a view.
    """
    if crop is not None:
        (top, left), (height, width) = crop[0], crop[1]
        pixels = pixels[top:top + height, left:left + width]
    return np.ascontiguousarray(pixels)


def dali_input(data: np.ndarray, crop: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
               pixels: bool) -> np.ndarray | bytes | memoryview | str:
    """What DALI is given of one checked sample: decoded pixels through
    :func:`pixel_input`; a file's bytes without the stray bytes between its JPEG header
    segments, which libjpeg passes over and DALI's parser refuses
    (:func:`~gpufeed.datasets.image_bytes.jpeg_without_stray_bytes`); a file DALI's
    decoder fails on or decodes otherwise (:func:`~gpufeed.datasets.image_bytes.beyond_dali`:
    BMPs, animated PNGs, TIFFs of bilevel or 32-bit integer samples or turned by an
    Orientation tag)
    decoded by the torch backend's decoder and handed over as an uncompressed PNG of the
    same pixels, so both backends yield it alike; or, for such a file that decoder fails
    on, the torch backend's reason (text), so both skip it alike."""
    if pixels:
        return pixel_input(data, crop)
    if beyond_dali(data):
        return _as_png(data)
    return jpeg_without_stray_bytes(data)


def _as_png(data: np.ndarray | bytes | memoryview) -> np.ndarray | str:
    """The image's RGB pixels, as the torch backend decodes them, in a PNG (no compression:
    it is decoded again at once); the torch backend's reason when that decoder fails (DALI's
    decoder had read some such files the torch backend skips)."""
    import io

    from PIL import Image

    from gpufeed.pipelines.torch_loader import DECODE_ERRORS, decode_failure, decode_rgb

    try:
        rgb = decode_rgb(np.frombuffer(data, dtype=np.uint8)).numpy()
    except DECODE_ERRORS as exc:
        return decode_failure(exc)
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, format="PNG", compress_level=0)
    return np.frombuffer(out.getvalue(), dtype=np.uint8)


#: One sample as the feed hands it over: ``(reason, crop, fed, stamp)``: why it is left
#: out (None: it is fed), its crop inputs (training), what DALI is given of it, and the
#: stamp of the version judged bad (see :meth:`BadFileMemory.add
#: <gpufeed.pipelines.skips.BadFileMemory.add>`).
Prepared = tuple


def prepare(samples: SampleSource, options: LoaderOptions, epoch: int, index: int,
            data: np.ndarray | str) -> Prepared:
    """Check sample ``index`` of ``epoch`` as read (``data``; text: why the read failed)
    and make what DALI is given of it (:data:`Prepared`)."""
    pixels = samples.kind == "pixels"
    crop = fed = None
    reason = sample_fault(data, pixels)
    if reason is None and options.train:
        crop = crop_inputs(data, options, epoch, index, pixels)
        reason = crop if isinstance(crop, str) else None
    if reason is None:
        fed = dali_input(data, crop, pixels)
        if isinstance(fed, str):  # the torch backend's decoder refused a file handed over decoded
            reason, fed = fed, None
    return reason, crop, fed, None if reason is None else sample_stamp(samples, index, data)


def sample_stamp(samples: SampleSource, index: int, data: np.ndarray | str) -> FileStamp | None:
    """What the memory of bad files keeps of sample ``index`` as ``data`` (what was read
    of it) was judged: its file's stamp, or :data:`~gpufeed.pipelines.skips.FIXED` for a
    source whose bytes do not change (a shard is indexed when opened, a RAM cache holds a
    copy); None for a failed read (text), which is tried again."""
    if isinstance(data, str):
        return None
    return file_stamp(samples.name(index), len(data)) if isinstance(samples, SampleList) else FIXED


def prepare_read(samples: SampleSource, options: LoaderOptions, epoch: int, index: int) -> Prepared:
    """Read sample ``index`` and :func:`prepare` it."""
    return prepare(samples, options, epoch, index, samples.read_or_reason(index))


def _give_back(ahead: dict, lent: deque) -> None:
    """Cancel the batches ``ahead`` and give every slot back to the workers that lent it:
    a batch's once its worker is done with it (at once if it never started), the handed
    over ones at once (DALI copied them when it took them)."""
    for _, future, workers, slot in ahead.values():
        future.cancel()
        future.add_done_callback(lambda _done, workers=workers, slot=slot: workers.release(slot))
    ahead.clear()
    while lent:
        workers, slot = lent.popleft()
        workers.release(slot)


class FileFeed:
    """The pipeline's ``external_source``: each ``next()`` is one planned batch of
    encoded files and their labels, and for training each sample's crop window and flip.

    Training crops are drawn here, in Python, from ``(seed, epoch, sample)`` (the torch
    backend's draws), not by DALI's random operators: the pipeline is then built once
    and reused across epochs (a rebuild costs about 2 s on a GPU), any epoch can be
    replayed, and both backends crop a sample alike.

    Files are read and checked here (in the Python thread that schedules DALI runs), so a
    file that is empty, not an image, a cut-short JPEG or one whose markers libjpeg refuses
    is skipped before DALI sees it, for the torch backend's reason: DALI's CPU decoder
    returns a baseline JPEG with an unknown marker in its scan as garbage pixels, where
    torchvision raises (:func:`gpufeed.datasets.image_bytes.jpeg_marker_fault`).
    A batch's files are read by ``num_workers`` threads at once, as many readers as the
    torch backend has worker processes: on a network disk each open waits, and waits
    overlap only when several reads are in flight. With :attr:`workers` (set by the loader
    for encoded images on a GPU: :func:`~gpufeed.pipelines.feed_workers.feed_processes`) the
    reads and checks run in those worker processes instead, as many batches ahead of DALI
    as there are workers: the checks are Python, and one thread's worth capped the GPU
    loader.
    A file found bad is not read again while it stays as it was (:class:`BadFileMemory
    <gpufeed.pipelines.skips.BadFileMemory>`): one that changed since, or whose read
    failed, is read again, as the torch backend reads every file every epoch.
    ``iter()`` starts the next epoch of the plan, unless :meth:`resume` set a batch to
    go on from (after a pipeline was rebuilt mid-epoch).
    """

    def __init__(self, samples: SampleSource, plan: EpochPlan, log: BadFileMemory,
                 options: LoaderOptions, workers: FeedWorkers | None = None) -> None:
        self.samples, self.plan, self.log, self.options = samples, plan, log, options
        #: The epoch the next plain ``iter()`` starts (DALI calls it as soon as an epoch
        #: runs dry, to be ready for ``reset()``).
        self.next_epoch = 0
        self.epoch = -1
        self._batches: list[np.ndarray] = []
        self._pos = 0
        self._resume: tuple[int, int] | None = None
        #: ``(epoch, batch number, indices of the samples fed)`` handed to DALI and not yet
        #: taken out, in order.
        self.in_flight: deque[tuple[int, int, list[int]]] = deque()
        self._readers: ThreadPoolExecutor | None = None
        self._workers = workers
        #: ``(epoch, batch number) -> (sample indices, future of their Prepared, the workers
        #: it was sent to, its slot in their shared memory)``.
        self._ahead: dict[tuple[int, int], tuple[list[int], Future, FeedWorkers, int | None]] = {}
        #: ``(workers, slot)`` of the batches handed over, oldest first.
        self._lent: deque[tuple[FeedWorkers, int | None]] = deque()
        # A feed dropped half-way (an iterator left with `break`) gives its slots back.
        weakref.finalize(self, _give_back, self._ahead, self._lent)

    def _read_all(self, indices: list[int]) -> list[np.ndarray | str]:
        threads = self.options.workers
        if threads <= 1 or len(indices) <= 1:
            return [self.samples.read_or_reason(i) for i in indices]
        if self._readers is None:
            self._readers = ThreadPoolExecutor(threads, thread_name_prefix="gpufeed-read")
            weakref.finalize(self, self._readers.shutdown, wait=False)
        return list(self._readers.map(self.samples.read_or_reason, indices))

    def __iter__(self) -> FileFeed:
        if self._resume is None:
            self.epoch, self._pos = self.next_epoch, 0
            self.next_epoch += 1
        else:
            (self.epoch, self._pos), self._resume = self._resume, None
            self.next_epoch = self.epoch + 1
        self._batches = self.plan.batches(self.epoch)
        self._drop_ahead()
        return self

    @property
    def workers(self) -> FeedWorkers | None:
        """The worker processes that prepare batches ahead (None: this thread prepares them)."""
        return self._workers

    @workers.setter
    def workers(self, workers: FeedWorkers | None) -> None:
        if workers is not self._workers:
            self._drop_ahead()  # the batches ahead belong to the old workers
        self._workers = workers

    def _drop_ahead(self) -> None:
        """Forget the batches prepared ahead (a new epoch, a jump): their results are not
        waited for, and their slots go back to the workers that lent them."""
        _give_back(self._ahead, self._lent)

    def close(self) -> None:
        """Stop the worker processes, if any (idempotent; the loader owns them when it
        set them)."""
        self._drop_ahead()
        if self.workers is not None:
            self.workers.close()

    def resume(self, epoch: int, batch_number: int) -> None:
        """Make the next ``iter()`` go on from ``batch_number`` of ``epoch``."""
        self._resume = (epoch, batch_number)

    def yields_from(self, epoch: int, batch_number: int) -> bool:
        """Whether batch ``batch_number`` of ``epoch`` or a later one of that epoch holds a
        sample: False when every file left in the epoch is bad (``partial``). Reads the
        batches up to the first one that does, recording the bad files on the way under
        ``epoch`` as a run would; that batch is read again when it is fed."""
        self.epoch, self._batches = epoch, self.plan.batches(epoch)
        self._drop_ahead()
        for number in range(batch_number, len(self._batches)):
            if self._batch(number) is not None:
                self.in_flight.pop()  # not handed over: only looked at
                return True
        return False

    def __next__(self) -> tuple:
        while self._pos < len(self._batches):
            number, self._pos = self._pos, self._pos + 1
            made = self._batch(number)
            if made is not None:
                return made
        raise StopIteration

    def _batch(self, number: int) -> tuple | None:
        """Batch ``number`` of the epoch as the pipeline takes it, or None when every file
        of it is bad (``partial``: an empty batch is not handed over)."""
        source, train = self.samples, self.options.train
        pixels = source.kind == "pixels"
        encoded, labels, crops = [], [], []
        batch = [int(i) for i in self._batches[number]]
        names = [source.name(i) for i in batch]
        # Asked once per file: the answer stands for the whole batch (a file that changes
        # meanwhile is judged by what was read of it).
        known = {path: self.log.known(path) for path in names}
        prepared = self._prepared(number, batch, known)
        fed: list[int] = []  # the samples handed to DALI: a file DALI fails on is one of them

        def take(i: int, path: str, ready: Prepared | None, reason: str | None) -> bool:
            """Add sample ``i`` (``ready``: as prepared; None when ``reason`` says it is known
            bad) to the batch; False (and recorded) if bad."""
            crop = fed_data = stamp = None
            if reason is None:
                reason, crop, fed_data, stamp = ready
            if reason is not None:
                # Known bad: listed again, its stamp kept (None); else the version judged.
                self.log.add(path, reason, stamp)
                return False
            encoded.append(fed_data)
            labels.append(source.labels[i])
            crops.append(crop)
            fed.append(i)
            return True

        def stand_in(i: int) -> bool:
            path = source.name(i)
            # A file known bad is not read again, but listed again in this epoch's report,
            # as the torch backend and a resumed run list it.
            reason = self.log.known(path)
            return take(i, path, None if reason is not None else self._prepare(i), reason)

        for i, path in zip(batch, names, strict=True):
            reason = known[path]
            # A file left out when its batch was prepared ahead (known bad then, changed
            # since) is prepared now.
            take(i, path, None if reason is not None else prepared.get(i) or self._prepare(i), reason)
        if len(encoded) < len(batch) and self.plan.replaces_bad:  # drop/fill: stand-ins keep it full
            self.plan.fill_places(self.epoch, number, len(batch) - len(encoded), stand_in)
        if not encoded:
            return None
        self.in_flight.append((self.epoch, number, fed))
        labels = np.asarray(labels, dtype=np.int32)
        if not train:
            return encoded, labels
        starts, shapes, flips = (list(c) for c in zip(*crops, strict=True))
        return (encoded, labels, flips) if pixels else (encoded, labels, starts, shapes, flips)

    def _prepare(self, index: int) -> Prepared:
        return prepare_read(self.samples, self.options, self.epoch, index)

    def _prepared(self, number: int, batch: list[int], known: dict[str, str | None]) -> dict[int, Prepared]:
        """Sample index -> :data:`Prepared` for the files of batch ``number`` not known bad:
        from the worker processes (prepared ahead; the next batches are sent to them
        now), or read here by ``num_workers`` threads and prepared in this thread."""
        names = self.samples.name
        todo = [i for i in batch if known[names(i)] is None]
        if self.workers is not None:
            try:
                return self._from_workers(number, todo)
            except (BrokenExecutor, CancelledError) as exc:  # a worker died (killed, out of memory), or closed
                warnings.warn(f"gpufeed: the DALI feed's worker processes stopped ({exc or 'closed'}); the feed goes on "
                              "in its own thread, slower", RuntimeWarning, stacklevel=2)
                self.close()
                self._workers = None
        read = self._read_all(todo)
        return {i: prepare(self.samples, self.options, self.epoch, i, data) for i, data in zip(todo, read, strict=True)}

    def _from_workers(self, number: int, todo: list[int]) -> dict[int, Prepared]:
        """:meth:`_prepared` from the worker processes, for the samples ``todo`` of batch
        ``number``."""
        names, workers = self.samples.name, self.workers
        # Batches handed over before the last two: DALI copied their bytes when it took
        # them (an external source copies what it is given), so their slots are free.
        while len(self._lent) > 2:
            owner, slot = self._lent.popleft()
            owner.release(slot)
        ahead = self._ahead.pop((self.epoch, number), None)
        if ahead is None:
            # Not prepared ahead (an epoch's first batch, a resume) and waited for now: sent
            # first, cut across the workers (one worker's whole batch was ~20 ms at every
            # epoch's start on the H200), its bytes through the pipe (slots are for batches ahead).
            size = max(1, -(-len(todo) // workers.processes))
            parts = [workers.submit(self.epoch, todo[k: k + size], shared=False)[0] for k in range(0, len(todo), size)]
        else:  # its slot is lent from now on (Ctrl-C below must not lose it)
            self._lent.append((ahead[2], ahead[3]))
        for later in range(number + 1, min(number + 1 + workers.processes, len(self._batches))):
            if (self.epoch, later) not in self._ahead:
                # Files known bad now are left out; one found bad meanwhile is skipped when
                # its batch is taken (and one that changed since is prepared then).
                indices = [int(i) for i in self._batches[later] if self.log.known(names(int(i))) is None]
                future, slot = workers.submit(self.epoch, indices)
                self._ahead[(self.epoch, later)] = (indices, future, workers, slot)
        if ahead is None:
            return dict(zip(todo, (r for part in parts for r in part.result()), strict=True))
        todo, future, _, _ = ahead
        return {i: (reason, crop, workers.bytes_of(fed), stamp)
                for i, (reason, crop, fed, stamp) in zip(todo, future.result(), strict=True)}


class IteratorSkips(BadFileMemory):
    """The skipped-file report of :meth:`DaliLoader.dali_iterator
    <gpufeed.pipelines.dali_loader.DaliLoader.dali_iterator>`, per epoch like
    ``loader.skipped``.

    The iterator's feed reads ahead of the user (DALI prefetches the next epoch's first
    batches as soon as it resets at the end of an epoch), so each file is filed under the
    epoch it was read for, and :attr:`skipped` lists the files left out of the epoch of
    the last batch the iterator returned: after an epoch's last batch, and after its
    ``StopIteration``, that epoch's; from the next epoch's first batch on, the next one's.
    """

    def __init__(self, on_error: OnError | str) -> None:
        super().__init__(on_error)
        #: The epoch of the last batch the iterator returned (0 before the first).
        self.epoch = 0
        self.feed: FileFeed | None = None  # set once the feed that reports here exists
        self._by_epoch: dict[int, dict[str, Skipped]] = {}

    @property
    def skipped(self) -> list[Skipped]:
        """The files left out of epoch :attr:`epoch`, with reasons."""
        return list(self._by_epoch.get(self.epoch, {}).values())

    def add(self, path: str, reason: str, stamp: FileStamp | None = None) -> None:
        """Record a bad file under the epoch being read, or raise :class:`BadImageError`
        (``stamp``: as :meth:`BadFileMemory.add <gpufeed.pipelines.skips.BadFileMemory.add>`)."""
        self._remember(path, reason, stamp)
        epoch = self.feed.epoch if self.feed is not None else self.epoch
        self._by_epoch.setdefault(epoch, {}).setdefault(path, Skipped(path, reason))

    def carry(self, epoch: int, skipped: list[Skipped]) -> None:
        """Files a resumed ``epoch`` skipped before the cut: listed in that epoch's report,
        as in the uninterrupted run (met again, each is read again: what the state saved
        may no longer hold of the file)."""
        self.epoch = epoch
        for s in skipped:
            self._remember(s.path, s.reason)
            self._by_epoch.setdefault(epoch, {}).setdefault(s.path, s)

    def delivered(self, epoch: int) -> None:
        """The iterator returned a batch of ``epoch``: report that epoch from now on."""
        if epoch != self.epoch:
            self.epoch = epoch
            for old in [e for e in self._by_epoch if e < epoch]:
                del self._by_epoch[old]
