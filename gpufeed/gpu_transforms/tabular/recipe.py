"""Fit/transform preprocessing recipes that run unchanged on pandas, polars, cuDF and Dask.

A :class:`Recipe` is an ordered list of ops (:mod:`.ops`, :mod:`.categorical`). ``fit``
computes each op's statistics on the training table only (one aggregation pass per op; on
Dask, partitions are reduced in parallel and combined across partitions for mean, std
(to the last bit of pandas' result), min, max and vocabularies (exactly)), ``transform`` applies them as vectorised expressions to any table, and
``to_json`` / ``from_json`` carry the fitted state to serving so both sides compute the
same features.

Reproducibility: a fitted recipe transforms the same way every time and everywhere it is
loaded. Refitting is exact on pandas; on polars (whose lazy engine adds up a
column in parallel pieces, in whatever order threads finish) and on cuDF (atomic adds on
the GPU) a refit of the same table can move a mean or std in its last bits (~1e-15 relative).

Example:
    >>> recipe = Recipe([FillMissing(["temp_07"]), Standardize(["temp_07"], by="region"),
    ...                  Categorify(["region"])])
    >>> train_ready = recipe.fit(train).transform(train)  # doctest: +SKIP
    >>> Recipe.from_json(recipe.to_json()).transform(val)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import gc
import json
import numbers
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import narwhals as nw
import numpy as np

# importing categorical registers Categorify, HashBucket and LabelEncode in OPS
from gpufeed.gpu_transforms.tabular.categorical import LabelEncode
from gpufeed.gpu_transforms.tabular.frames import (
    Frame,
    NwFrame,
    backend_of,
    dtypes_of,
    is_lazy,
    is_missing,
    nan_as_null,
    per_partition,
    polars_columns,
    require_columns,
    wrap,
    write_back,
)
from gpufeed.gpu_transforms.tabular.kernels import categories_as_numbers
from gpufeed.gpu_transforms.tabular.numpy_kernels import release_pooled
from gpufeed.gpu_transforms.tabular.ops import (
    OPS,
    Standardize,
    TableOp,
    all_missing_as_float,
    group_values,
    require_numbers,
)
from gpufeed.gpu_transforms.tabular.pandas_kernels import assign
from gpufeed.gpu_transforms.tabular.stats import decimals_as_numbers

_FORMAT_VERSION = 1


def _kinds(values: set[Any]) -> set[str]:
    """Whether ``values`` hold text, numbers (booleans among them) or other things."""
    return {"text" if isinstance(v, str) else "number" if isinstance(v, numbers.Number) else "other" for v in values}


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the duration (unless it is off already).

    Why: an op on a wide table makes many small Python objects that live on (2,000 columns:
    an expression per column, its fitted statistics as a list per group and column, 80,000
    for ``Standardize`` by a 40-value key), and each automatic collection they set off
    walked the whole heap, finding nothing to free: 130-250 ms of collections in a 450-630
    ms ``Standardize(by=)`` of the 500-row, 2,000-column table. Reference counting still
    frees everything as usual; a cycle made during the op is collected by the first
    collection after it (the op's objects are all young then). The collector is the
    process's: other threads run without it while an op runs."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@_collector_paused()
def _step(frame: NwFrame, backend: str, op: TableOp, run: Callable[[NwFrame, str], Any]) -> Any:
    """Run ``op``'s ``fit``/``transform`` (``run``) on ``frame``, with NaN in the float
    columns it reads as missing.

    NaN: pandas and Dask already treat it as missing; on cuDF and on an eager polars frame
    one read-only pass finds the columns holding NaN, and only those are rewritten
    (:func:`nan_as_null`), once for the op's fit and transform, unless the op finds NaN
    itself (``polars_finds_nan``, on polars); on a lazy polars frame ``fill_nan(None)``
    joins the op's query.

    An eager polars frame: the op sees only the columns it reads (``op.needs()``), as a
    lazy query (an op whose ``polars_eager`` is True, ``Categorify``, gets them as an eager
    frame), materialised by polars' in-memory engine; its output columns are then written
    back over the frame (:func:`write_back`), so the columns the op does not read are
    never copied or re-split. Why: ``docs/tabular.md`` (Fast paths).
    """
    columns = op.needs()
    if backend != "polars" or not is_lazy(frame):
        read = wrap(polars_columns(nw.to_native(frame), columns)) if backend == "polars" else frame
        if backend != "polars" or not op.polars_finds_nan:
            read = nan_as_null(read, columns, backend=backend)
    if backend == "pandas":
        out = run(read, backend)
        return None if out is None else _numpy_floats(out, op.columns)
    if backend == "dask":
        out = run(read, backend)
        if out is None or not _nullable_floats(out, op.columns):
            return out
        # The float dtype pandas gives (missing as NaN), partition by partition.
        return per_partition(out, lambda part, _: _numpy_floats(part, op.columns))
    if backend != "polars":
        return run(read, backend)
    if is_lazy(frame):
        floats = [c for c, t in frame.collect_schema().items() if c in columns and t.is_float()]
        return run(frame.with_columns(*[nw.col(c).fill_nan(None) for c in floats]) if floats else frame, backend)
    out = run(read if op.polars_eager else read.lazy(), backend)
    if out is None:
        return None
    if isinstance(out, nw.LazyFrame):
        out = wrap(nw.to_native(out).collect(engine="in-memory"))
    return write_back(frame, out)


def _checked(frame: NwFrame, op: TableOp, where: str, *, fitting: bool = False) -> NwFrame:
    """``frame`` checked for ``op`` (its columns present, numbers where it needs numbers),
    with the decimal columns it writes read as the numbers pandas reads
    (:func:`.stats.decimals_as_numbers`: a schema check, no pass over the data unless a
    decimal column is there), so that every op fits and gives the same on every backend."""
    require_columns(frame, op.needs(), where)
    schema = dtypes_of(frame, op.needs())
    frame, schema = _category_numbers(frame, op, schema)
    require_numbers(frame, op, where, fitting=fitting, schema=schema)
    return decimals_as_numbers(frame, op.columns, schema)


def _category_numbers(frame: NwFrame, op: TableOp, schema: dict[str, Any]) -> tuple[NwFrame, dict[str, Any]]:
    """``(frame, schema)`` with the categoricals of numbers or booleans that a numeric op
    (``FillMissing``, ``Clip``, ``Log``, ``Standardize``, ``MinMax``) writes as their values
    (:func:`.kernels.categories_as_numbers`), as the ops read Decimal objects.

    Why: the same table ran on polars and was refused on pandas ("column(s) {'c':
    'Categorical'} are not numbers"). Categoricals of text stay refused on every backend.
    """
    if op.takes == "any":
        return frame, schema
    return categories_as_numbers(frame, op.columns, schema)


def _numpy_floats(frame: NwFrame, columns: Sequence[str]) -> NwFrame:
    """``frame`` with the op's output columns of pandas' nullable ``Float64`` (or Arrow
    float64) as numpy float64 (missing as NaN), the float dtype every other pandas path gives.

    Ops on pandas' nullable integers (ids beyond 2**53 read from Parquet, CSV or JSON)
    came out as ``Float64`` through narwhals, so ``Standardize`` gave ``Float64`` on one
    column and ``float64`` on the next; ``Log`` of a table read with
    ``dtype_backend="pyarrow"`` gave ``double[pyarrow]``.
    """
    native = nw.to_native(frame)
    # Many columns: the dtypes read once (a column read per name cost ~50 us on a wide frame,
    # 0.1 s for 2,000); a few: one by one (all 2,000 dtypes cost 5 ms).
    many = 4 * len(columns) > len(native.columns) and native.columns.is_unique
    dtypes = dict(zip(native.columns, native.dtypes, strict=True)) if many else None
    nullable = [c for c in columns if _nullable_float(dtypes[c] if dtypes else native[c].dtype)]
    if not nullable:
        return frame
    return wrap(assign(native, {c: native[c].to_numpy(dtype="float64", na_value=np.nan) for c in nullable}))


def _nullable_float(dtype: Any) -> bool:
    """pandas' nullable ``Float64`` or an Arrow float64 (``double[pyarrow]``, what ``Log``
    gave on a table read with ``dtype_backend="pyarrow"``)."""
    import pandas as pd

    return isinstance(dtype, pd.Float64Dtype) or (isinstance(dtype, pd.ArrowDtype) and dtype == "double[pyarrow]")


def _nullable_floats(frame: NwFrame, columns: Sequence[str]) -> bool:
    """Whether a Dask frame's ``columns`` include pandas' nullable ``Float64`` or an Arrow
    float64 (its metadata)."""
    meta = nw.to_native(frame)._meta
    return any(_nullable_float(meta[c].dtype) for c in columns)


def _json_safe(doc: dict[str, Any]) -> bool:
    try:
        json.dumps(doc, allow_nan=False)
    except (ValueError, TypeError):
        return False
    return True


class Recipe:
    """An ordered list of ops, fitted on training data and applied anywhere.

    Args:
        ops: the ops, applied in order (each op is fitted on the output of the previous ones).

    Example:
        >>> recipe = Recipe([FillMissing(["temp_07"]), MinMax(["temp_07"])])
        >>> recipe.fit(train)  # doctest: +SKIP
        >>> recipe.save(tmp_path / "recipe.json")  # doctest: +SKIP
    """

    def __init__(self, ops: Sequence[TableOp]) -> None:
        if not ops:
            raise ValueError("a Recipe needs at least one op")
        bad = [o for o in ops if not isinstance(o, TableOp)]
        if bad:
            raise TypeError(f"Recipe ops must be TableOp instances, got {bad!r}")
        self.ops = list(ops)

    def __repr__(self) -> str:
        return f"Recipe({self.ops!r})"

    @property
    def fitted(self) -> bool:
        """True when every op holds its statistics (after :meth:`fit` or :meth:`load`)."""
        return all(op.fitted for op in self.ops)

    def fit(self, df: Frame) -> Recipe:
        """Fit every op on ``df`` (the training split only) and return ``self``.

        Raises:
            MissingColumnError, ColumnTypeError (text or dates given to a numeric op),
            EmptyTableError, NonFiniteError: naming the op and column.
        """
        self._fit(df, transform_last=False)
        return self

    def _fit(self, df: Frame, *, transform_last: bool) -> NwFrame:
        frame = wrap(df)
        backend = backend_of(frame)
        for i, op in enumerate(self.ops):
            frame = _checked(frame, op, f"recipe op {i} ({op.kind})", fitting=True)
            if transform_last or i + 1 < len(self.ops):  # the next op is fitted on this op's output
                frame = _step(frame, backend, op, op.fit_transform)
            else:
                _step(frame, backend, op, op.fit)
        release_pooled()  # the earlier ops' columns, freed into the pool
        return frame

    def transform(self, df: Frame) -> Frame:
        """Apply the fitted ops to ``df`` (any split, any backend); never drops a row.

        Returns:
            A native frame on ``df``'s backend, same rows in the same order.

        Raises:
            RuntimeError: the recipe is not fitted; MissingColumnError, ColumnTypeError and
            the ops' errors.
        """
        if not self.fitted:
            unfitted = [f"{i} ({op.kind}, columns {op.columns})" for i, op in enumerate(self.ops) if not op.fitted]
            raise RuntimeError(f"the recipe is not fitted (op(s) {', '.join(unfitted)} hold no statistics): "
                               "call fit(train) or load a fitted recipe")
        frame = wrap(df)
        backend = backend_of(frame)
        for i, op in enumerate(self.ops):
            frame = _checked(frame, op, f"recipe op {i} ({op.kind})")
            frame = all_missing_as_float(frame, op)
            frame = _step(frame, backend, op, op.transform)
        release_pooled()  # the earlier ops' columns, freed into the pool
        return nw.to_native(frame)

    def fit_transform(self, df: Frame) -> Frame:
        """Fit on ``df`` and return ``df`` transformed: what ``fit(df).transform(df)`` gives,
        in one pass (fitting already computes each op's output for the next op)."""
        return nw.to_native(self._fit(df, transform_last=True))

    def _encoder(self, column: str, method: str) -> Any:
        """The last op that encoded ``column`` (the codes a model sees), by ``method``."""
        encoders = [op for op in self.ops if hasattr(op, "num_embeddings")]
        for op in reversed(encoders):
            if column in op.columns:
                return op
        encoded = [c for op in encoders for c in op.columns]
        raise ValueError(f"Recipe.{method}: no op of the recipe encodes column {column!r} (Categorify, "
                         f"HashBucket or LabelEncode do); encoded columns: {encoded or 'none'}")

    def num_embeddings(self, column: str) -> int:
        """Rows an ``nn.Embedding`` for ``column`` needs, from the op that encoded it:
        ``Categorify`` (vocabulary + 2 reserved), ``HashBucket`` (``buckets``), ``LabelEncode``
        (its classes).

        Raises:
            ValueError: no op encodes ``column`` (named, with the encoded columns);
            RuntimeError: the op is not fitted.
        """
        return self._encoder(column, "num_embeddings").num_embeddings(column)

    def num_classes(self, column: str) -> int:
        """The classes of a target ``column`` (``to_tensors(num_classes=)``, the model's
        outputs): what :meth:`num_embeddings` gives, the range of its codes (``LabelEncode``:
        K; ``Categorify``: its vocabulary + 2, codes 0 and 1 being unseen and missing)."""
        return self._encoder(column, "num_classes").num_embeddings(column)

    def inverse(self, column: str, values: Any, *, groups: Any = None) -> Any:
        """``values`` of ``column`` as the recipe gave them (model outputs, targets) back in
        the column's own units: each op on ``column`` undone, the last first.

        ``Standardize`` and ``MinMax`` are undone exactly (to float rounding), ``Log`` by
        ``exp(x) - offset``, ``LabelEncode`` gives the classes (a list); ``FillMissing`` and
        ``Clip`` pass values through (a filled or clipped value cannot be told apart).

        Args:
            column: a column the recipe transformed.
            values: a torch tensor (kept on its device; a floating one keeps its dtype,
                computed in float64), a numpy array, a list or a number.
            groups: for ``Standardize(by=...)``: each row's group before the recipe
                (e.g. ``val["region"]``), or after the ops before it when one of them encodes
                the ``by`` column; unseen or missing groups use the global statistics.

        Raises:
            ValueError: no op transformed ``column``; ``Categorify`` or ``HashBucket`` codes
            (no number to go back to); ``Standardize(by=...)`` without ``groups``.
        """
        ops = [op for op in self.ops if column in op.columns]
        if not ops:
            raise ValueError(f"Recipe.inverse: no op of the recipe transforms column {column!r}")
        for i, op in enumerate(reversed(ops)):
            if isinstance(op, LabelEncode):
                if i:
                    raise ValueError(f"Recipe.inverse: {column!r} was changed after LabelEncode by "
                                     f"{ops[len(ops) - i].kind}; nothing to invert to")
                values = op.inverse(column, values)
            elif isinstance(op, Standardize):
                if op.by and groups is not None:
                    self._check_groups(op, groups)
                values = op.inverse(column, values, groups=groups)
            elif hasattr(op, "inverse"):
                values = op.inverse(column, values)
            elif hasattr(op, "num_embeddings"):
                raise ValueError(f"Recipe.inverse: {op.kind} codes of column {column!r} are no numbers to "
                                 "invert (categories map to codes, not back)")
            # FillMissing, Clip: values pass through
        return values

    def _check_groups(self, op: Standardize, groups: Any) -> None:
        """Refuse ``groups`` none of which the op fitted where another op of the recipe
        changes its ``by`` column, since every row would silently fall back to the global
        statistics: an op before it (``Categorify`` first: the op grouped by codes, and raw
        groups were given), or an op after it whose output was given instead of the raw
        groups (numbers given, the op grouped by text or the other way round; raw groups
        that are merely unseen, as after ``split_by_group``, pass)."""
        at = self.ops.index(op)
        before = [o for o in self.ops[:at] if op.by in o.columns]
        after = [o for o in self.ops[at + 1:] if op.by in o.columns]
        if not before and not after:
            return
        fitted = {g[0] for rows in op.state.get("groups", {}).values() for g in rows}
        given = {g for g in group_values(groups) if not is_missing(g)}
        if not fitted or not given or given & fitted:
            return
        seen = f"(e.g. {sorted(fitted, key=str)[:3]}), and none of groups= is one of them (e.g. {sorted(given, key=str)[:3]})"
        if before:
            raise ValueError(f"Recipe.inverse: Standardize(by={op.by!r}) grouped by {op.by!r} as {before[-1].kind} "
                             f"left it {seen}: pass the {op.by!r} column after the recipe")
        if _kinds(given).isdisjoint(_kinds(fitted)):
            raise ValueError(f"Recipe.inverse: Standardize(by={op.by!r}) grouped by the {op.by!r} values the recipe "
                             f"was given {seen}, which look like {after[0].kind}'s output: pass the {op.by!r} column "
                             "as it was before the recipe (e.g. val[" f"{op.by!r}] before transform)")

    def to_json(self) -> str:
        """The recipe and its fitted statistics as JSON (serving loads it with :meth:`from_json`)."""
        ops = [op.to_dict() for op in self.ops]
        try:
            # allow_nan=False: NaN is not JSON, and a serving stack's strict parser would refuse it.
            return json.dumps({"gpufeed_recipe": _FORMAT_VERSION, "ops": ops}, indent=1, allow_nan=False)
        except (ValueError, TypeError) as exc:  # name the op (the error path only serialises again)
            # TypeError: a value of a type JSON has no form for, e.g. the Timestamp groups of
            # Standardize(by=<a datetime column>).
            i, op = next((i, op) for i, (op, d) in enumerate(zip(self.ops, ops, strict=True))
                         if not _json_safe(d))
            raise ValueError(f"recipe op {i} ({op.kind}, columns {op.columns}) holds a value JSON "
                             f"cannot store: {exc}") from exc

    @classmethod
    def from_json(cls, text: str) -> Recipe:
        """Rebuild a recipe saved by :meth:`to_json`.

        Raises:
            ValueError: not a gpufeed recipe, or an unknown op.
        """
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("gpufeed_recipe") != _FORMAT_VERSION:
            raise ValueError(f"not a gpufeed recipe (version {_FORMAT_VERSION}) document")
        ops = []
        for spec in doc["ops"]:
            spec = dict(spec)
            kind = spec.pop("op")
            if kind not in OPS:
                raise ValueError(f"unknown recipe op {kind!r}; known: {sorted(OPS)}")
            ops.append(OPS[kind].from_dict(spec))
        return cls(ops)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_json` to ``path``."""
        out = Path(path)
        out.write_text(self.to_json())
        return out

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Recipe:
        """Read a recipe written by :meth:`save`.

        Raises:
            ValueError: ``path`` is not a gpufeed recipe (named in the message).
        """
        try:
            return cls.from_json(Path(path).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as err:
            raise ValueError(f"{path}: not a gpufeed recipe JSON file ({err})") from err
