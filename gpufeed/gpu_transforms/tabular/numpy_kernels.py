"""numpy kernels shared by the pandas and polars paths of the table ops.

The same numpy operations in the same order on both backends, so their outputs are the
same bits. Why numpy on polars too: for ``Log`` numpy's vectorised ``log`` ran ~3x faster
per core than polars' (1M float64 values with 3 % missing: 1.1 ms for ``log(x + 1)``
against polars' 3.1 ms; 2-core AMD EPYC, numpy 2.4, polars 2.1), and ufuncs release the
GIL, so long columns are cut into pieces computed on the usable cores.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from gpufeed.machine import usable_cpus

_Item, _Result = TypeVar("_Item"), TypeVar("_Result")


def spread(function: Callable[[_Item], _Result], items: Iterable[_Item],
           threads: int | None = None) -> list[_Result]:
    """``[function(item) for item in items]``, in order, on up to ``threads`` threads (the
    usable cores by default): for work that releases the GIL (numpy ufuncs and ``take``,
    polars, pyarrow). One item, or one thread, runs here without a pool.
    """
    items = list(items)
    threads = min(threads or usable_cpus(), len(items))
    if threads <= 1:
        return [function(item) for item in items]
    # A pool per call, not one kept: a process forked later (DataLoader workers) would
    # inherit a pool whose threads it does not have.
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="gpufeed-table") as pool:
        return list(pool.map(function, items))


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

    dtype = np.dtype(dtype)
    return np.frombuffer(pa.allocate_buffer(length * dtype.itemsize), dtype=dtype)


def release_pooled() -> None:
    """Give the pool's free pages back to the system (a recipe calls it when it is done):
    the columns of the ops before the last were freed into the pool, where numpy and
    torch cannot reuse them. Columns still held are not touched; the output's pages stay
    in the pool once it is freed, until the pool's next purge or this call
    (``pyarrow.default_memory_pool().release_unused()`` does the same)."""
    import sys

    pa = sys.modules.get("pyarrow")  # not imported: nothing was pooled
    if pa is not None:
        pa.default_memory_pool().release_unused()


#: Values per piece of work, and per thread at least: a column of 1M float64 values took
#: 0.87 ms on two threads and 0.70 ms on one, 10M 9.2 ms and 12.2 ms (2 cores).
PIECE = 1 << 20


def float64_pieces(arrays: Sequence[np.ndarray],
                   compute: Callable[[int, np.ndarray, np.ndarray], object]) -> list[np.ndarray]:
    """A new float64 array per input, ``compute(i, values, out)`` filling each piece of
    ``arrays[i]`` (at most :data:`PIECE` values) into the same piece of its output, the
    pieces of every array spread over the usable cores.

    Floating-point warnings are off (an Arrow buffer's masked-out slots may hold anything;
    the callers check the values they keep). One output per input and no temporary: each
    step after the first works in place in ``out``.
    """
    outs = [pooled_empty(len(a)) for a in arrays]
    pieces = [(i, lo, min(lo + PIECE, len(a))) for i, a in enumerate(arrays) for lo in range(0, len(a), PIECE)]

    def run(piece: tuple[int, int, int]) -> None:
        i, lo, hi = piece
        with np.errstate(divide="ignore", invalid="ignore"):  # per thread: errstate is thread-local
            compute(i, arrays[i][lo:hi], outs[i][lo:hi])

    spread(run, pieces, threads=max(1, min(usable_cpus(), sum(len(a) for a in arrays) // PIECE)))
    return outs


def log_offset(arrays: Sequence[np.ndarray], offset: float) -> list[np.ndarray]:
    """``log(a + offset)`` of each array as a new float64 array.

    The sum is taken in float64 (integers converted exactly, narrow floats widened), then
    its log in place. Values whose log is undefined give NaN or -inf without a warning (the
    caller has checked the domain of the values it keeps).
    """
    def compute(_: int, values: np.ndarray, out: np.ndarray) -> None:
        np.add(values, offset, out=out, dtype=np.float64)
        np.log(out, out=out)

    return float64_pieces(arrays, compute)


def affine(arrays: Sequence[np.ndarray], params: Sequence[tuple[float, float]]) -> list[np.ndarray]:
    """``(a - sub) * (1 / div)`` of each array with its ``params[i] = (sub, div)``, as new
    float64 arrays (``MinMax``, ``Standardize``).

    Times the reciprocal, as polars computes a division by a constant: ``x / div`` differed
    from it in the last bit for a few rows in ten. The difference is taken in float64
    (integers converted exactly, narrow floats widened), as a cast first would.
    """
    def compute(i: int, values: np.ndarray, out: np.ndarray) -> None:
        sub, div = params[i]
        np.subtract(values, sub, out=out, dtype=np.float64)
        np.multiply(out, 1.0 / div, out=out)

    return float64_pieces(arrays, compute)


def fill_nan(arrays: Sequence[np.ndarray], values: Sequence[float]) -> list[np.ndarray]:
    """Each float array with its NaN replaced by ``values[i]``, as new float64 arrays
    (``FillMissing`` on pandas): a copy, then the fill where the input is NaN, piece by
    piece on the usable cores."""
    def compute(i: int, piece: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, piece)
        np.copyto(out, values[i], where=np.isnan(piece))

    return float64_pieces(arrays, compute)


def has_nan(values: np.ndarray) -> bool:
    """Whether a float array holds a NaN: ``min`` carries a NaN through, in one read with no
    temporary (``isnan(x).any()`` writes a mask of the whole column first)."""
    return len(values) > 0 and bool(np.isnan(values.min()))


def lowest(values: np.ndarray) -> float:
    """The smallest value, missing (NaN) values skipped; NaN when there is none.

    ``np.fmin.reduce`` reads the column once without a temporary: pandas' ``Series.min``
    took 1.2 ms on 1M float64 values with gaps, this 0.1 ms.
    """
    if len(values) == 0:
        return float("nan")
    return float(np.fmin.reduce(values))
