"""Categorical ops: :class:`Categorify` (a fitted vocabulary) and :class:`HashBucket` (none).

Both give int32 codes for an embedding table, with a reserved code for missing values;
categorical columns of text are compared by their text values, categoricals of numbers
(pandas, Dask) by their numbers, as polars holds them.
"""

from __future__ import annotations

import datetime
import numbers
import warnings
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn

import narwhals as nw
import numpy as np

from gpufeed.gpu_transforms.tabular.category_codes import polars_fit_codes
from gpufeed.gpu_transforms.tabular.crc32 import arrow_text_crc32, crc32_buffers
from gpufeed.gpu_transforms.tabular.errors import ColumnTypeError, UnseenCategoryError
from gpufeed.gpu_transforms.tabular.frames import (
    NwFrame,
    collect_small,
    first_value,
    is_lazy,
    is_missing,
    per_partition,
    series_values,
    several_zones,
    wrap,
)
from gpufeed.gpu_transforms.tabular.kernels import (
    category_values,
    cudf_category_values,
    cudf_string_dtype,
    pandas_category_values,
    pandas_codes,
    pandas_factorize,
    pandas_text_codes,
    text_categories,
    vocabulary_codes,
)
from gpufeed.gpu_transforms.tabular.numpy_kernels import spread
from gpufeed.gpu_transforms.tabular.ops import TableOp
from gpufeed.gpu_transforms.tabular.pandas_kernels import as_column, assign
from gpufeed.gpu_transforms.tabular.stats import (
    aggregate,
    decimal_number,
    decimal_numbers,
    json_key,
    lookup,
    sorted_keys,
)
from gpufeed.policies import OnUnseen

#: Categorify's reserved indices: unseen (or rarer than ``min_count``) values and missing values.
UNSEEN_INDEX = 0
MISSING_INDEX = 1


def _category_exprs(columns: Sequence[str], frame: NwFrame) -> dict[str, nw.Expr]:
    """Categorical columns are compared by their text values; decimal columns (polars keeps
    Parquet's decimals) by their numbers, as pandas reads them (:func:`.stats.decimal_numbers`:
    int64 for whole-number decimals whose values fit, float64 otherwise). JSON cannot store
    a Decimal, so a vocabulary of them failed on polars where pandas' ran."""
    schema = frame.collect_schema()
    numbers = decimal_numbers(frame, columns, schema)

    def expr(column: str) -> nw.Expr:
        if schema[column] == nw.Categorical:
            return nw.col(column).cast(nw.String)
        if column in numbers:
            return decimal_number(frame, column, numbers[column])
        return nw.col(column)

    return {c: expr(c) for c in columns}


def _category_values(frame: NwFrame, backend: str, columns: Sequence[str]) -> NwFrame:
    """``frame`` with its pandas categoricals of numbers, booleans or dates among ``columns``
    as their values (:func:`.kernels.pandas_category_values`), and cuDF's likewise, text
    included (:func:`.kernels.cudf_category_values`: cuDF's own cast of a categorical, which
    narwhals' ``cast(String)`` is, loses rows of a sliced frame); as it is on other backends.
    Cast to text, an integer category was ``"10.0"`` in a batch with a missing value and
    ``"10"`` in one without."""
    if backend not in ("pandas", "cudf"):
        return frame
    native = nw.to_native(frame)
    if backend == "cudf":
        values = {c: v for c in columns if (v := cudf_category_values(native[c], text=True)) is not None}
        # Categories of other types (decimals, pandas' nullable Int64): still categoricals, but
        # copied to offset 0, so that cuDF's cast to text (narwhals') reads their mask right.
        values.update({c: native[c].copy(deep=True) for c in columns
                       if c not in values and str(native[c].dtype) == "category"})
    else:
        values = {c: v for c in columns if (v := pandas_category_values(native[c])) is not None}
    return wrap(assign(native, values)) if values else frame


#: Marks the text :func:`_dask_category_values` gives a number of a categorical whose
#: categories Dask does not know, with its kind (``i``: integer, ``f``: float, ``b``: boolean,
#: ``t``: time); no text value of a column starts so. Not with NUL: pandas 2.2 hashes text as
#: C strings, cut at the first NUL, so Dask's value counts there made every marked value one
#: (integer categories 9, 10, 100 fitted as [9]).
_MARK = "\x1egpufeed-category:"


def _marked_text(value: Any) -> Any:
    """A category's value as :data:`_MARK` text (text itself stays as it is)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | np.bool_):
        return f"{_MARK}b:{bool(value)}"
    if isinstance(value, numbers.Integral):
        return f"{_MARK}i:{int(value)}"
    if isinstance(value, numbers.Real):
        return f"{_MARK}f:{float(value)!r}"
    if isinstance(value, datetime.timedelta):  # pandas' Timedelta (a categorical of durations)
        return f"{_MARK}d:{value.isoformat()}"
    return f"{_MARK}t:{value.isoformat()}"  # pandas' Timestamp (a categorical of dates)


def _unmarked(value: Any) -> Any:
    """The value a :func:`_marked_text` stands for."""
    if not isinstance(value, str) or not value.startswith(_MARK):
        return value
    kind, text = value[len(_MARK)], value[len(_MARK) + 2:]
    if kind in "td":
        import pandas as pd

        return pd.Timestamp(text) if kind == "t" else pd.Timedelta(text)
    return {"b": lambda t: t == "True", "i": int, "f": float}[kind](text)


def _dask_category_values(frame: NwFrame, backend: str, columns: Sequence[str], *,
                          plain: Sequence[str] = ()) -> tuple[NwFrame, dict[str, str]]:
    """``(frame, converted)``: a Dask frame with its categoricals of numbers, booleans or dates
    among ``columns`` compared by their values, as pandas and polars compare them, lazily;
    ``converted``: those columns, each ``"values"`` or ``"marked"``. Other backends, and
    categoricals of text Dask knows as such: as they are.

    Known categories of numbers, booleans or dates: cast to their type (nullable integers
    and booleans, so that every partition has one dtype): ``"values"``. Unknown categories
    (``read_parquet`` does not read them): each partition's values as text, those of a
    partition whose categories are numbers, booleans or dates marked with their kind
    (:func:`_marked_text`, which :func:`_unmarked` reads back), so the fitted vocabulary holds
    the numbers, sorted as numbers, with no pass over the data beyond the fit's own:
    ``"marked"``. ``plain``: columns whose numbers are to be plain text (``"10"``), to meet
    a vocabulary of their text (a recipe fitted on pandas before they were numbers).

    Why: cast to text, a partition with a missing value gave ``"10.0"`` and one without
    ``"10"``, and the vocabulary sorted ``"10" < "100" < "9"``, where pandas and polars
    fit ``[9, 10, 100]``.
    """
    if backend != "dask":
        return frame, {}
    import pandas as pd

    native = nw.to_native(frame)
    casts, unknown = {}, []
    for c in dict.fromkeys(columns):
        dtype = native.dtypes[c]
        if not isinstance(dtype, pd.CategoricalDtype):
            continue
        if not native[c].cat.known:
            unknown.append(c)
        elif not text_categories(dtype):
            casts[c] = pandas_category_values(native._meta[c], nullable=True).dtype
    if casts:
        native = native.astype(casts)
    if unknown:
        plain = set(plain)

        def texts(part: Any) -> Any:
            out = part.copy(deep=False)
            for c in unknown:
                column = part[c]
                if not isinstance(column.dtype, pd.CategoricalDtype) or text_categories(column.dtype):
                    out[c] = column.astype("string")
                    continue
                # Each category's text once (not each row's), picked by the codes; -1 (missing): None.
                text = str if c in plain else _marked_text
                labels = np.array([*(text(v) for v in column.cat.categories.astype(object)), None], dtype=object)
                out[c] = pd.Series(labels[column.cat.codes.to_numpy()], index=column.index, dtype="string")
            return out

        meta = native._meta.copy()
        for c in unknown:
            meta[c] = meta[c].astype("string")
        native = native.map_partitions(texts, meta=meta)
    if not casts and not unknown:
        return frame, {}
    return wrap(native), {**dict.fromkeys(casts, "values"), **dict.fromkeys(unknown, "marked")}


def _vocabulary(values: Any, column: str) -> list[Any]:
    """The sorted vocabulary of ``column``'s distinct ``values``.

    Raises:
        ColumnTypeError: values JSON cannot hold, or a mix of text and numbers (an object
            column from a spreadsheet), which has no order: named, with the cast to text.
    """
    return sorted_keys([json_key(v, column, "Categorify") for v in values], column, "Categorify")


def _name_unhashable(frame: NwFrame, columns: Sequence[str], exc: TypeError) -> NoReturn:
    """Raise ``exc`` again as :func:`.stats.json_key`'s error naming the column whose first value
    is no category (a list, a dict, an array: nested Parquet columns on pandas, where
    hashing them failed as "unhashable type: 'numpy.ndarray'"); else ``exc`` itself."""
    for c in columns:
        first = first_value(frame, c)
        if len(first):
            try:
                json_key(first.item(0), c, "Categorify")
            except TypeError as named:
                raise named from exc
    raise exc


def _missing(values: np.ndarray) -> np.ndarray:
    """Which of ``values`` (a column's numpy values: objects, floats, datetimes) are missing."""
    import pandas as pd

    return np.asarray(pd.isna(values), dtype=bool)


def _examples(frame: NwFrame, where: nw.Expr, expr: nw.Expr, column: str) -> list[Any]:
    """Up to three distinct values of ``column`` (as compared: ``expr``) on the rows ``where``
    holds, the smallest first (the first three rows named one new class three times)."""
    picked = frame.filter(where).select(expr.alias(column)).unique().sort(column)
    return [_unmarked(v) for v in series_values(collect_small(picked).get_column(column).head(3))]


#: From this many rows :class:`Categorify` fits a pandas frame's columns on several threads.
_THREADED_ROWS = 1 << 15

#: Rows, spread over a transformed table, that :class:`Categorify` looks at for a column
#: whose values all miss the vocabulary, and how many known (not missing) values it needs.
DRIFT_ROWS, DRIFT_MIN_VALUES = 4096, 20


@dataclass
class Categorify(TableOp):
    """Map each category to a dense integer index fitted on the training table.

    Index :data:`UNSEEN_INDEX` (0) is reserved for categories not in the vocabulary (unseen
    at fit time, or seen fewer than ``min_count`` times) and :data:`MISSING_INDEX` (1) for
    missing values; known categories get 2, 3, ... in sorted order, so the embedding table
    needs ``len(vocabulary) + 2`` rows. ``on_unseen="raise"`` raises
    :class:`UnseenCategoryError` instead of mapping to 0.

    With ``on_unseen="index"`` and ``min_count=1``, a transform warns (``UserWarning``, once
    per column) when every value of a column in :data:`DRIFT_ROWS` rows spread over the
    table (at least :data:`DRIFT_MIN_VALUES` of them not missing) is unseen: the column no
    longer matches its vocabulary (IDs recoded since the fit), and mapping all of it to 0
    would pass silently. Lazy frames (Dask, polars inside a lazy recipe) are not looked at.
    """

    min_count: int = 1
    on_unseen: str = OnUnseen.INDEX
    kind: ClassVar[str] = "categorify"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.on_unseen = OnUnseen.parse(self.on_unseen, "on_unseen")
        if self.min_count < 1:
            raise ValueError(f"Categorify: min_count must be >= 1, got {self.min_count}")
        self._warned: set[str] = set()  # columns whose drift was named (not a field: not saved)

    def fit(self, frame: NwFrame, backend: str) -> None:
        frame, converted = _dask_category_values(frame, backend, self.columns)
        if backend == "cudf":  # pandas' factorisation reads a categorical's values itself
            frame = _category_values(frame, backend, self.columns)
        exprs = _category_exprs(self.columns, frame)
        try:
            values = category_values(frame, backend, exprs, self.min_count)
        except TypeError as exc:  # unhashable values: pandas' words name no column
            _name_unhashable(frame, self.columns, exc)
        for c in (c for c, how in converted.items() if how == "marked"):
            values[c] = [_unmarked(v) for v in values[c]]
        self.state = {c: _vocabulary(values[c], c) for c in self.columns}

    polars_eager: ClassVar[bool] = True  # polars_fit_codes needs an eager frame

    def fit_transform(self, frame: NwFrame, backend: str) -> NwFrame:
        """On pandas, one factorisation per column serves both the fit and the codes; on an
        eager polars frame, one pass per text or integer column (:func:`polars_fit_codes`)."""
        if self.on_unseen is OnUnseen.RAISE:
            return super().fit_transform(frame, backend)
        if backend == "polars" and self.min_count == 1 and not is_lazy(frame):
            fitted = polars_fit_codes(frame, self.columns, MISSING_INDEX)
            if fitted is not None:
                vocabularies, out = fitted
                self.state = vocabularies  # text or integers only: JSON keys already
                return out
        if backend != "pandas":
            # transform's codes without its check for a column whose values are all unseen
            # (a sample of each column to the host on cuDF): it runs with min_count 1 only,
            # and then, fitted on these rows, every value is known; pandas and polars skip it
            # here too.
            self.fit(frame, backend)
            return self._codes(frame, backend, UNSEEN_INDEX, MISSING_INDEX, 2)[0]
        native = nw.to_native(frame)

        def fit_codes(c: str) -> tuple[list[Any], np.ndarray]:
            if self.min_count == 1 and (texts := pandas_text_codes(native[c], MISSING_INDEX)) is not None:
                return texts
            # Every distinct value is seen at least once: counting only matters above 1.
            try:
                found, uniques, counts = pandas_factorize(native[c], counts=self.min_count > 1)
            except TypeError as exc:
                _name_unhashable(frame, [c], exc)
            kept = uniques if counts is None else uniques[counts >= self.min_count]
            vocabulary = _vocabulary(kept.tolist(), c)
            return vocabulary, pandas_codes(found, uniques, vocabulary, UNSEEN_INDEX, MISSING_INDEX)

        # A column per thread: pandas' Arrow-backed text factorises in Arrow, which releases
        # the GIL (the transactions table's 4 text columns, 1M rows: 48 -> 28 ms on 2 cores).
        # Short columns on this thread: the threads' hand-over and their steps that hold the
        # GIL cost more than they save (4 columns, 2 cores: 20,000 rows 9.8 ms on one
        # thread against 12.2 on two; 50,000 rows 15.2 against 14.3).
        threads = 1 if len(native) < _THREADED_ROWS else None
        fitted = dict(zip(self.columns, spread(fit_codes, self.columns, threads), strict=True))
        self.state = {c: vocabulary for c, (vocabulary, _) in fitted.items()}
        return wrap(assign(native, {c: as_column(native, codes) for c, (_, codes) in fitted.items()}))

    def num_embeddings(self, column: str) -> int:
        """Rows an embedding table for ``column`` needs (vocabulary + the two reserved indices).

        Raises:
            KeyError: ``column`` is not one of the op's columns; RuntimeError: not fitted.
        """
        return len(self._vocabulary_of(column)) + 2

    def _vocabulary_of(self, column: str) -> list[Any]:
        if column not in self.columns:
            raise KeyError(f"{type(self).__name__}: column {column!r} is not one of its columns {self.columns}")
        if column not in self.state:
            raise RuntimeError(f"{type(self).__name__}: not fitted (column {column!r} has no vocabulary yet): "
                               "fit the recipe first")
        return self.state[column]

    def _codes(self, frame: NwFrame, backend: str, unseen: int, missing: int, start: int,
               names: dict[str, str] | None = None) -> tuple[NwFrame, dict[str, nw.Expr]]:
        """``(frame with the codes, the columns as compared)``: ``start + i`` for the
        vocabulary's ``i``-th value, ``missing`` and ``unseen`` (:func:`.kernels.vocabulary_codes`),
        written over each column or into ``names[column]``."""
        if backend == "dask":
            # Each partition coded on its own backend's path (pandas: one factorisation, only
            # the distinct values looked up): narwhals' lookup on a Dask frame of text went
            # row by row (1M rows, 1,000 distinct strings, 4 partitions: 13.4 s; pandas 0.02 s).
            coded = per_partition(frame, lambda part, on: self._codes(part, on, unseen, missing, start, names)[0])
            # As compared, for the unseen examples: a categorical by its values (numbers stay numbers).
            schema = frame.collect_schema()
            return coded, {c: nw.col(c) if schema[c] == nw.Categorical else e
                           for c, e in _category_exprs(self.columns, frame).items()}
        vocabularies = {c: self.state[c] for c in self.columns}
        # A vocabulary of text (fitted on pandas before categoricals of numbers were numbers)
        # meets such a column by its plain text.
        texts = [c for c in self.columns if vocabularies[c] and all(isinstance(v, str) for v in vocabularies[c])]
        frame, converted = _dask_category_values(frame, backend, self.columns, plain=texts)
        if backend == "cudf":
            schema = frame.collect_schema()
            frame = _category_values(frame, backend, self.columns)
            # a categorical of numbers with a vocabulary of text: its values compared as text
            converted = {c: "values" for c in texts if schema[c] == nw.Categorical}
        exprs = _category_exprs(self.columns, frame)
        for c, how in converted.items():
            if c in texts:
                exprs[c] = exprs[c].cast(nw.String)
            elif how == "marked":
                vocabularies[c] = [_marked_text(v) for v in vocabularies[c]]
        return vocabulary_codes(frame, backend, exprs, vocabularies, unseen, missing, start=start,
                                names=names), exprs

    def transform(self, frame: NwFrame, backend: str) -> NwFrame:
        if self.on_unseen is not OnUnseen.RAISE:
            coded = self._codes(frame, backend, UNSEEN_INDEX, MISSING_INDEX, 2)[0]
            if self.min_count == 1 and not is_lazy(coded):
                self._warn_all_unseen(frame, coded)
            return coded
        # Unseen is what the lookup maps to UNSEEN_INDEX (one definition, so a value matched
        # by text across backends is not refused here): codes beside the values, for examples.
        names = {c: f"__gpufeed_code_{c}" for c in self.columns}
        coded, exprs = self._codes(frame, backend, UNSEEN_INDEX, MISSING_INDEX, 2, names=names)
        counts = aggregate(coded, [(nw.col(names[c]) == UNSEEN_INDEX).sum().alias(c) for c in self.columns])
        for c, n in counts.items():
            if n:
                examples = _examples(coded, nw.col(names[c]) == UNSEEN_INDEX, exprs[c], c)
                raise UnseenCategoryError(
                    f"Categorify: column {c!r} has {int(n)} value(s) not seen at fit time, e.g. {examples}; "
                    f"use on_unseen='index' to map them to index {UNSEEN_INDEX}"
                )
        return coded.with_columns(*[nw.col(names[c]).alias(c) for c in self.columns]).drop(*names.values())

    def _warn_all_unseen(self, frame: NwFrame, coded: NwFrame) -> None:
        """Warn, once per column, for a column whose values are all unseen in rows spread
        over the table (see the class)."""
        todo = [c for c in self.columns if c not in self._warned and self.state.get(c)]
        if not todo:
            return
        # Rows spread over the table, not its head: a table sorted with new IDs first had
        # all-unseen first rows while half its rows were known.
        step = max(1, len(coded) // DRIFT_ROWS)

        def spread_out(series: nw.Series) -> np.ndarray:  # only those rows leave the device (cuDF)
            return np.asarray((series.gather_every(step) if step > 1 else series).head(DRIFT_ROWS).to_numpy())

        for c in todo:
            codes = spread_out(coded[c])
            known = int(np.count_nonzero(codes != MISSING_INDEX))
            if known < DRIFT_MIN_VALUES or np.count_nonzero(codes == UNSEEN_INDEX) != known:
                continue
            self._warned.add(c)
            given = spread_out(frame[c])
            now = [_unmarked(v) for v in given[~_missing(given)][:3].tolist()]
            fitted = self.state[c][:3]
            warnings.warn(
                f"Categorify: all {known} values of column {c!r} looked at ({len(codes)} rows spread over the "
                f"table) are unseen at fit time (index {UNSEEN_INDEX}): fitted on e.g. {fitted!r} "
                f"({type(fitted[0]).__name__}), given e.g. {now!r}; does the column still hold what it was "
                "fitted on? (warned once per column)", UserWarning, stacklevel=5)

    def params(self) -> dict[str, Any]:
        return {"min_count": self.min_count, "on_unseen": self.on_unseen.value}

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> Categorify:
        """As :meth:`TableOp.from_dict`; recipes saved before ``on_unseen="raise"`` stored it
        as ``"error"``, read as ``"raise"``."""
        if spec.get("on_unseen") == "error":
            spec = {**spec, "on_unseen": OnUnseen.RAISE.value}
        return super().from_dict(spec)


@dataclass
class LabelEncode(TableOp):
    """Encode a target's classes as 0 .. K-1 (sorted, as scikit-learn's ``LabelEncoder``):
    class indices for ``cross_entropy``, with no reserved code.

    :class:`Categorify` reserves 0 (unseen) and 1 (missing) for features, so a text target
    through it gets classes 2, 3, ...: two outputs of the model never train. A target has
    no unseen or missing class: a value not seen at fit time, or a missing one, is an
    :class:`UnseenCategoryError` naming the column, how many rows and a few of the values,
    when transforming (drop those rows first). Fitted like ``Categorify`` (the same
    vocabulary on every backend); saved in the recipe's JSON as ``"label_encode"``.

    Example:
        >>> recipe = Recipe([Standardize(["x"]), LabelEncode(["species"])])  # doctest: +SKIP
        >>> recipe.num_classes("species"), recipe.inverse("species", [0, 2])  # doctest: +SKIP
        (3, ['adelie', 'gentoo'])
    """

    kind: ClassVar[str] = "label_encode"
    polars_eager: ClassVar[bool] = True  # as Categorify, whose codes it uses

    def _vocabularies(self) -> Categorify:
        return Categorify(self.columns, state=self.state)

    def fit(self, frame: NwFrame, backend: str) -> None:
        fitted = Categorify(self.columns)
        try:
            fitted.fit(frame, backend)
        except ColumnTypeError as exc:  # the user wrote LabelEncode: the message names it
            if not str(exc).startswith("Categorify:"):
                raise
            raise type(exc)("LabelEncode:" + str(exc).removeprefix("Categorify:")) from exc
        self.state = fitted.state

    def transform(self, frame: NwFrame, backend: str) -> NwFrame:
        names = {c: f"__gpufeed_code_{c}" for c in self.columns}
        coded, exprs = self._vocabularies()._codes(frame, backend, -1, -2, 0, names=names)
        counts = aggregate(coded, [*[(nw.col(names[c]) == -1).sum().alias(f"u:{c}") for c in self.columns],
                                   *[(nw.col(names[c]) == -2).sum().alias(f"m:{c}") for c in self.columns]])
        for c in self.columns:
            unseen, missing = int(counts[f"u:{c}"]), int(counts[f"m:{c}"])
            if unseen or missing:
                told = []
                if unseen:
                    told.append(f"{unseen} value(s) not seen at fit time, e.g. "
                                f"{_examples(coded, nw.col(names[c]) == -1, exprs[c], c)}")
                if missing:
                    told.append(f"{missing} missing value(s)")
                raise UnseenCategoryError(
                    f"LabelEncode: target column {c!r} has {' and '.join(told)}; a class index is one of the "
                    f"{len(self.state[c])} classes fitted ({self.state[c][:5]}{' ...' if len(self.state[c]) > 5 else ''}): "
                    "drop those rows first (or fit on a table holding those classes)")
        return coded.with_columns(*[nw.col(names[c]).alias(c) for c in self.columns]).drop(*names.values())

    def num_classes(self, column: str) -> int:
        """The number of classes of ``column`` (``num_classes=`` of ``to_tensors``, the model's outputs)."""
        return len(self._vocabularies()._vocabulary_of(column))

    num_embeddings = num_classes  # codes 0 .. K-1: K rows, where the column is embedded

    def classes(self, column: str) -> list[Any]:
        """The classes of ``column`` in code order: ``classes(column)[k]`` is code ``k``."""
        return list(self._vocabularies()._vocabulary_of(column))

    def inverse(self, column: str, values: Any) -> list[Any]:
        """The classes of codes ``values`` (a tensor, an array, a list of integers): predictions
        back as the target's values.

        Raises:
            ValueError: a code outside 0 .. K-1.
        """
        classes = self.classes(column)
        codes = values.tolist() if hasattr(values, "tolist") else list(values)
        codes = codes if isinstance(codes, list) else [codes]
        bad = [k for k in codes if not (isinstance(k, numbers.Integral) and 0 <= k < len(classes))]
        if bad:
            raise ValueError(f"LabelEncode.inverse({column!r}): codes {bad[:5]} are not class indices 0 .. "
                             f"{len(classes) - 1}")
        return [classes[k] for k in codes]


def stable_hash(value: Any, buckets: int, text: str = "canonical") -> int:
    """The bucket of ``value`` in ``1 .. buckets-1`` (CRC32 of its text; 0 is for missing).
    ``text``: a name of :data:`HASH_TEXTS`; ``"canonical"`` is the latest canonical text.

    CRC32 of the text is the same on every machine, process and backend, unlike Python's
    salted ``hash`` or each library's own hash function. The text is canonical, so one
    value hashes alike whatever type a backend gave it: a whole float as its integer
    (pandas reads an integer column with missing values as floats, polars keeps integers),
    a datetime at midnight without a zone as its date (pandas has no date type).

    Example:
        >>> stable_hash("north", 1000)
        964
        >>> stable_hash(130.0, 1000) == stable_hash(130, 1000)
        True
    """
    return 1 + zlib.crc32(HASH_TEXTS[HASH_TEXT_ALIASES.get(text, text)](value).encode()) % (buckets - 1)


def _hash_text(value: Any) -> str:
    """The text :func:`stable_hash` hashes (see there): ``"canonical-v2"``."""
    if isinstance(value, datetime.timedelta):  # pandas' Timedelta is one too
        return _duration_text(value)
    return _hash_text_v1(value)


def _hash_text_v1(value: Any) -> str:
    """``"canonical-v1"``: the canonical text as recipes saved before the canonical text had
    versions hashed it (they stored ``"text": "canonical"``). It differs from ``"canonical-v2"`` for durations
    only, which it hashes as ``str(value)``: ``"0 days 00:00:01.500000"`` for pandas'
    ``Timedelta``, ``"0:00:01.500000"`` for the ``datetime.timedelta`` polars hands out."""
    if isinstance(value, bool | np.bool_ | str):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        value = float(value)
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, datetime.datetime):
        midnight = value.tzinfo is None and value.time() == datetime.time() and not getattr(value, "nanosecond", 0)
        return value.date().isoformat() if midnight else value.isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()
    return str(value)


def _duration_text(value: datetime.timedelta) -> str:
    """A duration as ISO 8601 seconds (``PT1.5S``, ``-PT90S``, ``P0D``), the text
    ``write_table`` gives durations in CSV and JSON, exact to the nanosecond.

    Why: ``str`` of a duration is ``"0 days 00:00:01.500000"`` for pandas' ``Timedelta`` and
    ``"0:00:01.500000"`` for the ``datetime.timedelta`` polars hands out, so one duration
    hashed into other buckets on each backend.
    """
    ticks = getattr(value, "value", None)  # pandas' Timedelta: nanoseconds
    if not isinstance(ticks, int):
        ticks = ((value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds) * 1_000
    if ticks == 0:
        return "P0D"
    seconds, nanos = divmod(abs(ticks), 1_000_000_000)
    digits = f"{seconds}.{nanos:09d}".rstrip("0").rstrip(".")
    return f"{'-' if ticks < 0 else ''}PT{digits}S"


def _nanosecond_times(frame: NwFrame, backend: str, column: str, expr: nw.Expr, dtype: Any) -> Any:
    """``(key expression, distinct keys, their values)`` of a polars nanosecond datetime or
    duration column, keyed by its integer nanoseconds; None for any other column.

    polars hands such values out as Python ``datetime``/``timedelta``, which stop at the
    microsecond: two values 1 ns apart came out as one, and the lookup of the distinct
    values failed ("`old` input for `replace` must not contain duplicates"). pandas'
    ``Timestamp``/``Timedelta`` hold them, and hash as pandas hashes the same values.
    """
    if backend != "polars" or dtype not in (nw.Datetime, nw.Duration) or dtype.time_unit != "ns":
        return None
    import pandas as pd

    key = expr.dt.timestamp("ns") if dtype == nw.Datetime else expr.dt.total_nanoseconds()
    ticks = [v for v in collect_small(frame.select(key.alias(column)).unique()).get_column(column).to_list()
             if v is not None]
    if dtype == nw.Datetime:
        values = [pd.Timestamp(t, unit="ns", tz=dtype.time_zone) for t in ticks]
    else:  # whole microseconds as the timedelta polars handed out before (its str differs)
        values = [datetime.timedelta(microseconds=t // 1000) if t % 1000 == 0 else pd.Timedelta(t, unit="ns")
                  for t in ticks]
    return key, ticks, values


def _in_utc(frame: NwFrame, column: str, distinct: list[Any]) -> list[Any]:
    """``distinct`` (the values of a pandas object ``column``) in UTC where the column holds
    aware datetimes in several zones (:func:`.frames.several_zones`), as ``to_backend``
    gives such a column to polars and cuDF; ``distinct`` itself otherwise (a look at the
    distinct values; a pass over the column only where they are all aware datetimes).

    Why: pandas hashed each instant in the zone of whichever of its values came first
    (equal instants are one distinct value), polars in the zone of the column's first value.
    """
    if not distinct or not all(isinstance(v, datetime.datetime) and v.tzinfo is not None for v in distinct):
        return distinct
    if not several_zones(nw.to_native(frame)[column]):
        return distinct
    import pandas as pd

    return [pd.Timestamp(v).tz_convert("UTC") for v in distinct]


#: The texts :class:`HashBucket` can hash, by name. A text, once named here, never changes
#: (a saved recipe names its text, and a model was trained on its buckets); a change to the
#: canonical text is a new version. ``"canonical-v2"`` (the latest, see :func:`stable_hash`;
#: durations as ISO 8601 seconds, ``PT1.5S``, alike on every backend), ``"canonical-v1"``
#: (durations as ``str(value)``, which differs between backends; what recipes saved as
#: ``"canonical"`` hashed) and ``"str"`` (Python's ``str(value)``, what recipes saved before
#: the canonical text hashed).
HASH_TEXTS: dict[str, Callable[[Any], str]] = {"canonical-v2": _hash_text, "canonical-v1": _hash_text_v1, "str": str}
#: Names a user may pass for a text: ``"canonical"`` is the latest canonical text. A saved
#: recipe always names the version (:meth:`HashBucket.to_dict`).
HASH_TEXT_ALIASES = {"canonical": "canonical-v2"}


#: Column types whose values are collections, not categories.
_NESTED = (nw.List, nw.Array, nw.Struct)
#: The Python values such columns hand out on pandas (object columns).
_NESTED_VALUES = (list, tuple, dict, set, np.ndarray)


def _refuse_nested(column: str, held: str) -> NoReturn:
    """The :class:`ColumnTypeError` for a column of lists (or structs) given to ``HashBucket``:
    pandas failed in numpy's words ("truth value ... is ambiguous") where polars hashed each
    list's text, which differs between the backends."""
    raise ColumnTypeError(
        f"HashBucket: column {column!r} holds lists or structs ({held}), which are not categories: "
        "explode the column to hash its elements, or join each list into one text first")


#: The texts whose canonical text of a string is the string itself and of an integer its
#: decimal digits (``str(int(value))``, ``-`` for negatives): :func:`_bucket_column` computes
#: their buckets vectorised. A new text version joins only if that stays true for it.
_VECTORISED_TEXTS = frozenset({"canonical-v2", "canonical-v1", "str"})


def _arrow_text(series: Any, backend: str) -> Any:
    """The canonical text of a polars or pandas Series as an Arrow string array (chunked or not),
    missing values null, where that text is provably what :data:`HASH_TEXTS` give its values
    one by one: strings as they are (UTF-8) and integers as decimal text (Arrow's cast); None
    for any other column (floats, booleans, times, mixed objects: the distinct values path).

    Strings: polars ``String``, ``Categorical``, ``Enum``; pandas' ``str``/``string`` dtypes,
    ``ArrowDtype`` strings and object columns whose values are all ``str`` (``infer_dtype``).
    Integers: 8 to 64 bits, signed or not, numpy, nullable or ``ArrowDtype`` (a pandas
    categorical of integers is one by then, :func:`_category_values`). Not booleans, whose
    text is ``"True"``, nor polars' Int128.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if backend == "polars":
        import polars as pl

        dtype = series.dtype
        if dtype in (pl.Categorical, pl.Enum):
            series, dtype = series.cast(pl.String), pl.String
        if dtype != pl.String and not (dtype.is_integer() and dtype not in (pl.Int128, pl.UInt128)):
            return None
        array = pa.chunked_array([chunk.to_arrow() for chunk in series.get_chunks()],
                                 type=None if len(series) else series.to_arrow().type)
    elif backend == "pandas":
        import pandas as pd

        dtype = series.dtype
        if isinstance(dtype, np.dtype):
            if dtype.kind in "iu":
                array = pa.array(series.to_numpy())
            elif dtype.kind == "O" and pd.api.types.infer_dtype(series, skipna=True) == "string":
                try:  # text that is no valid UTF-8 (a lone surrogate): the distinct values path says so
                    array = pa.array(series, type=pa.large_string(), from_pandas=True)
                except (pa.ArrowException, UnicodeError):
                    return None
            else:
                return None
        elif isinstance(dtype, pd.StringDtype | pd.ArrowDtype) or isinstance(series.array, pd.arrays.IntegerArray):
            array = pa.array(series, from_pandas=True)
        else:
            return None
    else:
        return None
    kind = array.type
    if pa.types.is_integer(kind):
        return pc.cast(array, pa.large_string())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return array
    return None


def _arrow_buckets(text: Any, buckets: int) -> np.ndarray:
    """:func:`stable_hash` of each value of an Arrow string array, int32, 0 where missing."""
    import pyarrow as pa

    crcs = arrow_text_crc32(text)
    out = (crcs % np.uint32(buckets - 1) + np.uint32(1)).view(np.int32)
    if text.null_count:
        chunks = text.chunks if isinstance(text, pa.ChunkedArray) else [text]
        out[np.concatenate([c.is_null().to_numpy(zero_copy_only=False) for c in chunks])] = 0
    return out


def _bucket_column(frame: NwFrame, backend: str, column: str, expr: nw.Expr, op: HashBucket) -> Any:
    """``column``'s buckets computed vectorised (:mod:`.crc32`), as a native Series (a
    polars expression on a lazy polars frame, which then has ``expr`` written as ``column``)
    to put in the frame; None where the column takes the distinct values path.

    Why: the distinct values path hashes each distinct value in Python, and high-cardinality
    ids have as many of them as rows. Measured on the kit's transactions table at 1M rows
    (``Recipe([HashBucket([c], buckets=1 << 20)]).fit_transform``, same process, alternating,
    min of 5; 2 CPU cores), before -> after, beside the backends' own (unstable) hashes:

    - ``transaction_id`` (1M distinct int64): polars 1216 -> 42 ms (``Series.hash()`` 0.8 ms),
      pandas 1118 -> 45 ms (``pd.util.hash_pandas_object`` 2.2 ms);
    - ``customer_id`` (632k distinct 8-byte strings): polars 821 -> 26 ms (1.1 ms), pandas
      1161 -> 18 ms (``hash_pandas_object`` 222 ms).

    cuDF: the same kernel in cupy over the column's own device buffers (:func:`_cudf_buckets`):
    text columns as they are, integers cast to text on the GPU, categoricals of text by their
    values; nothing goes to the host but a few scalars and the few longest texts left to zlib. Written against cuDF's sources and
    checked there by reading only: it has not run on a GPU (none here), and neither have its
    tests, which compare it with polars value for value.
    """
    if op.text not in _VECTORISED_TEXTS or op.buckets > 2**31 or backend not in ("polars", "pandas", "cudf"):
        return None
    if backend == "cudf":
        return _cudf_buckets(nw.to_native(frame), nw.to_native(frame.select(expr.alias(column)).get_column(column)),
                             op.buckets)
    if is_lazy(frame):  # polars: the same kernel on each batch of the query
        import polars as pl

        dtype = frame.select(expr.alias(column)).collect_schema()[column]
        if not (dtype in (nw.String, nw.Categorical, nw.Enum)
                or (dtype.is_integer() and dtype not in (nw.Int128, nw.UInt128))):
            return None

        def batch(series: Any) -> Any:
            return pl.Series(series.name, _arrow_buckets(_arrow_text(series, backend), op.buckets))

        return pl.col(column).map_batches(batch, return_dtype=pl.Int32, is_elementwise=True)
    series = nw.to_native(frame.select(expr.alias(column)).get_column(column))
    text = _arrow_text(series, backend)
    if text is None:
        return None
    values = _arrow_buckets(text, op.buckets)
    if backend == "polars":
        import polars as pl

        return pl.Series(column, values)
    return as_column(nw.to_native(frame), values)


def _cudf_text(series: Any) -> Any:
    """The canonical text of a cuDF Series as a cuDF Series of strings on the GPU, missing
    values null, where that text is provably what :data:`HASH_TEXTS` give its values one by
    one (the cuDF twin of :func:`_arrow_text`); None for any other column.

    Strings as they are (categoricals are their values by now, text included:
    :func:`_category_values`); integers, 8 to 64 bits, signed or not,
    by cuDF's cast to text (``astype("str")``: libcudf's ``strings::from_integers``, whose
    ``integer_to_string`` writes the decimal digits and a ``-`` for negatives, the minimum and
    uint64 past 2**63 included: ``cpp/include/cudf/strings/detail/convert/int_to_string.cuh``),
    which is ``str(int(value))``. Not booleans (dtype kind ``b``; their text is ``"True"``).
    """
    dtype = series.dtype
    if cudf_string_dtype(dtype):
        return series
    if getattr(dtype, "kind", None) in ("i", "u"):
        return series.astype("str")
    return None


def _device_array(span: Any, dtype: Any, start: int, count: int) -> Any:
    """``count`` items of ``dtype`` from item ``start`` of a pylibcudf buffer (a ``Span``:
    ``ptr`` and ``size`` in bytes) as a cupy array over that memory, no copy; the span is
    kept alive by the array. TypeError where they would reach past the buffer."""
    import cupy

    itemsize = np.dtype(dtype).itemsize
    if count == 0:
        return cupy.zeros(0, dtype=dtype)
    if span is None or start < 0 or (start + count) * itemsize > int(span.size):
        raise TypeError(f"HashBucket: a cuDF buffer of {getattr(span, 'size', None)} bytes cannot hold "
                        f"{count} items of {np.dtype(dtype)} from item {start}")
    memory = cupy.cuda.UnownedMemory(int(span.ptr), int(span.size), span)
    return cupy.ndarray((count,), dtype=dtype, memptr=cupy.cuda.MemoryPointer(memory, start * itemsize))


def _cudf_text_buffers(text: Any) -> tuple[Any, Any]:
    """``(offsets, bytes)`` of a cuDF Series of strings as cupy arrays over its own device
    memory (no copy), as :func:`.crc32.crc32_buffers` reads them: text ``i`` is
    ``bytes[offsets[i]:offsets[i + 1]]``. AttributeError or TypeError where cuDF's API or
    its strings layout is not what was read in its sources.

    Relies on (read in rapidsai/cudf at branch main = 26.10.00 (``VERSION``), commit
    6a22d1d, and the same calls at tags v26.10.00a and v26.08.00):

    - ``cudf.Series.to_pylibcudf() -> (pylibcudf.Column, metadata)``, "always a zero-copy
      operation": ``python/cudf/cudf/core/series.py`` (``to_pylibcudf``); the column's
      buffers unwrapped from cuDF's ``Buffer`` to the span that owns the memory:
      ``python/cudf/cudf/core/column/column.py`` (``ColumnBase.to_pylibcudf``,
      ``_unwrap_buffers``).
    - ``pylibcudf.Column.type().id()``, ``.size()``, ``.offset()``, ``.null_count()``, ``.num_children()``,
      ``.child(0)``, ``.data()``: ``python/pylibcudf/pylibcudf/column.pyx`` (``cpdef``
      accessors) and ``column.pyi``; ``pylibcudf.TypeId.STRING/INT32/INT64``:
      ``python/pylibcudf/pylibcudf/types.pyi``.
    - ``.data()`` is a ``Span``: an object with ``ptr`` (device address) and ``size`` (bytes):
      ``python/pylibcudf/pylibcudf/span.py``.
    - A STRING column holds its UTF-8 bytes in its own ``data()`` and one child, the offsets
      (INT32, or INT64 for large strings), ``size() + 1`` of them from item ``offset()`` of
      the child (plus the child's own ``offset()``), byte positions into the whole bytes
      buffer: ``Column.from_iterable_of_py`` builds one so, and ``OwnerWithCAI.create`` sizes
      a string column's data as ``strings_column_view.chars_size`` (both in ``column.pyx``).
    - cupy 14.2: ``cupy.cuda.UnownedMemory(ptr, size, owner)`` keeps ``owner`` alive
      (``cupy/cuda/memory.pyx``), ``cupy.ndarray(shape, dtype, memptr=MemoryPointer(...))``.
    """
    import cupy
    import pylibcudf as plc

    column, _ = text.to_pylibcudf()
    if column.type().id() != plc.TypeId.STRING:
        raise TypeError(f"HashBucket: cuDF gave a {column.type().id()!r} column for text")
    size = column.size()
    if size == 0 or (column.num_children() == 0 and column.null_count() == size):  # no text to read
        return cupy.zeros(size + 1, dtype=np.int64), cupy.zeros(0, dtype=np.uint8)
    if column.num_children() != 1:
        raise TypeError(f"HashBucket: a cuDF strings column with {column.num_children()} children, not 1 (offsets)")
    offsets_column = column.child(0)
    kind = {plc.TypeId.INT32: np.int32, plc.TypeId.INT64: np.int64}.get(offsets_column.type().id())
    if kind is None:
        raise TypeError(f"HashBucket: cuDF string offsets of {offsets_column.type().id()!r}")
    offsets = _device_array(offsets_column.data(), kind, offsets_column.offset() + column.offset(), size + 1)
    chars = column.data()
    data = (cupy.zeros(0, dtype=np.uint8) if chars is None or int(chars.size) == 0
            else _device_array(chars, np.uint8, 0, int(chars.size)))
    # cuDF's work (the cast to text) done before cupy's stream reads its buffers.
    cupy.cuda.runtime.deviceSynchronize()
    first, last = int(offsets[0]), int(offsets[-1])
    if not 0 <= first <= last <= len(data):
        raise TypeError(f"HashBucket: cuDF string offsets {first} .. {last} outside its {len(data)} bytes")
    return offsets, data


def _cudf_buckets(native: Any, series: Any, buckets: int) -> Any:
    """:func:`stable_hash` of each value of a cuDF Series, int32 (0 where missing), as a cuDF
    Series on ``native``'s index, computed on the GPU: :func:`_cudf_text`, then
    :func:`.crc32.crc32_buffers` in cupy over its device buffers (:func:`_cudf_text_buffers`).
    None for a column :func:`_cudf_text` does not take (the distinct values path).

    Where reading the device buffers fails (cuDF's internals changed: an AttributeError or
    TypeError), the column makes one round trip to the host instead
    (:func:`_cudf_host_buckets`), with a warning: exact, never a value-by-value loop."""
    import cudf

    text = _cudf_text(series)
    if text is None:
        return None
    try:
        offsets, data = _cudf_text_buffers(text)
    except (AttributeError, TypeError) as exc:
        import warnings

        warnings.warn(f"HashBucket on cuDF: the column's device buffers could not be read ({exc}); hashing it "
                      "on the host instead (one round trip, same buckets)", RuntimeWarning, stacklevel=2)
        return _cudf_host_buckets(text, native.index, buckets)
    crcs = crc32_buffers(offsets, data)
    values = (crcs % np.uint32(buckets - 1) + np.uint32(1)).view(np.int32)
    if text.null_count:
        values[text.isnull().values] = 0
    return cudf.Series(values, index=native.index)


def _cudf_host_buckets(text: Any, index: Any, buckets: int) -> Any:
    """:func:`_cudf_buckets` through the host: the text column to Arrow, the numpy kernel
    (:func:`_arrow_buckets`), the buckets back to the GPU; one round trip of the column."""
    import cudf

    return cudf.Series(_arrow_buckets(text.to_arrow(), buckets), index=index)


def _distinct_values(frame: NwFrame, column: str, expr: nw.Expr, dtype: Any) -> list[Any]:
    """The distinct non-missing values of ``column`` (as ``expr`` gives it), for
    :class:`HashBucket` to hash; nested values refused, naming the column."""
    try:
        distinct = collect_small(frame.select(expr.alias(column)).unique()).get_column(column).to_list()
    except TypeError:  # pandas: an object column of lists is unhashable
        first = first_value(frame, column)
        if len(first) and isinstance(first.item(0), _NESTED_VALUES):
            _refuse_nested(column, f"{dtype} of {type(first.item(0)).__name__}")
        raise
    # pandas: an object column of arrays (nested Parquet), seen among its few distinct values.
    if (nested := next((v for v in distinct if isinstance(v, _NESTED_VALUES)), None)) is not None:
        _refuse_nested(column, f"{dtype} of {type(nested).__name__}")
    return [v for v in distinct if not is_missing(v)]


@dataclass
class HashBucket(TableOp):
    """Hash each value into ``buckets`` buckets without a vocabulary (0 = missing).

    Useful for high-cardinality ids whose vocabulary would be large or keeps growing;
    unseen values hash like any other. No fitting needed. ``text``: which text of a value
    is hashed (:data:`HASH_TEXTS`); ``"canonical"`` (the default) is the latest canonical
    text, ``"canonical-v2"``, and the op keeps and saves that versioned name.

    Saved recipes: the recipe's JSON names the text's version, so a recipe gives the
    buckets it gave when it was saved, whichever version is the latest when it is loaded
    (a model's embedding rows are those buckets). A recipe saved before versions were named
    stored ``"text": "canonical"`` and is read with ``"canonical-v1"``, the text it hashed
    then (durations as ``str(value)``, which differs between pandas and polars: such a
    recipe keeps the buckets of the backend it is served on, as it had them); one saved
    before ``text`` existed is read with ``"str"``. Refit (or pass ``text="canonical"``
    to a new op) to get the latest text. An older gpufeed refuses a recipe naming a newer
    version by name instead of hashing other text. Not kept by any version: pandas object
    columns of ``Decimal`` values, of datetimes in several zones, and categoricals of
    numbers in a batch with a gap are read as polars reads them since 2026-11-26 (numbers,
    UTC instants, numbers), so their buckets differ from a recipe saved before then
    (``docs/tabular.md``, HashBucket): refit such a recipe.
    """

    buckets: int = 1024
    text: str = "canonical"
    kind: ClassVar[str] = "hash_bucket"
    stateless: ClassVar[bool] = True
    polars_eager: ClassVar[bool] = True  # the vectorised path reads the columns' Arrow buffers

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.buckets < 2:
            raise ValueError(f"HashBucket: buckets must be >= 2, got {self.buckets}")
        self.text = HASH_TEXT_ALIASES.get(self.text, self.text)
        if self.text not in HASH_TEXTS:
            raise ValueError(f"HashBucket: text must be one of {', '.join(map(repr, [*HASH_TEXT_ALIASES, *HASH_TEXTS]))}, "
                             f"got {self.text!r}")

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> HashBucket:
        """As :meth:`TableOp.from_dict`; a recipe saved before ``text`` hashed ``str(value)``
        (a whole float as ``"130.0"``, a datetime as ``"2024-01-01 00:00:00"``): read with
        ``text="str"``; one saved as ``"canonical"``, before the canonical text had versions,
        with ``"canonical-v1"``, the text it hashed then. So each gives the buckets its model
        was trained on."""
        spec = {"text": "str", **spec}
        if spec["text"] == "canonical":
            spec["text"] = "canonical-v1"
        return super().from_dict(spec)

    def transform(self, frame: NwFrame, backend: str) -> NwFrame:
        frame = _category_values(frame, backend, self.columns)
        exprs = _category_exprs(self.columns, frame)
        schema = frame.collect_schema()
        for c in self.columns:
            if schema[c] in _NESTED:  # polars hashed a list's text, which pandas' differs from
                _refuse_nested(c, str(schema[c]))
        if backend == "dask":
            # A value's bucket depends on the value alone: each partition hashing its own
            # distinct values gives the same buckets, lazily (a compute per column had
            # brought every distinct value back first).
            return per_partition(frame, self.transform)
        out = []
        vectorised: dict[str, Any] = {}
        for c in self.columns:
            if (buckets := _bucket_column(frame, backend, c, exprs[c], self)) is not None:
                vectorised[c] = buckets
                continue
            # Hash the distinct values in Python (few), then map them vectorised.
            if (times := _nanosecond_times(frame, backend, c, exprs[c], schema[c])) is not None:
                key, distinct, hashed = times
            else:
                key, distinct = exprs[c], _distinct_values(frame, c, exprs[c], schema[c])
                hashed = _in_utc(frame, c, distinct) if backend == "pandas" and schema[c] == nw.Object else distinct
            mapped = lookup(key, distinct, [stable_hash(v, self.buckets, self.text) for v in hashed], 0, nw.Int32)
            out.append(nw.when(exprs[c].is_null()).then(nw.lit(0, nw.Int32)).otherwise(mapped)
                       .cast(nw.Int32).alias(c))
        frame = frame.with_columns(*out) if out else frame
        if not vectorised:
            return frame
        if backend in ("pandas", "cudf"):
            return wrap(assign(nw.to_native(frame), vectorised))
        if is_lazy(frame):  # the kernel reads each column as its expression gives it
            frame = frame.with_columns(*[exprs[c].alias(c) for c in vectorised])
        return wrap(nw.to_native(frame).with_columns(*vectorised.values()))

    def num_embeddings(self, column: str) -> int:
        """Rows an embedding table for ``column`` needs: ``buckets`` (bucket 0 is for missing
        values, 1 .. buckets-1 for the hashed ones).

        Raises:
            KeyError: ``column`` is not one of the op's columns.
        """
        if column not in self.columns:
            raise KeyError(f"HashBucket: column {column!r} is not one of its columns {self.columns}")
        return self.buckets

    def params(self) -> dict[str, Any]:
        return {"buckets": self.buckets, "text": self.text}
