"""A user's own table in ``gpufeed bench tabular``: the recipe benchmark on any table file.

The built-in tables (sensor, transactions) are generated; a user deciding whether the kit
pays on their data wants the same per-op comparison on their table. Given a file the kit
reads (CSV, Parquet, Feather, pickle, HDF5, JSON), this module

- plans a recipe from the column types (:func:`plan_recipe`): missing numbers filled,
  float columns (with none, the integer columns holding negatives) clipped to quantiles
  and standardised per group of the text column with the fewest values, non-negative
  integers logged, other integers min-max scaled, text categorified; other columns
  (dates, booleans, nested) are left untouched and listed;
- writes the table once as Parquet at each benchmark size (:func:`sized_file`): its rows
  repeated to reach the size, or its first rows when it is larger, so the distinct values
  of every column stay the file's.
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufeed.bench.harness import some_of
from gpufeed.datasets.cache import cache_dir

#: A group key for ``Standardize(by=)`` has at most this many distinct values, and its
#: groups hold :data:`MIN_GROUP_ROWS` rows on average (a key with more values is an id,
#: such as R's row names, not a group).
MAX_GROUPS, MIN_GROUP_ROWS = 10_000, 10


@dataclass(frozen=True)
class OwnTable:
    """A user's table file and the recipe planned for it (picklable: it travels to the
    benchmark's worker processes)."""

    #: The file's name, as the report names the table.
    name: str
    #: The file as given.
    path: str
    #: Rows and in-memory bytes (Arrow) of the file.
    rows: int
    nbytes: int
    #: ``(op class name, columns, keyword arguments)`` per op, in recipe order.
    ops: tuple[tuple[str, tuple[str, ...], tuple[tuple[str, Any], ...]], ...]
    #: Columns no op reads, each with why (dates, booleans, nested or binary values, no
    #: value at all, inf).
    untouched: tuple[tuple[str, str], ...]

    def recipe_ops(self) -> list[Any]:
        """Fresh kit ops of the planned recipe."""
        from gpufeed.gpu_transforms import tabular

        return [getattr(tabular, kind)(list(columns), **dict(kwargs)) for kind, columns, kwargs in self.ops]

    def bytes_per_row(self, backend: str) -> float:
        """Peak RSS per row of one recipe process on ``backend``, estimated from the table's
        Arrow size: the built-in tables peaked at ~2.7x it for pandas (by hand or the kit)
        and ~2.2x for polars; the margin covers object-backed text."""
        per_row = self.nbytes / max(self.rows, 1)
        return 200 + per_row * (2.6 if backend == "polars" else 3.5)

    def describe(self) -> str:
        """One Markdown line per op: which columns the planned recipe gives it (the first
        :data:`SHOWN` of them, and how many more), and the columns left untouched, a line
        per reason."""
        lines = [f"- `{kind}`{' by ' + _names([dict(kw)['by']]) if dict(kw).get('by') else ''}: "
                 f"{_names(columns, SHOWN)}" for kind, columns, kw in self.ops]
        reasons: dict[str, list[str]] = {}
        for column, why in self.untouched:
            reasons.setdefault(why, []).append(column)
        lines += [f"- untouched: {_names(columns, SHOWN)} ({why})" for why, columns in reasons.items()]
        return "\n".join(lines)

    def sized(self, rows: int) -> str:
        """How the file becomes ``rows`` rows, in words."""
        if rows == self.rows:
            return f"the file's {self.rows:,} rows"
        if rows < self.rows:
            return f"the file's first {rows:,} of {self.rows:,} rows"
        return f"the file's {self.rows:,} rows repeated to {rows:,}"


#: Column names an op's line of the report shows before "and N more".
SHOWN = 12


def _names(columns: Any, most: int | None = None) -> str:
    """Column names as Markdown code, so names with commas or spaces, or ``""``, read as one
    (the first ``most``, and how many more)."""
    names = [f"`{c}`" if c else '`""`' for c in columns]
    return some_of(names, len(names) if most is None else most)


def _arrow_table(path: str) -> Any:
    """The file read by the kit (its formats and checks), as an Arrow table: read once for
    the plan and every size (:func:`_read_once`), unless the file changed."""
    stat = os.stat(path)
    return _read_once(path, os.path.abspath(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=1)
def _read_once(path: str, where: str, size: int, mtime_ns: int) -> Any:
    """:func:`_arrow_table`'s read of ``path`` (named as given in errors), kept for the
    next call on the same unchanged file (``where``, ``size``, ``mtime_ns``): the plan,
    then each ``--rows`` size, read the whole file again."""
    import pyarrow as pa

    from gpufeed.datasets.tables import read_table
    from gpufeed.machine import installed

    if installed("polars"):
        return read_table(path, backend="polars").to_arrow()
    return pa.Table.from_pandas(read_table(path, backend="pandas"), preserve_index=False)


def plan_recipe(name: str, path: str, table: Any) -> OwnTable:
    """The benchmark recipe of an Arrow ``table`` read from ``path``, from its column types.

    Raises:
        ValueError: the table has no rows, or no number or text column for any op.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0:
        raise ValueError(f"{path}: the table has no rows to benchmark")
    floats, logs, scaled, texts, gaps = [], [], [], [], []
    untouched: list[tuple[str, str]] = []
    for field, column in zip(table.schema, table.columns, strict=True):
        kind, name_ = field.type, field.name
        if pa.types.is_dictionary(kind):  # a pandas category or polars Categorical: its values
            kind = kind.value_type
            column = column.cast(kind)  # Arrow's counting kernels take no dictionaries
        # polars keeps NaN apart from null: both are gaps
        nans = (pc.sum(pc.is_nan(column)).as_py() or 0) if pa.types.is_floating(kind) else 0
        if column.null_count + nans == len(column):
            untouched.append((name_, "no value"))
        elif pa.types.is_floating(kind) and pc.any(pc.is_inf(column)).as_py():
            untouched.append((name_, "holds inf, which the ops refuse"))
        elif pa.types.is_floating(kind):
            floats.append(name_)
            if column.null_count or nans:
                gaps.append(name_)
        elif pa.types.is_integer(kind):
            low = pc.min(column).as_py()
            (logs if low is not None and low >= 0 else scaled).append(name_)
            if column.null_count:
                gaps.append(name_)
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
            texts.append((name_, pc.count_distinct(column).as_py()))
        else:
            untouched.append((name_, f"{_kind_name(kind)}: no op of the recipe takes it"))
    # The group key: the text column with the fewest distinct values (at least two), whose
    # groups are more than a few rows each.
    most = min(MAX_GROUPS, table.num_rows // MIN_GROUP_ROWS)
    keys = sorted((n, c) for c, n in texts if 2 <= n <= most)
    texts = [c for c, _ in texts]
    by = keys[0][1] if keys else None
    ops: list[tuple[str, tuple[str, ...], tuple[tuple[str, Any], ...]]] = []
    # A table of integers only (counts, codes and signed deltas) clips and standardises its
    # signed integers, so that every op is timed.
    spread = floats or scaled
    for kind, columns, kwargs in [
        ("FillMissing", gaps, ()),
        ("Clip", spread, (("quantiles", (0.001, 0.999)),)),
        ("Log", logs, ()),
        ("Standardize", spread, (("by", by),) if by else ()),
        ("MinMax", scaled, ()),
        ("Categorify", texts, ()),
    ]:
        if columns:
            ops.append((kind, tuple(columns), kwargs))
    if not ops:
        raise ValueError(f"{path}: no number or text column for the recipe's ops "
                         f"(columns: {', '.join(table.column_names)})")
    return OwnTable(name=name, path=path, rows=table.num_rows, nbytes=table.nbytes, ops=tuple(ops),
                    untouched=tuple(untouched))


def _kind_name(kind: Any) -> str:
    """An Arrow type in a user's words (``timestamp[us, tz=UTC]``: a date/time)."""
    import pyarrow as pa

    for test, words in ((pa.types.is_boolean, "booleans"), (pa.types.is_temporal, "dates/times"),
                        (pa.types.is_decimal, "decimals"), (pa.types.is_nested, "nested values"),
                        (pa.types.is_binary, "bytes"), (pa.types.is_large_binary, "bytes")):
        if test(kind):
            return words
    return str(kind)


def own_table(path: str) -> OwnTable:
    """Read the table file at ``path`` and plan its benchmark recipe (:func:`plan_recipe`).

    Raises:
        FileNotFoundError, ValueError: as :func:`gpufeed.datasets.tables.read_table` raises
            for the file, or :func:`plan_recipe` for its columns.
    """
    table = _arrow_table(path)
    try:
        return plan_recipe(os.path.basename(os.path.normpath(path)), path, table)
    except (TypeError, ArithmeticError, NotImplementedError) as exc:  # Arrow's, on a column it cannot count
        raise ValueError(f"{path}: cannot plan a recipe for this table ({type(exc).__name__}: {exc})") from exc


def sized_file(table: OwnTable, rows: int, data_dir: str | None = None) -> str:
    """The table as a Parquet file of ``rows`` rows (written once, cached under ``data_dir``
    or the kit's cache folder; a changed source file is written again)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    stat = os.stat(table.path)
    key = hashlib.sha1(f"{os.path.abspath(table.path)}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    folder = Path(data_dir) if data_dir else cache_dir("tables", "own")
    target = folder / f"{Path(table.name).stem}-{key}-{rows}.parquet"
    if target.exists():
        return str(target)
    source = _arrow_table(table.path)
    # Views and large text become plain Arrow types every Parquet reader takes.
    source = source.cast(pa.schema([
        pa.field(f.name, pa.large_string() if pa.types.is_string_view(f.type) else f.type) for f in source.schema]))
    repeats = -(-rows // source.num_rows)
    sized = pa.concat_tables([source] * repeats).slice(0, rows)
    folder.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    pq.write_table(sized, partial, row_group_size=1_000_000)
    os.replace(partial, target)  # an interrupted write leaves no half table under the real name
    return str(target)
