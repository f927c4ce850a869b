"""numpy kernels shared by the pandas and polars paths of the table ops.

The same numpy operations in the same order on both backends, so their outputs are the
same bits. Why numpy on polars too: for ``Log`` numpy's vectorised ``log`` ran ~3x faster
per core than polars' (1M float64 values with 3 % missing: 1.1 ms for ``log(x + 1)``
against polars' 3.1 ms; 2-core AMD EPYC, numpy 2.4, polars 2.1), and ufuncs release the
GIL, so long columns are cut into pieces computed on the usable cores.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from gpufeed.machine import usable_cpus

_Item, _Result = TypeVar("_Item"), TypeVar("_Result")


#: The kept thread pools, by size (see :func:`spread`); a forked child starts with none.
_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()
_THREAD_NAME = "gpufeed-table"


def _forget_pools() -> None:
    # A forked child (a DataLoader worker) inherits the pool objects but not their threads:
    # it starts pools of its own when it first needs them.
    global _POOLS_LOCK
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools)


def spread(function: Callable[[_Item], _Result], items: Iterable[_Item],
           threads: int | None = None) -> list[_Result]:
    """``[function(item) for item in items]``, in order, on up to ``threads`` threads (the
    usable cores by default): for work that releases the GIL (numpy ufuncs and ``take``,
    polars, pyarrow). One item, one thread, or a call from one of these threads runs here;
    more run on a pool kept for the process, each thread taking the next item when free.

    Why a kept pool: starting one per call cost 0.1-0.3 ms, as much as the second core
    saves on a 1M-value column's ``log``; a call from a pool thread runs inline, since
    waiting there on the pool's own threads could wait for ever. Many items go to the
    pool in :data:`BATCHES_PER_THREAD` runs per thread: a task per item cost ~0.2 ms of
    hand-over each, 0.4 s for the 2,000 columns of a wide table.
    """
    items = list(items)
    threads = min(threads or usable_cpus(), len(items))
    if threads <= 1 or threading.current_thread().name.startswith(_THREAD_NAME):
        return [function(item) for item in items]
    with _POOLS_LOCK:
        pool = _POOLS.get(threads)
        if pool is None:
            pool = _POOLS[threads] = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=_THREAD_NAME)
    if len(items) <= threads * BATCHES_PER_THREAD:
        return list(pool.map(function, items))
    size = -(-len(items) // (threads * BATCHES_PER_THREAD))
    runs = pool.map(lambda run: [function(item) for item in run], [items[i:i + size] for i in range(0, len(items), size)])
    return [result for run in runs for result in run]


#: Runs of items per thread in :func:`spread`: enough that a thread done early takes
#: another run while the others finish theirs (at 4, a 1M-row ``MinMax`` of 37 columns,
#: 148 pieces, ran ~10 % slower than a task per piece; at 16 no slower).
BATCHES_PER_THREAD = 16


def pooled_empty(length: int, dtype: np.typing.DTypeLike = np.float64) -> np.ndarray:
    """An uninitialised array from Arrow's memory pool (mimalloc or jemalloc, as polars'
    own buffers), for an op's output column.

    Why not ``np.empty``: a large numpy array is fresh memory from the system, each of its
    pages faulted in and zeroed at the first write, every time; the pool keeps freed pages
    and hands them out again, as polars' allocator does. Over 18 columns of 1M values,
    ``log(x + 1)`` on two threads took 25 ms into ``np.empty`` outputs and 14 ms into
    pooled ones, min-max scaling 22 ms and 12 ms (2-core AMD EPYC, steady state).
    """
    import pyarrow as pa

    global _POOLED
    _POOLED = True
    dtype = np.dtype(dtype)
    return np.frombuffer(pa.allocate_buffer(length * dtype.itemsize), dtype=dtype)


#: Whether :func:`pooled_empty` has run in this process (so pyarrow is imported, whole).
_POOLED = False


def release_pooled() -> None:
    """Give the pool's free pages back to the system (a recipe calls it when it is done):
    the columns of the ops before the last were freed into the pool, where numpy and
    torch cannot reuse them. Columns still held are not touched; the output's pages stay
    in the pool once it is freed, until the pool's next purge or this call
    (``pyarrow.default_memory_pool().release_unused()`` does the same)."""
    # Not "is pyarrow in sys.modules": while another thread is still importing it, the
    # module is there half made, without default_memory_pool (a recipe on one thread and a
    # Categorify importing pyarrow on another failed so).
    if _POOLED:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()


#: Values per piece of work, and per thread at least. ``log(x + 1)`` with its smallest
#: output (fastest of 40-run A/Bs, 2 cores, the kept pool): one column of 1M values
#: 0.45 ms in 2**18 pieces, 0.68 ms as one piece on one thread; 18 such columns 11.6 ms
#: (2**17: 12.9, 2**20: 12.0); 10M values 6.3 ms (2**20: 7.1).
PIECE = 1 << 18


def threads_for(values: int) -> int:
    """Threads worth using for one streaming pass (a mean, a gather, an affine map) over
    ``values`` values in all: one per :data:`PIECE` values, at least one, at most the
    usable cores. Below a piece a thread's hand-over costs more than the second core
    saves: ``FillMissing`` of 3 columns of 20,000 rows spent ~1 ms of its 3-4 ms waiting
    on the pool for their means."""
    return max(1, min(usable_cpus(), values // PIECE))


def float64_pieces(arrays: Sequence[np.ndarray], compute: Callable[..., object], block: bool = False,
                   beside: Sequence[np.ndarray] = ()) -> Sequence[np.ndarray]:
    """A new float64 array per input, ``compute(i, values, out)`` filling each piece of
    ``arrays[i]`` (at most :data:`PIECE` values) into the same piece of its output, the
    pieces of every array spread over the usable cores. With ``block`` (arrays of one
    length), the outputs are the rows of one 2-D array, returned as it is, for a caller that
    hands a wide table's columns over as one block (:func:`.pandas_kernels.placed`).
    ``beside``: one more array per input, as long, whose same piece is handed over too,
    ``compute(i, values, out, beside_piece)`` (each row's group code).

    Floating-point warnings are off (an Arrow buffer's masked-out slots may hold anything;
    the callers check the values they keep). One output per input and no temporary: each
    step after the first works in place in ``out``.
    """
    return _pieces(arrays, compute, block, beside)[0]


def _pieces(arrays: Sequence[np.ndarray], compute: Callable[..., _Result], block: bool = False,
            beside: Sequence[np.ndarray] = ()) -> tuple[Sequence[np.ndarray], list[list[_Result]]]:
    """:func:`float64_pieces`, with what ``compute`` returned for each piece, per array."""
    if block:
        rows = len(arrays[0]) if len(arrays) else 0
        outs: Sequence[np.ndarray] = pooled_empty(len(arrays) * rows).reshape(len(arrays), rows)
    else:
        outs = [pooled_empty(len(a)) for a in arrays]
    pieces = [(i, lo, min(lo + PIECE, len(a))) for i, a in enumerate(arrays) for lo in range(0, len(a), PIECE)]

    def run(piece: tuple[int, int, int]) -> _Result:
        i, lo, hi = piece
        with np.errstate(divide="ignore", invalid="ignore"):  # per thread: errstate is thread-local
            return compute(i, arrays[i][lo:hi], outs[i][lo:hi], *([beside[i][lo:hi]] if beside else []))

    done = spread(run, pieces, threads_for(sum(len(a) for a in arrays)))
    results: list[list[_Result]] = [[] for _ in arrays]
    for (i, _, _), result in zip(pieces, done, strict=True):
        results[i].append(result)
    return outs, results


def _log_into(values: np.ndarray, out: np.ndarray, offset: float) -> None:
    # Not log1p for offset 1: as fast on values, but on a column with 3 % NaN (pandas'
    # missing values) 1.48 ms per 1M values against 1.10 for the sum and the log.
    np.add(values, offset, out=out, dtype=np.float64)
    np.log(out, out=out)


def log_offset(arrays: Sequence[np.ndarray], offset: float, block: bool = False) -> Sequence[np.ndarray]:
    """``log(a + offset)`` of each array as a new float64 array.

    The sum is taken in float64 (integers converted exactly, narrow floats widened), then
    its log in place. Values whose log is undefined give NaN or -inf without a warning (the
    caller has checked the domain of the values it keeps, or checks the outputs:
    :func:`log_offset_lows`). ``block``: as :func:`float64_pieces`.
    """
    return float64_pieces(arrays, lambda _, values, out: _log_into(values, out, offset), block)


def log_offset_lows(arrays: Sequence[np.ndarray], offset: float) -> tuple[list[np.ndarray], list[float]]:
    """:func:`log_offset`, with each output's smallest value, NaN when the output holds a
    NaN (NaN propagates through ``min``).

    A finite smallest output proves, in the same pass while the values are in cache, that
    every input value ``x`` had ``x + offset > 0`` and none was NaN: a caller can skip both
    checks (two more reads of every column) and make them only when it is not finite.
    """
    def compute(_: int, values: np.ndarray, out: np.ndarray) -> float:
        _log_into(values, out, offset)
        return float(out.min()) if len(out) else math.inf

    outs, lows = _pieces(arrays, compute)
    return outs, [min(piece_lows, default=math.inf) if not any(map(math.isnan, piece_lows)) else math.nan
                  for piece_lows in lows]


def affine(arrays: Sequence[np.ndarray], params: Sequence[tuple[float, float]],
           block: bool = False) -> Sequence[np.ndarray]:
    """``(a - sub) * (1 / div)`` of each array with its ``params[i] = (sub, div)``, as new
    float64 arrays (``MinMax``, ``Standardize``).

    Times the reciprocal, as polars computes a division by a constant: ``x / div`` differed
    from it in the last bit for a few rows in ten. The difference is taken in float64
    (integers converted exactly, narrow floats widened), as a cast first would. ``block``:
    as :func:`float64_pieces`.
    """
    def compute(i: int, values: np.ndarray, out: np.ndarray) -> None:
        sub, div = params[i]
        np.subtract(values, sub, out=out, dtype=np.float64)
        np.multiply(out, 1.0 / div, out=out)

    return float64_pieces(arrays, compute, block)


def standardize_gathered(arrays: Sequence[np.ndarray], codes: Sequence[np.ndarray], means: Sequence[np.ndarray],
                         stds: Sequence[np.ndarray]) -> Sequence[np.ndarray]:
    """``(a - means[i][c]) / stds[i][c]`` of each array ``a = arrays[i]``, ``c`` its rows'
    group codes ``codes[i]`` (as long, numpy's index type), as new float64 arrays
    (``Standardize(by=)``), in pieces on the usable cores (:func:`float64_pieces`).

    The gathered mean subtracted, the gathered std divided by, as polars' expression and
    cuDF compute it (the same bits); the codes index the tables by construction, so the
    gathers skip numpy's bounds check (``mode="clip"``: no buffered output either). Per
    piece one output and one temporary: with four temporaries on one thread, pandas' path
    was as slow as pandas by hand (sensor, 40 columns)."""
    def compute(i: int, values: np.ndarray, out: np.ndarray, at: np.ndarray) -> None:
        gathered = np.take(means[i], at, mode="clip")
        np.subtract(values, gathered, out=out, dtype=np.float64)
        np.take(stds[i], at, out=gathered, mode="clip")
        np.divide(out, gathered, out=out)

    return float64_pieces(arrays, compute, beside=codes)


def clip_to(arrays: Sequence[np.ndarray], bounds: Sequence[Sequence[float | None]],
            block: bool = False) -> Sequence[np.ndarray]:
    """Each float array clipped to its ``bounds[i] = [low, high]`` (None: no bound; a
    ``Clip`` always has one) as new float64 arrays; NaN stays NaN (``np.clip`` is
    ``minimum(maximum(...))``, which carries it). ``block``: as :func:`float64_pieces`."""
    def compute(i: int, values: np.ndarray, out: np.ndarray) -> None:
        np.clip(values, *bounds[i], out=out)

    return float64_pieces(arrays, compute, block)


def fill_nan(arrays: Sequence[np.ndarray], values: Sequence[float], block: bool = False) -> Sequence[np.ndarray]:
    """Each float array with its NaN replaced by ``values[i]``, as new float64 arrays
    (``FillMissing`` on pandas): a copy, then the fill where the input is NaN, piece by
    piece on the usable cores. ``block``: as :func:`float64_pieces`."""
    def compute(i: int, piece: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, piece)
        np.copyto(out, values[i], where=np.isnan(piece))

    return float64_pieces(arrays, compute, block)


def has_nan(values: np.ndarray) -> bool:
    """Whether a float array holds a NaN: ``min`` carries a NaN through, in one read with no
    temporary (``isnan(x).any()`` writes a mask of the whole column first)."""
    return len(values) > 0 and bool(np.isnan(values.min()))


def nan_mean(values: np.ndarray) -> float:
    """The mean of a float64 array, NaN skipped (NaN when it has no value, inf - inf NaN,
    without a warning): the same bits as pandas' ``Series.mean``, which sums the array with
    its NaN set to 0 (numpy's pairwise sum) and divides by the count of the others. The copy
    with zeros goes into a pooled array (:func:`pooled_empty`): into fresh memory it cost
    twice as much (1M values: 4.9 ms against 2.3)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if not has_nan(values):
            return float(values.sum() / len(values)) if len(values) else math.nan
        zeroed = pooled_empty(len(values))
        np.copyto(zeroed, values)
        missing = np.isnan(zeroed)
        zeroed[missing] = 0.0
        count = len(values) - np.count_nonzero(missing)
        return float(zeroed.sum() / count) if count else math.nan


def lowest(values: np.ndarray) -> float:
    """The smallest value, missing (NaN) values skipped; NaN when there is none.

    ``np.fmin.reduce`` reads the column once without a temporary: pandas' ``Series.min``
    took 1.2 ms on 1M float64 values with gaps, this 0.1 ms.
    """
    if len(values) == 0:
        return float("nan")
    return float(np.fmin.reduce(values))
