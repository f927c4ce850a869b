"""``Categorify.fit_transform`` on an eager polars frame: the vocabulary and the codes of
each text or integer column from one pass (:func:`polars_fit_codes`).

Why not narwhals: the two-pass form (distinct values, then an ``Enum`` cast) was 1.3-1.9x
slower per text column, and for 500 station ids ``replace_strict`` took 51 ms, ``unique`` +
``search_sorted`` 32 ms, a range table 7 ms (1M rows).

- A text column whose every value is 12 bytes or shorter (inline in its Arrow view) is
  numbered from its views' 64-bit words (:func:`_inline_ids`): one exact 64-bit key per
  value, Arrow's ``unique`` of the keys and a multiply-shift hash without collisions on
  them (or ``dictionary_encode`` for many values), each row's code then gathered by its
  slot. 1M rows: 3-6 ms a column where the cast below took 9.2-11 ms.
- Any other text column is cast to a ``Categorical`` over a fresh category set: one hash
  pass whose physical ids number the distinct values. The few distinct values are sorted
  and each id's code gathered from a table.
- Why slices: a column's cast is one hash pass on one core, and it is the whole cost, so
  a table with fewer text columns than cores (the sensor table has one) left cores idle
  (1M rows, 2 cores: 16 ms for the op before, 10.5-11.8 ms after). So when a table has fewer text columns than cores, each is cut into as
  many slices as it takes to give every core one (at least :data:`SLICE_ROWS` rows each),
  each slice cast over its own category set on a thread of its own (the cast releases the
  GIL), and the slices' distinct values are merged (a hash pass over the distinct values
  only) before the gather. (Four slices on two cores were no faster than two.) With a
  text column per core or more, one polars query casts them all and one more gathers
  the codes (:func:`_fit_whole_columns`), which beat the slices' threads there; columns
  numbered from their views go one per thread instead. A column of views in several
  chunks (row groups) is sliced at its chunks' edges (:func:`_slice_bounds`).
- An integer column over a narrow range (ids, codes) marks the values present in a table
  as long as the range and gathers each row's code from its running
  count; a wide one takes its sorted distinct values and ``np.searchsorted``. It is
  fitted and coded before the text slices, on the calling thread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import narwhals as nw
import numpy as np

from gpufeed.gpu_transforms.tabular.frames import NwFrame, with_series, wrap
from gpufeed.gpu_transforms.tabular.numpy_kernels import PIECE, pooled_empty, spread
from gpufeed.machine import usable_cpus

#: Rows per slice at least when a text column is cut for the cores (a slice's thread and
#: category set cost ~0.1 ms).
SLICE_ROWS = 1 << 17


def polars_fit_codes(frame: NwFrame, columns: Sequence[str], missing: int,
                     start: int = 2) -> tuple[dict[str, list[Any]], NwFrame] | None:
    """Fit the sorted vocabulary of each text or integer column of an eager polars frame
    and write its int32 codes (``start + i`` for the ``i``-th value, ``missing`` for a
    missing value) in the same pass; None when a column is of another type.

    Every value present joins the vocabulary (``Categorify(min_count=1)``), so no code
    stands for an unseen value here.
    """
    import polars as pl

    native = nw.to_native(frame)
    schema = native.schema
    if not all(schema[c] == pl.String or schema[c].is_integer() for c in columns):
        return None
    texts = [c for c in columns if schema[c] == pl.String]
    rows = native.height
    cuts = max(1, min(math.ceil(usable_cpus() / max(len(texts), 1)), rows // SLICE_ROWS))
    # Mostly distinct values (ids) are numbered whole (:func:`_slice_ids` says why): merging
    # the slices' vocabularies would cost as much again. Not asked of short columns, whose
    # distinct values are few in any case (~0.6 ms a column: 20,000 rows, 4 text columns,
    # 10 -> 12 ms).
    many = {c for c in texts if rows >= SLICE_ROWS and _mostly_distinct(native.get_column(c))}
    # A text column per core or more: one polars query casts them all, unless every column
    # is inline views (numbered from them, a slice per chunk: :func:`_slice_bounds`).
    if cuts == 1 and not many and not all(_all_inline(native.get_column(c)) for c in texts):
        return _fit_whole_columns(native, columns, texts, missing, start)
    slices = [(c, lo, hi) for c in texts
              for lo, hi in ([(0, rows)] if c in many else _slice_bounds(native.get_column(c), cuts))]
    integers = [c for c in columns if c not in texts]

    def fit(task: tuple[str, int, int] | str) -> Any:
        if isinstance(task, str):  # an integer column, whole
            return _integer_codes(native.get_column(task), missing, start)
        c, lo, hi = task
        return _slice_ids(native.get_column(c).slice(lo, hi - lo), many=c in many)

    # The integer columns first, on this thread, then the slices on the cores: an integer
    # column fitted beside the slices (polars' and numpy's steps that keep the GIL, page
    # faults of fresh pooled pages in two threads at once) took 3.4-7 ms instead of 1.7-2.8
    # and slowed the slices beside it: the sensor table's op, 1M rows, 8.1-10.6 -> 7.8 ms.
    fitted = [fit(c) for c in integers] + spread(fit, slices)
    vocabularies: dict[str, list[Any]] = {}
    coded: dict[str, np.ndarray] = {}
    for c, (vocab, codes) in zip(integers, fitted, strict=False):
        vocabularies[c], coded[c] = vocab, codes
    sliced = fitted[len(integers):]
    tables: list[np.ndarray] = []
    for c in texts:
        parts = [i for i, task in enumerate(slices) if task[0] == c]
        vocabularies[c], column_tables = _merge_vocabularies([sliced[i].values for i in parts], missing, start)
        tables.extend(column_tables)
    outs = {c: pooled_empty(rows, np.int32) for c in texts}

    def gather(i: int) -> None:
        c, lo, hi = slices[i]
        part, table, out = sliced[i], tables[i], outs[c][lo:hi]
        if part.slots is not None:  # the codes by slot, at once: one gather per row, not two
            by_slot = np.empty(part.width, dtype=np.int32)  # unset slots: missing rows' only
            by_slot[part.slots] = table[:-1]
            table = by_slot
        # "wrap": an index is in range or its row missing, and "raise" would copy `out` first.
        np.take(table, part.index, out=out, mode="wrap")
        if part.missing_rows is not None:
            np.copyto(out, np.int32(missing), where=part.missing_rows)

    spread(gather, range(len(slices)))
    coded.update(outs)
    # numpy's buffers, not copies
    return ({c: vocabularies[c] for c in columns},
            wrap(with_series(native, [pl.Series(c, coded[c]) for c in columns])))


def _slice_bounds(series: Any, cuts: int) -> list[tuple[int, int]]:
    """The row ranges a text column is numbered in: ``cuts`` equal slices, or where the
    column is several chunks of inline views (a Parquet file's row groups) and they make as
    many slices at least, its chunks' (joined up to :data:`SLICE_ROWS` rows): a slice
    within a chunk is numbered from that chunk's views in place.

    Why: numbering from the views needs one chunk, and copying each column into one first
    took 95 ms of the 10M-row transactions table's 4 text columns (10 chunks each), a
    sixth of their numbering; before that, the ``Categorical`` cast served them, 0.85 s
    against 0.37 s by chunks (2 cores)."""
    rows = len(series)
    if series.n_chunks() > 1 and _all_inline(series):
        bounds, end = [0], 0
        for chunk in series.get_chunks():
            end += len(chunk)
            if end - bounds[-1] >= SLICE_ROWS:  # long enough: the slice ends with this chunk
                bounds.append(end)
        if len(bounds) > 1:
            bounds[-1] = rows  # a short tail joins the last slice
        if len(bounds) > cuts:
            return list(zip(bounds, bounds[1:], strict=False))
    bounds = [rows * i // cuts for i in range(cuts + 1)]
    return list(zip(bounds, bounds[1:], strict=False))


def _fit_whole_columns(native: Any, columns: Sequence[str], texts: Sequence[str], missing: int,
                       start: int) -> tuple[dict[str, list[Any]], NwFrame]:
    """:func:`polars_fit_codes` with a text column per core or more: every text column cast
    in one query (polars spreads the columns over its threads), every code gathered in one
    more. 10M transactions rows, 4 text columns, 2 cores: 0.27 s, against 0.31 s through
    the slices' Python threads and numpy's gather."""
    import polars as pl

    categories = {c: pl.Categories.random() for c in texts}
    # Cast only: a to_physical() in the same query leaves the category set unfilled.
    cast = native.with_columns(*[pl.col(c).cast(pl.Categorical(cats)) for c, cats in categories.items()])
    vocabularies: dict[str, list[Any]] = {}
    exprs = []
    for c in columns:
        if c in categories:
            vocabularies[c], (table,) = _merge_vocabularies([categories[c].to_series()], missing, start)
            index = pl.col(c).to_physical()
            if cast.get_column(c).null_count():
                index = index.fill_null(len(table) - 1)  # the slot holding `missing`
            exprs.append(pl.lit(pl.Series(table)).gather(index).alias(c))
        else:
            vocabularies[c], codes = _integer_codes(native.get_column(c), missing, start)
            exprs.append(pl.Series(c, codes))
    return vocabularies, wrap(cast.with_columns(*exprs))


@dataclass
class _SliceIds:
    """A text slice's distinct ``values`` (polars text), numbered ``0..k-1``, and each row's
    number: ``index`` itself, or where ``slots`` is given, the number whose slot (in a
    table ``width`` long) is ``index``. A missing value's number is ``k``, or where
    ``missing_rows`` is given, its ``index`` is anything and ``missing_rows`` marks it."""

    index: np.ndarray
    values: Any
    slots: np.ndarray | None = None
    width: int = 0
    missing_rows: np.ndarray | None = None


def _slice_ids(part: Any, many: bool = False) -> _SliceIds:
    """A text slice's values numbered over a category set of its own: from its views where
    every value is inline (:func:`_inline_ids`), else by a cast to a ``Categorical``, or
    with ``many`` (mostly distinct values, :func:`_mostly_distinct`) by Arrow's
    ``dictionary_encode``.

    Why: the cast's cost grows with the distinct values (500,000 rows, one thread: 50
    values 22 ms, 5,000 35 ms, 339,000 ids 330 ms, its category set read back included),
    Arrow's less (24, 39 and 160 ms); the ids are the same (order of first appearance)."""
    import polars as pl

    inline = _inline_ids(part)
    if inline is not None:
        return inline
    if many:
        import pyarrow.compute as pc

        encoded = pc.dictionary_encode(part.rechunk().to_arrow())
        index = encoded.indices
        if index.null_count:
            index = index.fill_null(len(encoded.dictionary))
        return _SliceIds(index.to_numpy(), pl.Series(part.name, pl.from_arrow(encoded.dictionary), dtype=pl.String))
    categories = pl.Categories.random()  # fresh ids 0..k-1
    cast = part.cast(pl.Categorical(categories))
    values = categories.to_series()  # read while `cast` keeps the set alive
    ids = cast.to_physical()
    if ids.null_count():
        ids = ids.fill_null(len(values))
    return _SliceIds(ids.to_numpy(), values)


def _mostly_distinct(series: Any) -> bool:
    """Whether more than half of a sample of a text column's values (every
    :data:`_SAMPLE_EVERY`-th, at least 64 of them) are distinct: ids, not categories."""
    sample = series.gather_every(_SAMPLE_EVERY)
    return len(sample) >= 64 and sample.n_unique() > len(sample) // 2


def _inline_views(series: Any) -> Any | None:
    """``series`` (polars text) as an Arrow ``string_view`` array whose every value is
    inline in its 16-byte view (no data buffer: no value longer than 12 bytes), zero-copy
    for one chunk; None otherwise (a long value, or a pyarrow without views).

    A slice over several chunks whose every chunk is inline (small chunks joined by
    :func:`_slice_bounds`) is made one chunk first: copying its views (16 bytes a value)
    took 4 ms of 5M rows, and numbering them from the views 22 ms, where the
    ``Categorical`` cast it avoids took 44 ms (the 10M-row sensor table, read in 10 row
    groups, before its slices followed its chunks).
    """
    if series.n_chunks() > 1:
        if not _all_inline(series):
            return None
        series = series.rechunk()
    return _chunk_views(series)


def _chunk_views(series: Any) -> Any | None:
    """:func:`_inline_views` of a one-chunk ``series``, zero-copy; None for more chunks."""
    import polars as pl
    import pyarrow as pa

    view_type = getattr(pa, "string_view", None)
    if view_type is None or series.dtype != pl.String or series.n_chunks() > 1:
        return None
    try:
        array = series.to_arrow(compat_level=pl.CompatLevel.newest())
    except (AttributeError, TypeError):  # a polars without compat levels
        return None
    if not isinstance(array, pa.Array) or array.type != view_type() or len(array.buffers()) != 2:
        return None
    return array


def _all_inline(series: Any) -> bool:
    """Whether every chunk of ``series`` is text inline in its views (:func:`_chunk_views`),
    without copying anything."""
    return all(_chunk_views(chunk) is not None for chunk in series.get_chunks())


#: The 8 bytes of an inline view holding its length (its low 4 bits: at most 12) and its
#: first 4 bytes, the rest zero: where :func:`_inline_ids` packs 3 more bytes.
_LENGTH_AND_PREFIX = np.uint64(0xFFFF_FFFF_0000_00FF)
#: The 3 bytes past the prefix, where a key of values of 7 bytes or fewer holds them.
_TAIL_BYTES = np.uint64(0xFF_FFFF)


def _inline_ids(part: Any) -> _SliceIds | None:
    """:func:`_slice_ids` from the values' Arrow views, for a slice whose every value is
    inline (12 bytes at most), or None where the views do not serve (the caller casts).

    An inline view is the value's length (4 bytes) and its bytes, zero-padded to 12: two
    words, ``head`` (length and bytes 0-3) and ``tail`` (bytes 4-11). One 64-bit key
    holds a whole value where every value has the same ``head`` (one length and prefix:
    ids and codes such as ``"cit_02232"``; the key is the ``tail``) or is 7 bytes or
    shorter (the ``tail`` fits in ``head``'s unused bits 8-31). The keys are numbered
    (:func:`_number_keys`) and the distinct ones decoded back to text. Either key is
    one-to-one with the view, so no two values share one; a value with two views (padding
    not zeroed by the writer of the data) shows up as a repeated decoded value, and then
    the cast serves. Why: a 1M-row text column took 9.2-11 ms through the ``Categorical``
    cast and 3-6 ms here (the sensor table's regions, the transactions' text columns):
    polars' category map, not hashing the text, was the cost.
    """
    import polars as pl
    import pyarrow as pa

    array = _inline_views(part)
    rows = len(part)
    if array is None or rows == 0:
        return None
    offset, nulls = array.offset, array.null_count
    if nulls == rows:  # no value: every id is the missing slot, 0
        return _SliceIds(np.zeros(rows, dtype=np.int32), pl.Series(part.name, [], dtype=pl.String))
    words = np.frombuffer(array.buffers()[1], dtype=np.uint64, count=2 * (offset + rows))[2 * offset:]
    head, tail = words[0::2], words[1::2]
    # A missing value's view is whatever its writer left: the checks skip them.
    valid: Any = True
    if nulls:
        bits = np.frombuffer(array.buffers()[0], dtype=np.uint8)
        valid = np.unpackbits(bits, count=offset + rows, bitorder="little")[offset:].view(np.bool_)
    first = int(np.argmax(valid)) if nulls else 0
    key = pooled_empty(rows, np.uint64)
    same_head = head == head[first]
    if nulls:  # `or` with the missing rows: a third of an `equal(..., where=valid)`'s time
        np.logical_or(same_head, ~valid, out=same_head)
    if same_head.all():
        np.copyto(key, tail)
        shared_head: int | None = int(head[first])
    elif int(np.max(tail, where=valid, initial=0)) < 1 << 24:  # no value over 7 bytes
        np.left_shift(tail, np.uint64(8), out=key)
        np.bitwise_or(key, head, out=key)
        shared_head = None
    else:
        return None
    validity = None if not nulls else pa.py_buffer(np.packbits(valid, bitorder="little"))
    keys = pa.Array.from_buffers(pa.uint64(), rows, [validity, pa.py_buffer(key)], null_count=nulls)
    numbered = _number_keys(keys, key)
    distinct = numbered.values
    views = np.empty((len(distinct), 2), dtype=np.uint64)
    if shared_head is not None:
        views[:, 0], views[:, 1] = shared_head, distinct
    else:
        views[:, 0], views[:, 1] = distinct & _LENGTH_AND_PREFIX, (distinct >> np.uint64(8)) & _TAIL_BYTES
    decoded = pa.Array.from_buffers(pa.string_view(), len(distinct), [None, pa.py_buffer(views)])
    numbered.values = pl.Series(part.name, pl.from_arrow(decoded), dtype=pl.String)
    if numbered.values.n_unique() != len(distinct):
        return None
    if nulls:
        numbered.missing_rows = ~valid
    return numbered


#: A sample of every this many keys with more distinct keys than :data:`_MANY_KEYS` goes
#: straight to ``dictionary_encode`` (:func:`_number_keys`).
_SAMPLE_EVERY, _MANY_KEYS = 64, 512


def _number_keys(keys: Any, key: np.ndarray) -> _SliceIds:
    """The 64-bit ``keys`` (an Arrow array over ``key``'s buffer, which is overwritten)
    numbered, as :class:`_SliceIds` whose ``values`` are the distinct keys (numpy) by
    number; a missing key's ``index`` is anything (the caller marks its row).

    Few distinct keys: ``unique``, then a multiply-shift hash without collisions on them
    (:func:`_perfect_hash`): the slots are the rows' indices, and the caller gathers each
    row's code by its slot at once. 1M rows: 2.7-4.2 ms where Arrow's ``dictionary_encode``
    took 3.7-6.7 ms, and the gather of codes by number that it needs 0.5-0.8 ms more.
    Many (a sample says, or the hash found none): ``dictionary_encode``, which beat
    ``unique`` then ``index_in`` (5001 cities: 3.7 ms against 6 ms).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    hashed = None
    if len(pc.unique(pa.array(key[::_SAMPLE_EVERY]))) <= _MANY_KEYS:
        distinct = pc.unique(keys).drop_null().to_numpy()  # the missing values' keys stay out
        hashed = _perfect_hash(distinct)
    if hashed is None:
        encoded = pc.dictionary_encode(keys)  # missing keys: null, out of the dictionary
        indices = encoded.indices
        index = np.frombuffer(indices.buffers()[1], dtype=np.int32, count=indices.offset + len(indices))
        return _SliceIds(index[indices.offset:], encoded.dictionary.to_numpy())
    multiplier, shift, slots = hashed
    np.multiply(key, multiplier, out=key)  # the keys are not needed past here
    np.right_shift(key, shift, out=key)
    return _SliceIds(key.view(np.int64), distinct, slots=slots, width=1 << (64 - int(shift)))


#: Odd 64-bit multipliers :func:`_perfect_hash` tries in turn (fixed: the same ids every run).
#: ``| np.uint64(1)``, not ``| 1``: NumPy 1.x promotes a uint64 scalar with a Python int to
#: float64, and ``bitwise_or`` refuses floats (the import failed there).
_MULTIPLIERS = tuple(np.uint64(m | np.uint64(1)) for m in np.random.default_rng(20240611).integers(
    1 << 62, 1 << 64, size=8, dtype=np.uint64, endpoint=False))
#: The largest table :func:`_perfect_hash` builds, in bits (4 MiB of int32): up to ~720 keys.
_PERFECT_BITS = 20


def _perfect_hash(distinct: np.ndarray) -> tuple[np.uint64, np.uint64, np.ndarray] | None:
    """A multiply-shift hash without collisions on the 64-bit keys ``distinct``: the
    multiplier, the shift (64 less the slots' bits), and each key's slot; None for too
    many keys, or none found.

    The table has at least ``2 * k**2`` slots for ``k`` keys, so a multiplier collides
    with probability under 1/2 (multiply-shift is 2-universal); eight tries all fail with
    probability under 1/256, and then the caller numbers the keys another way.
    """
    count = len(distinct)
    bits = max(4, (2 * count * count - 1).bit_length())
    if bits > _PERFECT_BITS:
        return None
    shift = np.uint64(64 - bits)
    for multiplier in _MULTIPLIERS:
        slots = (distinct * multiplier) >> shift
        if len(np.unique(slots)) == count:
            return multiplier, shift, slots.astype(np.intp)
    return None


#: At most this many distinct values over all slices are merged in Python.
_FEW_SEEN = 1024


def _merge_vocabularies(seen: Sequence[Any], missing: int, start: int) -> tuple[list[Any], list[np.ndarray]]:
    """The sorted vocabulary of the slices' distinct values ``seen``, and per slice a table
    from its ids to codes, with ``missing`` at the slot past its last id."""
    import polars as pl

    if sum(len(s) for s in seen) <= _FEW_SEEN:
        # A few values: merged and sorted in Python (the sensor table's 2 x 6 regions: 0.7 ms
        # through the Categorical cast below, 0.03 ms here; one slice of them: 0.13 ms by
        # polars' sort). `sorted`: code-point order, polars' UTF-8 byte order.
        lists = [s.to_list() for s in seen]
        vocabulary = sorted(set().union(*lists))
        code = {v: start + i for i, v in enumerate(vocabulary)}
        return vocabulary, [np.array([*(code[v] for v in part), missing], dtype=np.int32) for part in lists]
    if len(seen) == 1:
        values, ids = seen[0], [np.arange(len(seen[0]))]
    else:
        categories = pl.Categories.random()
        cast = pl.concat(seen).cast(pl.Categorical(categories))
        values = categories.to_series()
        joined = cast.to_physical().to_numpy()
        ids = np.split(joined, np.cumsum([len(s) for s in seen])[:-1])
    # Sorted by polars: UTF-8 byte order is code-point order, Python's `sorted`.
    order = values.arg_sort().to_numpy()
    rank = np.empty(len(values), dtype=np.int32)
    rank[order] = np.arange(start, start + len(values), dtype=np.int32)
    return values.gather(order).to_list(), [np.append(rank[i], np.int32(missing)) for i in ids]


#: An integer column whose values span at most this many times its length (plus a floor)
#: gets its codes from a table as long as the range; a wider one is searched.
_RANGE_PER_ROW, _RANGE_FLOOR = 2, 1 << 16


def _integer_codes(series: Any, missing: int, start: int) -> tuple[list[int], np.ndarray]:
    """The sorted distinct values of a polars integer column and its int32 codes.

    Over a narrow range the values present are marked in a table as long as the range and
    each row's code gathered from its running count (numpy's gather: polars' took 3.4 ms of
    1M rows' 6 ms), on the cores, into a pooled output. Values from 0 up index the table
    themselves: no ``values - lo`` copy, which with ``np.bincount`` and a fresh output had
    made the sensor table's ``station_id`` (10M rows, 500 ids) 36 ms against 19 ms now
    (2 cores). A wide range takes the sorted distinct values and ``np.searchsorted``.
    """
    import polars as pl

    values = series.drop_nulls()
    if len(values) == 0:
        return [], np.full(len(series), missing, dtype=np.int32)  # every value is missing
    lo, hi = int(values.min()), int(values.max())
    nulls = len(values) < len(series)
    rows = len(series)
    raw = (series.fill_null(lo) if nulls else series).to_numpy()
    if hi - lo < _RANGE_PER_ROW * rows + _RANGE_FLOOR:
        # The table starts at 0 when that costs at most as many slots as the range may have.
        base = 0 if lo >= 0 and hi < _RANGE_PER_ROW * rows + _RANGE_FLOOR else lo
        index = raw
        if base:  # in 64 bits: an Int8 column from -100 to 100 wrapped round in ``values - lo``
            index = raw.astype(np.uint64 if series.dtype == pl.UInt64 else np.int64)
            index -= index.dtype.type(base)
        present = np.zeros(hi - base + 1, dtype=bool)
        present[index] = True
        table = np.cumsum(present, dtype=np.int32) + np.int32(start - 1)
        codes = pooled_empty(rows, np.int32)
        pieces = range(0, rows, PIECE)
        # np.take casts its indices to intp "safely", which NumPy 1.x refused for uint64
        # (TypeError; NumPy 2 casts): every index is below the table's length, so its int64
        # view is the same number.
        taken = index.view(np.int64) if index.dtype == np.uint64 else index
        # "wrap": every index is in range, and "raise" would copy the output first
        spread(lambda i: np.take(table, taken[i: i + PIECE], out=codes[i: i + PIECE], mode="wrap"), pieces)
        # in the values' own type: a UInt64 id past 2**63 overflowed int64 here
        vocab = (np.flatnonzero(present).astype(index.dtype) + index.dtype.type(base)).tolist()
    else:
        distinct = np.unique(values.to_numpy())
        codes = (np.searchsorted(distinct, raw) + start).astype(np.int32)
        vocab = distinct.tolist()
    if nulls:
        codes[series.is_null().to_numpy()] = missing
    return vocab, codes
