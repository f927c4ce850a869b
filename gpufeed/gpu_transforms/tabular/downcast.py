"""Lossless downcast: the smallest dtype that holds every value, checked by a round trip.

Integers go to the smallest integer type holding their range; floats go to float32 only
where every value survives ``float64 -> float32 -> float64`` (or stays within an opt-in
relative tolerance); low-cardinality text becomes categorical; float16 only on request.
After casting, every changed column is cast back and compared with the original, so a
value is never changed silently. The same code runs on pandas, polars and cuDF.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import narwhals as nw
import numpy as np

from gpufeed.gpu_transforms.tabular.errors import DowncastError
from gpufeed.gpu_transforms.tabular.frames import (
    Frame,
    backend_of,
    first_row,
    is_lazy,
    is_missing,
    require_columns,
    wrap,
)

_SIGNED = ((nw.Int8, -(2**7), 2**7 - 1), (nw.Int16, -(2**15), 2**15 - 1), (nw.Int32, -(2**31), 2**31 - 1))
_UNSIGNED = ((nw.UInt8, 0, 2**8 - 1), (nw.UInt16, 0, 2**16 - 1), (nw.UInt32, 0, 2**32 - 1))
_NAMES = {
    "int8": nw.Int8, "int16": nw.Int16, "int32": nw.Int32, "int64": nw.Int64,
    "uint8": nw.UInt8, "uint16": nw.UInt16, "uint32": nw.UInt32, "uint64": nw.UInt64,
    "float16": nw.Float16, "float32": nw.Float32, "float64": nw.Float64, "category": nw.Categorical,
}
_WIDTH = {nw.Int8: 1, nw.UInt8: 1, nw.Int16: 2, nw.UInt16: 2, nw.Int32: 4, nw.UInt32: 4}


#: Changed columns a downcast report lists one by one (:meth:`DowncastReport.to_markdown`).
MARKDOWN_ROWS = 20


@dataclass
class ColumnChange:
    """One column of a :class:`DowncastReport`."""

    column: str
    before: str
    after: str
    bytes_before: int
    bytes_after: int
    note: str = ""


@dataclass
class DowncastReport:
    """Per-column dtypes and bytes before and after, and the totals."""

    columns: list[ColumnChange] = field(default_factory=list)

    @property
    def bytes_before(self) -> int:
        """Bytes of the downcast columns before."""
        return sum(c.bytes_before for c in self.columns)

    @property
    def bytes_after(self) -> int:
        return sum(c.bytes_after for c in self.columns)

    @property
    def saved_fraction(self) -> float:
        """Share of memory saved, in [0, 1]."""
        return 1.0 - self.bytes_after / self.bytes_before if self.bytes_before else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"bytes_before": self.bytes_before, "bytes_after": self.bytes_after,
                "saved_fraction": self.saved_fraction, "columns": [asdict(c) for c in self.columns]}

    def to_markdown(self) -> str:
        """A table of the changed columns and the total, for logs and benchmark summaries; past
        :data:`MARKDOWN_ROWS` changed columns, one row per change (the same types and note),
        naming a few of its columns and counting the rest (a 2,000-column table gave 2,000
        rows)."""
        changed = [c for c in self.columns if c.before != c.after]
        if len(changed) <= MARKDOWN_ROWS:
            rows = [f"| {c.column} | {c.before} | {c.after} | {c.bytes_before:,} | {c.bytes_after:,} | {c.note} |"
                    for c in changed]
        else:
            kinds: dict[tuple[str, str, str], list[Any]] = {}
            for c in changed:
                kinds.setdefault((str(c.before), str(c.after), c.note), []).append(c)
            rows = []
            for (before, after, note), group in kinds.items():
                names = ", ".join(str(c.column) for c in group[:3]) + (
                    f" and {len(group) - 3} more" if len(group) > 3 else "")
                rows.append(f"| {names} | {before} | {after} | {sum(c.bytes_before for c in group):,} "
                            f"| {sum(c.bytes_after for c in group):,} | {note} |")
        return "\n".join([
            "| column | before | after | bytes before | bytes after | note |", "|---|---|---|---|---|---|",
            *rows,
            f"| **all {len(self.columns)} columns** | | | {self.bytes_before:,} | {self.bytes_after:,} "
            f"| {100 * self.saved_fraction:.1f}% saved |",
        ])


def _column_bytes(frame: nw.DataFrame, column: str) -> int:
    """Bytes of one column's data (pandas counts its index too, so ask it without)."""
    native = nw.to_native(frame)
    if backend_of(native) in ("pandas", "cudf"):
        return int(native[column].memory_usage(index=False, deep=True))
    if native.schema[column] == _polars_string():
        return _polars_string_bytes(native[column])
    return int(frame.select(column).estimated_size("b"))


#: A polars string is a 16-byte view; text longer than this is kept in a buffer beside it.
_VIEW_BYTES, _INLINE_BYTES = 16, 12


def _polars_string() -> Any:
    import polars as pl

    return pl.String


def _polars_string_bytes(series: Any) -> int:
    """Bytes of a polars text column: a 16-byte view per value, plus the text of values
    longer than 12 bytes (shorter ones live inside their view), plus the validity bits.

    polars' ``estimated_size`` counts the text alone: 2-letter state codes came to ~2
    bytes a row instead of 16, so turning them into a categorical (4 bytes a row) was
    reported as making the table larger (airports: -6% "saved") while it cut them 4x
    (measured by the process's memory).
    """
    lengths = series.str.len_bytes()
    outside = int(lengths.filter(lengths > _INLINE_BYTES).sum() or 0)
    validity = (len(series) + 7) // 8 if series.null_count() else 0
    return _VIEW_BYTES * len(series) + outside + validity


def _smallest_int(low: int, high: int, allow_unsigned: bool) -> Any | None:
    signed = next((t for t, lo, hi in _SIGNED if lo <= low and high <= hi), None)
    unsigned = next((t for t, lo, hi in _UNSIGNED if lo <= low and high <= hi), None) if allow_unsigned else None
    best = min((t for t in (signed, unsigned) if t is not None), key=lambda t: _WIDTH[t], default=None)
    # Equal widths: keep signed, so later arithmetic (x - 1) cannot wrap around.
    return signed if best is not None and signed is not None and _WIDTH[signed] == _WIDTH[best] else best


def _same_float(new: Any, old: Any, tolerance: float) -> Any:
    """Where a float ``new`` (cast back) equals ``old`` within the relative ``tolerance``
    (expressions or series). Equal values always count: with a tolerance, an infinite
    value held exactly by the narrower type compared as ``inf - inf`` (NaN) and kept the
    column float64. NaN is left to the caller."""
    if tolerance == 0:
        return new == old
    return (new == old) | ((new - old).abs() <= tolerance * old.abs())


def _float_loss(name: str, target: Any, tolerance: float) -> nw.Expr:
    """Count of non-missing values that do not survive a cast to ``target`` and back."""
    col = nw.col(name)
    back = col.cast(target).cast(nw.Float64)
    same = _same_float(back, col, tolerance)
    both_nan = back.is_nan() & col.is_nan()
    return (~col.is_null() & ~(same | both_nan)).sum().alias(name)


def downcast(
    df: Frame, *, columns: list[str] | None = None, float_tolerance: float = 0.0,
    float16: bool = False, category_max_ratio: float = 0.5, allow_unsigned: bool = True,
    dtypes: dict[str, str] | None = None,
) -> tuple[Frame, DowncastReport]:
    """Shrink a table's dtypes without changing a single value.

    Args:
        df: a pandas, polars or cuDF frame (Dask: downcast each partition before).
        columns: columns to consider (default: all).
        float_tolerance: relative error allowed when moving floats to float32 (or float16);
            0 (the default) means exact.
        float16: also try float16 for floats (it holds integers only up to 2048 exactly).
        category_max_ratio: text columns with ``distinct / rows`` at most this become
            categorical.
        allow_unsigned: use unsigned integers when they are narrower than the signed ones.
        dtypes: force dtypes by name (``{"code_01": "int8"}``); checked the same way.

    Returns:
        ``(frame, report)``: the downcast frame on the same backend and a
        :class:`DowncastReport` with bytes before and after per column.

    Raises:
        DowncastError: a forced dtype would overflow or change values (names the column,
            how many values, and one of them); or the round-trip check failed.
        MissingColumnError: a named column is absent.

    Example:
        >>> small, report = downcast(table)  # doctest: +SKIP
        >>> print(f"{report.saved_fraction:.0%} saved")  # doctest: +SKIP
    """
    if not 0.0 <= float_tolerance < 1.0:
        raise ValueError(f"float_tolerance must be in [0, 1), got {float_tolerance}")
    if not 0.0 <= category_max_ratio <= 1.0:
        raise ValueError(f"category_max_ratio must be in [0, 1], got {category_max_ratio}")
    frame = wrap(df)
    if is_lazy(frame):
        raise DowncastError("downcast needs an eager frame; on Dask, map it over partitions "
                            "(ddf.map_partitions(lambda p: downcast(p)[0]))")
    schema = frame.collect_schema()
    names = list(columns) if columns is not None else list(schema.names())
    forced = {k: v for k, v in (dtypes or {}).items()}
    require_columns(frame, [*names, *forced], "downcast")
    unknown = {k: v for k, v in forced.items() if v not in _NAMES}
    if unknown:
        raise ValueError(f"unknown dtype(s) {unknown}; known: {sorted(_NAMES)}")
    half = [c for c, v in forced.items() if v == "float16"]
    if backend_of(df) == "cudf" and (float16 or half):
        raise ValueError(f"downcast: cuDF has no float16 columns ({'float16=True' if float16 else f'dtypes {half}'}): "
                         "use float32, or downcast on pandas or polars")

    ints = [c for c in names if schema[c].is_integer() and c not in forced]
    floats = [c for c in names if schema[c].is_float() and c not in forced]
    texts = [c for c in names if schema[c] == nw.String and c not in forced]
    targets: dict[str, Any] = {}
    notes: dict[str, str] = {}
    n_rows = len(frame)
    if n_rows:
        # A float beyond float32's range becomes inf in the trial cast (and is then counted
        # as changed): numpy's overflow warning would only alarm the user.
        with np.errstate(over="ignore", invalid="ignore"):
            stats = first_row(frame.select(
            *[nw.col(c).min().alias(f"min:{c}") for c in ints],
            *[nw.col(c).max().alias(f"max:{c}") for c in ints],
            *[_float_loss(c, nw.Float32, float_tolerance).alias(f"f32:{c}") for c in floats],
            *([_float_loss(c, nw.Float16, float_tolerance).alias(f"f16:{c}") for c in floats] if float16 else []),
            *[nw.col(c).n_unique().alias(f"nu:{c}") for c in texts],
            )) if (ints or floats or texts) else {}
        for c in ints:
            if is_missing(stats[f"min:{c}"]):
                # all missing: nothing tells us the range (polars gives None, cuDF NaN: its
                # reduction of an all-null column is NaN, and int(NaN) failed)
                continue
            t = _smallest_int(int(stats[f"min:{c}"]), int(stats[f"max:{c}"]), allow_unsigned)
            if t is not None and t != schema[c]:
                targets[c], notes[c] = t, f"range {stats[f'min:{c}']}..{stats[f'max:{c}']}"
        for c in floats:
            if float16 and stats[f"f16:{c}"] == 0 and schema[c] != nw.Float16:
                targets[c], notes[c] = nw.Float16, "every value fits float16"
            elif stats[f"f32:{c}"] == 0 and schema[c] == nw.Float64:
                targets[c], notes[c] = nw.Float32, "every value round-trips through float32"
            elif schema[c] == nw.Float64:
                notes[c] = f"kept: {stats[f'f32:{c}']} value(s) would change in float32"
        for c in texts:
            if stats[f"nu:{c}"] <= category_max_ratio * n_rows:
                targets[c], notes[c] = nw.Categorical, f"{stats[f'nu:{c}']} distinct values"
    for c, name in forced.items():
        if name == "category" and schema[c] not in (nw.String, nw.Categorical):
            raise DowncastError(f"column {c!r}: 'category' is for text columns, and this one is {schema[c]}")
        _check_forced_range(frame, c, name)
        targets[c], notes[c] = _NAMES[name], "asked for"

    cast = _cast(frame, targets)
    with np.errstate(over="ignore", invalid="ignore"):
        _check_round_trip(frame, cast, targets, schema, forced, float_tolerance)
    report = DowncastReport([
        ColumnChange(c, str(schema[c]), str(targets.get(c, schema[c])),
                     _column_bytes(frame, c), _column_bytes(cast, c),
                     notes.get(c, ""))
        for c in names
    ])
    return nw.to_native(cast), report


def _cast(frame: nw.DataFrame, targets: dict[str, Any]) -> nw.DataFrame:
    """All casts in one pass; when a backend refuses one (NaN into an integer type on
    pandas), name the column it refused."""
    if not targets:
        return frame
    try:
        return frame.with_columns(*[nw.col(c).cast(t) for c, t in targets.items()])
    except Exception:  # noqa: BLE001 - each backend raises its own types for impossible casts
        for c, t in targets.items():
            try:
                frame.select(nw.col(c).cast(t))
            except Exception as exc:  # noqa: BLE001
                missing = int(frame.get_column(c).is_null().sum())
                hint = f" ({missing} missing value(s), which {t} cannot hold)" if missing and t.is_integer() else ""
                raise DowncastError(f"cannot cast column {c!r} to {t}{hint}: {exc}") from exc
        raise


def _check_forced_range(frame: nw.DataFrame, column: str, name: str) -> None:
    """A forced integer dtype must hold the column's range (checked before any backend wraps)."""
    bounds = {t: (lo, hi) for t, lo, hi in (*_SIGNED, *_UNSIGNED)}.get(_NAMES[name])
    dtype = frame.collect_schema()[column]
    if bounds is None or not (dtype.is_integer() or dtype.is_float()):
        return
    values = nw.col(column)
    row = first_row(frame.select(values.min().alias("lo"), values.max().alias("hi"),
                                 ((values < bounds[0]) | (values > bounds[1])).sum().alias("out")))
    low, high = row["lo"], row["hi"]
    if low is not None and (low < bounds[0] or high > bounds[1]):
        raise DowncastError(
            f"column {column!r}: {int(row['out'])} value(s) outside {name}'s range {bounds[0]}..{bounds[1]} "
            f"(the column spans {low}..{high})"
        )


def _check_round_trip(before: nw.DataFrame, after: nw.DataFrame, targets: dict[str, Any],
                      schema: Any, forced: dict[str, str], tolerance: float) -> None:
    """Cast every changed column back and compare: the proof that no value moved (beyond
    the relative ``tolerance`` the caller opted into for floats)."""
    if not targets:
        return
    bad = []
    for c, t in targets.items():
        old, new = before.get_column(c), after.get_column(c)
        if t == nw.Categorical:
            new = new.cast(nw.String)
        elif schema[c].is_float() and t.is_float():
            new = new.cast(schema[c])
        if not schema[c].is_float():
            changed = new != old
        else:
            same = _same_float(new, old, tolerance)
            changed = ~(same | (new.is_nan() & old.is_nan()))
        # Overflowing casts may also turn values into nulls (polars, cuDF) or wrap (pandas).
        lost = (changed.fill_null(True) & ~old.is_null()) | (new.is_null() & ~old.is_null())
        n_lost = int(lost.sum())
        if n_lost:
            example = old.filter(lost).head(1).to_list()
            bad.append(f"column {c!r}: {n_lost} value(s) would change in {t} (e.g. {example[0]!r})")
    if bad:
        how = "" if forced else " (this is a bug in downcast; please report it)"
        raise DowncastError("downcast would change values" + how + ": " + "; ".join(bad))
