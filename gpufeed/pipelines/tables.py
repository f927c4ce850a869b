"""Hand a prepared table to torch: float32 features, int64 category codes and labels (or
float regression targets), on the training device.

From cuDF the columns go to a cupy matrix on the GPU and into torch through DLPack
(:func:`gpufeed.gpu_transforms.arrays.cudf_to_torch`), so the data never leaves the device
(cuDF's matrix is column-major: one copy on the GPU makes it row-major, as from numpy). From pandas and polars they go through one
numpy float32 matrix (``torch.from_numpy`` shares it), then ``.to(device)``.
:func:`iter_batches` converts a table in chunks of whole batches (row slices, or shuffled,
gathered rows; about 262,144 rows), so a table larger than memory or the device is never
converted whole, and slices each chunk's tensors into batches.

Not imported by :mod:`gpufeed.pipelines` itself, so image-only code never loads the table
stack (narwhals, polars).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

import narwhals as nw
import numpy as np
import torch

from gpufeed.backends import resolve_device
from gpufeed.gpu_transforms.arrays import cudf_to_torch
from gpufeed.gpu_transforms.tabular.errors import BackendError, ColumnTypeError, NonFiniteError
from gpufeed.gpu_transforms.tabular.frames import (
    Frame,
    backend_of,
    is_lazy,
    is_missing,
    repeated,
    require_columns,
    wrap,
)
from gpufeed.gpu_transforms.tabular.kernels import categories_as_numbers
from gpufeed.pipelines.base import EpochHook, missing_attribute, pinned_empty
from gpufeed.pipelines.options import LastBatch
from gpufeed.pipelines.plan import EpochPlan


def _collected(df: Frame, where: str) -> Frame:
    """A polars LazyFrame (what a recipe returns for ``pl.scan_parquet``) collected: the
    tensors need its rows.

    Raises:
        BackendError: a Dask frame, named for ``where`` (``iter_batches`` had failed on
            ``len()`` of a LazyFrame): computing a whole Dask table into one process is
            the caller's decision, partition by partition.
    """
    frame = wrap(df)
    if backend_of(df) == "dask":
        raise BackendError(f"{where} needs a pandas, polars or cuDF frame, got dask; compute() it a partition "
                           f"at a time: for part in ddf.partitions: {where}(part.compute(), ...)")
    return nw.to_native(frame.collect()) if is_lazy(frame) and backend_of(df) == "polars" else df


def _missing_error(columns: Sequence[str], counts: Any, rows: int, what: str = "column(s)",
                   fix: str = "fill them (FillMissing)") -> NonFiniteError:
    """Name each column with missing values and how many rows miss it (``counts``: per
    column); ``what`` the columns are, ``fix`` what to do about it."""
    bad = [(c, int(k)) for c, k in zip(columns, counts, strict=True) if k]
    return NonFiniteError(f"missing values in {what} {[c for c, _ in bad]} "
                          f"({', '.join(str(k) for _, k in bad)} of {rows} rows): {fix} before the hand-off")


def _raise_non_finite(columns: Sequence[str], values: np.ndarray) -> None:
    """Name the columns of ``values`` (rows x columns) holding NaN (missing) or inf."""
    nulls = np.isnan(values).sum(axis=0)
    if nulls.any():
        raise _missing_error(columns, nulls, len(values))
    # an inf feature turns the loss into inf/NaN at the first step
    bad = [c for c, hit in zip(columns, np.isinf(values).any(axis=0), strict=True) if hit]
    if bad:
        raise NonFiniteError(f"inf values in column(s) {bad}: clip them (Clip) before the hand-off")
    # finite in float64, inf in float32: the cast overflowed
    big = [c for c, hit in zip(columns, (np.abs(values) > np.finfo(np.float32).max).any(axis=0), strict=True) if hit]
    raise NonFiniteError(f"values beyond float32's range (±{np.finfo(np.float32).max:.3g}) in column(s) {big}, "
                         "which would become inf: scale them (Standardize, MinMax, Log) before the hand-off")


def _label_missing_error(column: str, count: int, rows: int) -> NonFiniteError:
    """Missing labels (pandas' NA, polars' null, NaN), counted: checked before the label's
    dtype, which a gap makes float64 on the way to numpy (it was reported as "dtype
    float64, not integers", with a cast to int64 that the gap would fail)."""
    return NonFiniteError(f"missing values in label column {column!r} ({count} of {rows} rows): a label is a "
                          "class index for every row; drop those rows (or give them a class) before the hand-off")


def _target_missing_error(column: str, count: int, rows: int) -> NonFiniteError:
    return NonFiniteError(f"missing values in label column {column!r} ({count} of {rows} rows): a regression "
                          "target needs a value in every row; drop those rows before the hand-off")


def _gaps_error(kind: str, columns: Sequence[str], counts: Any, rows: int) -> NonFiniteError:
    """The error for missing values in ``columns`` (``counts``: per column), by what they are."""
    if kind == "label":
        return _label_missing_error(columns[0], int(counts[0]), rows)
    if kind == "target":
        return _target_missing_error(columns[0], int(counts[0]), rows)
    if kind == "codes":
        return _missing_error(columns, counts, rows, "categorical column(s)",
                              "encode them with Categorify or HashBucket (a missing value gets its own code)")
    return _missing_error(columns, counts, rows)


def _label_error(column: str, dtype: object) -> ColumnTypeError:
    return ColumnTypeError(f"label column {column!r} has dtype {dtype}, not integers: a label here is a class "
                           "index (int64); cast whole-number floats or booleans to int64 first, encode text "
                           "classes with LabelEncode, and pass label_dtype=torch.float32 for a regression target")


def _check_label_range(column: str, dtype: object, highest: Callable[[], Any], what: str = "label column") -> None:
    """Refuse uint64 labels beyond int64, on every backend: cast to the int64 class index
    they would wrap round to negative values. ``highest()`` (the column's maximum, None or
    missing when it is empty) is only computed for a uint64 column."""
    if _numpy_kind(dtype) != "u" or _numpy_dtype(dtype).itemsize < 8:
        return
    top = highest()
    if top is not None and not is_missing(top) and int(top) > np.iinfo(np.int64).max:
        raise ColumnTypeError(f"{what} {column!r} holds values beyond int64 (up to {int(top)}), "
                              "which would wrap round to negative indices: encode them (Categorify)")


def _check_label_values(column: str, labels: Any, low: int, high: int, num_classes: int | None,
                        ignore_index: int | None) -> None:
    """Refuse class indices a loss cannot take: negative ones other than ``ignore_index``
    (PyTorch's -100, rows a loss leaves out; pandas' ``cat.codes`` gives -1 for a missing
    value, and ``cross_entropy`` failed on it, on a GPU as a device-side assert naming no
    column) and, given ``num_classes``, those not below it. ``labels``: the int64 labels
    (numpy or torch), looked at again only on an error; ``low``, ``high``: their extremes."""
    rows = labels.shape[0]
    if low < 0:
        bad = (labels < 0) if ignore_index is None else ((labels < 0) & (labels != ignore_index))
        if bool(bad.any()):
            kept = "" if ignore_index is None else f" other than ignore_index={ignore_index}"
            raise ColumnTypeError(
                f"label column {column!r} holds negative class indices{kept} ({int(bad.sum())} of {rows} rows, "
                f"lowest {int(labels[bad].min())}): a class index is 0 or more (pandas' cat.codes gives -1 for a "
                "missing value); encode the classes with LabelEncode, or drop those rows")
    if num_classes is not None and high >= num_classes:
        raise ColumnTypeError(f"label column {column!r} holds class indices beyond num_classes={num_classes} "
                              f"({int((labels >= num_classes).sum())} of {rows} rows, highest {high}); for a "
                              f"target the recipe encoded pass num_classes=recipe.num_classes({column!r}) "
                              "(LabelEncode: its K classes; Categorify: vocabulary + 2)")


def _check_codes_values(columns: Sequence[str], codes: Any, low: int) -> None:
    """Refuse negative category codes (``nn.Embedding`` fails on them, on a GPU as a
    device-side assert naming no column). ``codes``: the int64 matrix, looked at again
    only on an error; ``low``: its minimum."""
    if low >= 0:
        return
    negative = codes < 0
    per_column = negative.sum(0)
    bad = [(c, int(k)) for c, k in zip(columns, per_column.tolist(), strict=True) if k]
    raise ColumnTypeError(f"categorical column(s) {[c for c, _ in bad]} hold negative codes "
                          f"({', '.join(str(k) for _, k in bad)} of {codes.shape[0]} rows, lowest {low}): an "
                          "embedding index is 0 or more; encode them with Categorify or HashBucket")


#: What ``label_dtype`` may be: class indices, or a regression target in float32 or float64.
_LABEL_DTYPES = (torch.int64, torch.float32, torch.float64)


def _check_num_classes(num_classes: int | None, label: str | None, where: str,
                       label_dtype: torch.dtype = torch.int64) -> None:
    if label_dtype not in _LABEL_DTYPES:
        raise ValueError(f"{where}: label_dtype must be torch.int64 (class indices), torch.float32 or "
                         f"torch.float64 (a regression target), got {label_dtype!r}")
    if num_classes is None:
        return
    if label_dtype != torch.int64:
        raise ValueError(f"{where}: num_classes={num_classes} checks class indices, but label_dtype={label_dtype} "
                         "makes the label a regression target; leave num_classes out (or use torch.int64)")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int | np.integer) or num_classes < 1:
        raise ValueError(f"{where}: num_classes must be a positive integer, got {num_classes!r}")
    if label is None:
        raise ValueError(f"{where}: num_classes={num_classes} checks the label column, but no label was given")


def _converts(values: np.ndarray) -> bool:
    try:
        values.astype(np.float64)
    except (TypeError, ValueError):
        return False
    return True


def _check_features(features: Sequence[str], where: str, label: str | None = None,
                    categorical: Sequence[str] | None = None) -> None:
    """Refuse a bare string, no feature, a feature listed twice, or the label among the
    features, naming them; ``categorical`` likewise (and none of them among the features)."""
    for name, given in (("features", features), ("categorical", categorical)):
        if isinstance(given, str):
            raise TypeError(f"{where}: {name} is a list of column names, got the string {given!r} "
                            f"(write [{given!r}])")
    if not features and not categorical:
        raise ValueError(f"{where} needs at least one feature column")
    if categorical:
        twice = repeated(categorical)
        if twice:
            raise ValueError(f"{where}: categorical column(s) {', '.join(map(repr, twice))} listed more than once")
        both = [c for c in categorical if c in features]
        if both:
            raise ValueError(f"{where}: column(s) {', '.join(map(repr, both))} listed both as features and as "
                             "categorical; list each in one of them (categorical: int64 codes for nn.Embedding)")
        if label is not None and label in categorical:
            raise ValueError(f"{where}: the label column {label!r} is also listed as categorical; leave it out "
                             "(the model would be given the answer it is to predict)")
    twice = repeated(features)
    if twice:  # polars cannot select a column twice; pandas could: one answer on every backend
        raise ValueError(f"{where}: feature column(s) {', '.join(map(repr, twice))} listed more than once; "
                         "list each column once (to feed a column twice, copy it under a new name)")
    if label is not None and label in features:
        # the model would be handed its answer: a perfect training score, useless in serving
        raise ValueError(f"{where}: the label column {label!r} is also listed as a feature; leave it out of "
                         "the features (the model would be given the answer it is to predict)")


def _check_numeric(df: Frame, columns: Sequence[str], label: str | None = None) -> None:
    """Name the columns a tensor cannot hold (text, categories, dates) before converting.

    Bad data in the hand-off raises the table ops' errors (:class:`ColumnTypeError`,
    :class:`NonFiniteError`: ``TypeError``/``ValueError`` subclasses), so one ``except
    TabularError`` covers a whole preprocessing script."""
    schema = wrap(df).collect_schema()
    # pandas object columns may hold numbers: they are tried (and named if they fail) below.
    bad = {c: str(schema[c]) for c in columns if not (schema[c].is_numeric() or schema[c] in (nw.Boolean, nw.Object))}
    if bad:
        # A text label is a target's classes: LabelEncode (0..K-1), not Categorify (reserves 0, 1).
        target = f"; the label {label!r}: LabelEncode([{label!r}]) (classes 0..K-1)" if label in bad else ""
        raise ColumnTypeError(f"to_tensors needs numeric columns; {bad} are not: encode them first "
                              f"(Categorify or HashBucket for categories{target})")


def _check_codes(df: Frame, columns: Sequence[str]) -> None:
    """Name the categorical columns that hold no integer codes (a schema check)."""
    if not columns:
        return
    schema = wrap(df).collect_schema()
    bad = {c: str(schema[c]) for c in columns if not schema[c].is_integer()}
    if bad:
        raise ColumnTypeError(f"to_tensors: categorical columns hold integer codes for nn.Embedding; {bad} do not: "
                              "encode them first (Categorify or HashBucket), or pass them as features")


def _numpy_dtype(dtype: object) -> np.dtype:
    """The numpy dtype of a column's dtype: a pandas nullable or Arrow dtype by its
    ``numpy_dtype`` (``Int64``: int64), which cuDF (from 25.x) keeps on a column made
    from pandas (``cudf.from_pandas`` of an ``Int64`` column is ``Int64``, not int64).

    Raises:
        TypeError: a dtype numpy has none for (a categorical, list, struct).
    """
    return np.dtype(getattr(dtype, "numpy_dtype", dtype))


def _numpy_kind(dtype: object) -> str:
    """numpy's kind letter of a cuDF dtype; ``"O"`` for one numpy has no dtype for (cuDF's
    categorical, list, struct), where ``np.dtype`` raised a TypeError naming no column.
    pandas' nullable ``Int64`` (which a cuDF column made from pandas keeps) is ``"i"``:
    ``np.dtype`` refused it, and such labels were called "not integers"."""
    try:
        return _numpy_dtype(dtype).kind
    except TypeError:
        return "O"


def _row_major(array: np.ndarray, dtype: np.dtype, out: np.ndarray | None = None) -> np.ndarray:
    """``array`` as a row-major matrix of ``dtype``, written into ``out`` when given (a
    pinned buffer's memory), else a new array or ``array`` itself where it is one already.
    One that is not row-major already (polars' matrix is column-major, a pandas frame's
    block too, and a row slice of one is strided) is copied column by column into the
    row-major result: ~2x faster than ``np.ascontiguousarray`` with a cast (262,144 rows x
    10 float64 columns to float32: 1.3 ms against 3.0), the same values."""
    by_column = array.ndim == 2 and array.shape[1] >= 2 and array.dtype != object and not array.flags.c_contiguous
    if out is None:
        if not by_column:
            return np.ascontiguousarray(array, dtype=dtype)
        out = np.empty(array.shape, dtype=dtype)
    if not by_column:
        np.copyto(out, array, casting="unsafe")
        return out
    for j in range(array.shape[1]):
        out[:, j] = array[:, j]
    return out


_TORCH_DTYPES = {"int64": torch.int64, "float64": torch.float64, "float32": torch.float32}


def _matrix(df: Frame, columns: Sequence[str], kind: str, device: torch.device,
            dtype: torch.dtype = torch.float32, num_classes: int | None = None,
            ignore_index: int | None = -100, pin_memory: bool = False) -> torch.Tensor:
    """``columns`` as one row-major matrix of ``kind``: ``"features"`` (float32), ``"codes"``
    (category codes, int64), ``"label"`` (class indices, int64) or ``"target"`` (a regression
    label, ``dtype`` float32 or float64), checked as that kind. ``pin_memory``: a host
    frame's matrix bound for CUDA is written into pinned memory and copied asynchronously."""
    backend = backend_of(df)
    integer = kind in ("label", "codes")
    is_label = kind == "label"
    out = "int64" if integer else "float64" if dtype == torch.float64 else "float32"
    if backend == "cudf":
        picked = df[list(columns)]
        nulls = picked.isna().any().to_numpy()
        if nulls.any():
            raise _gaps_error(kind, columns, picked.isna().sum().to_numpy(), len(picked))
        if is_label and _numpy_kind(picked.dtypes.iloc[0]) not in "iu":
            raise _label_error(columns[0], picked.dtypes.iloc[0])
        if integer:
            for c in columns:
                _check_label_range(c, picked[c].dtype, lambda c=c: picked[c].max(),
                                   "label column" if is_label else "categorical column")
        # No host round trip. cuDF's matrix is column-major: made row-major, as from numpy
        # (a row of a batch then is contiguous for the model's first layer).
        tensor = cudf_to_torch(picked, out).contiguous()
        if not integer and not bool(torch.isfinite(tensor).all()):  # one sync per hand-off
            # Named from the float64 values, as on pandas: in the float32 tensor a value
            # beyond float32's range is inf already, and was called an inf value.
            _raise_non_finite(columns, cudf_to_torch(picked, "float64").cpu().numpy())
        if is_label and tensor.numel():
            low, high = (int(v) for v in torch.aminmax(tensor))  # one sync
            _check_label_values(columns[0], tensor, low, high, num_classes, ignore_index)
        if kind == "codes" and tensor.numel():
            _check_codes_values(columns, tensor, int(tensor.min()))  # one sync
        return tensor if tensor.device == device else tensor.to(device)
    if kind == "codes" and _no_exact_common_type(df, columns, backend):
        # numpy has no exact type for uint64 codes beside signed ones (to_numpy made float64,
        # rounding codes beyond 2**53): each column on its own, exact and checked by name.
        return torch.cat([_matrix(df, [c], kind, device, dtype, pin_memory=pin_memory) for c in columns], dim=1)
    if backend == "polars":
        array = df.select(list(columns)).to_numpy()
    elif backend == "pandas":
        array = df[list(columns)].to_numpy()
        if array.dtype == object:
            import pandas as pd

            # pandas' nullable columns (booleans, Int64 with gaps) hold pd.NA, which no
            # float can: as NaN, a gap is named a missing value below, not "not a number".
            array = np.where(pd.isna(array), np.nan, array)
    else:
        raise BackendError(f"to_tensors needs a pandas, polars or cuDF frame, got {backend}; "
                           "compute() a Dask partition first")
    if array.dtype.kind in "fO":
        try:
            values = array.astype(np.float64, copy=False)
        except (TypeError, ValueError) as exc:  # an object column holding text
            bad = [c for i, c in enumerate(columns) if not _converts(array[:, i])]
            raise ColumnTypeError(f"to_tensors needs numeric columns; {bad} hold values that are not numbers "
                            f"({exc}): encode them first (Categorify or HashBucket)") from exc
        # Labels and codes: gaps first, which make an integer column float on the way to numpy.
        if kind != "features" and (gaps := np.isnan(values).sum(axis=0)).any():
            raise _gaps_error(kind, columns, gaps, len(values))
        if kind == "codes":  # integer columns (checked by their schema) with no gap: whole numbers
            array = values
    if is_label and array.dtype.kind not in "iu":
        raise _label_error(columns[0], array.dtype)
    if integer and array.dtype.kind == "u":
        _check_label_range(", ".join(columns), array.dtype, lambda: array.max() if array.size else None,
                           "label column" if is_label else "categorical column(s)")
    # Pinned: written straight into page-locked memory (no extra copy), so the copy to the
    # device below is asynchronous. From pageable memory it first waits for the GPU's queue
    # to drain (CUDA's pageable host-to-device rule): every chunk of iter_batches would wait
    # for the training steps queued before it.
    host = pinned_empty(array.shape, _TORCH_DTYPES[out]) if pin_memory and device.type == "cuda" else None
    with np.errstate(over="ignore"):  # checked below, with the column named
        matrix = _row_major(array, np.dtype(out), None if host is None else host.numpy())
    # One pass in the common case (every value finite), after the cast so that a float64
    # beyond float32's range is caught too; which columns fail is only worked out then.
    if not integer and array.dtype.kind in "fO" and not np.isfinite(matrix).all():
        _raise_non_finite(columns, values)
    if is_label and matrix.size:
        _check_label_values(columns[0], matrix, int(matrix.min()), int(matrix.max()), num_classes, ignore_index)
    if kind == "codes" and matrix.size:
        _check_codes_values(columns, matrix, int(matrix.min()))
    if host is not None:
        # From the pinned tensor itself (or a view of it), not a tensor made over its memory
        # by torch.from_numpy: torch's caching host allocator records the copy on the block
        # it finds by the tensor's storage and hands it out again (to the next chunk) only
        # once the copy is done.
        return host.to(device, non_blocking=True)
    array = matrix
    if not array.flags.writeable:
        # A read-only view of the frame's own buffer (pandas copy-on-write, Arrow memory):
        # torch tensors are writable, so copy rather than let a write corrupt the table.
        array = array.copy()
    tensor = torch.from_numpy(array)  # shares the numpy buffer
    return tensor if device.type == "cpu" else tensor.to(device, non_blocking=True)


#: Rows converted at once by :func:`iter_batches` (rounded down to whole batches, at least
#: one): large enough that the per-conversion cost is spread over many small batches, small
#: enough that a table much larger than memory or the device is never converted whole.
_CHUNK_ROWS = 1 << 18


def _no_exact_common_type(df: Frame, columns: Sequence[str], backend: str) -> bool:
    """Whether a pandas or polars frame's integer ``columns`` mix 64-bit unsigned with other
    types, which numpy holds together only as float64."""
    if len(columns) < 2 or backend not in ("pandas", "polars"):
        return False
    dtypes = [df.schema[c] for c in columns] if backend == "polars" else list(df[list(columns)].dtypes)
    wide = [str(t).lower() == "uint64" for t in dtypes]
    return any(wide) and not all(wide)


def _empty(rows: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.empty((rows, 0), dtype=dtype, device=device)


def to_tensors(
    df: Frame, features: Sequence[str], label: str | None = None, *, categorical: Sequence[str] | None = None,
    device: str | torch.device = "auto", num_classes: int | None = None, ignore_index: int | None = -100,
    label_dtype: torch.dtype = torch.int64, pin_memory: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None] | tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Features as a float32 ``(rows, len(features))`` tensor and labels as int64 ``(rows,)``
    (class indices) or, with ``label_dtype=torch.float32``, a float regression target; with
    ``categorical=``, those columns' codes as an int64 ``(rows, len(categorical))`` tensor beside.

    Args:
        df: a pandas, polars or cuDF frame (after preprocessing: no missing labels).
        features: numeric feature columns, in the order the model expects (may be empty
            when ``categorical`` is given).
        label: the label column, or None for inference.
        categorical: integer code columns (``Categorify``, ``HashBucket``) for ``nn.Embedding``:
            returned as their own int64 tensor, exact (in ``features`` they would come back
            as float32). Given (even ``[]``), the result is ``(x_num, x_cat, y)``.
        device: ``"auto" | "cpu" | "cuda" | "cuda:N"``.
        num_classes: the number of classes the model predicts: a label at or above it is
            an error (as a negative label is) instead of a failure inside the loss
            (``recipe.num_classes(label)`` for a target the recipe encoded).
        ignore_index: the one negative label allowed, for rows the loss leaves out
            (``cross_entropy``'s ``ignore_index``, -100 by default); None allows none.
        label_dtype: ``torch.int64`` (default): the label is a class index, checked as one
            (integers, not negative, below ``num_classes``). ``torch.float32`` or
            ``torch.float64``: a regression target (``mse_loss``) or 0/1 floats for
            ``BCEWithLogitsLoss``; any numeric or boolean column, missing or infinite values
            refused by name.
        pin_memory: with a CUDA ``device`` and a pandas or polars frame, convert into
            pinned (page-locked) host memory and copy from there asynchronously, as a
            ``DataLoader(pin_memory=True)`` does: the call then returns without waiting for
            the GPU work queued before it (a copy from pageable memory waits for it). Costs a
            page-locked buffer the size of the result, so it suits batches and chunks
            (:func:`iter_batches` always does it) more than a whole large table. Ignored on
            the CPU and for cuDF frames (already on the device).

    Returns:
        ``(x, y)``, or ``(x_num, x_cat, y)`` with ``categorical``; ``y`` is None without a
        label. From cuDF they are made on the GPU (no host copy).

    Raises:
        MissingColumnError: a feature or the label is absent. ColumnTypeError: text
            features, categorical columns that are not integers or hold negative codes,
            labels that are not integers, negative labels (or labels from ``num_classes``
            on). NonFiniteError: missing or infinite values. ValueError: the label listed
            among the features, a column both a feature and categorical.

    Example:
        >>> x, y = to_tensors(prepared, features, "label", device="cpu")  # doctest: +SKIP
        >>> x.dtype, y.dtype  # doctest: +SKIP
        (torch.float32, torch.int64)
        >>> x_num, x_cat, y = to_tensors(prepared, ["amount"], "price", categorical=["region"],  # doctest: +SKIP
        ...                              label_dtype=torch.float32)
    """
    _check_features(features, "to_tensors", label, categorical)
    _check_num_classes(num_classes, label, "to_tensors", label_dtype)
    df = _collected(df, "to_tensors")
    codes = list(categorical or [])
    used = [*features, *codes, *([label] if label else [])]
    require_columns(wrap(df), used, "to_tensors")
    # Categoricals of numbers (pickled astype("category") sizes or years) as their values,
    # as polars holds them: pandas refused them as "Categorical".
    df = nw.to_native(categories_as_numbers(wrap(df), used)[0])
    _check_numeric(df, [*features, *([label] if label else [])], label)
    _check_codes(df, codes)
    dev = resolve_device(device)
    rows = None if features and (categorical is None or codes) else len(wrap(df))
    pin = dict(pin_memory=pin_memory)
    x = _matrix(df, features, "features", dev, **pin) if features else _empty(rows, torch.float32, dev)
    if label is None:
        y = None
    elif label_dtype == torch.int64:
        y = _matrix(df, [label], "label", dev, torch.int64, num_classes, ignore_index, **pin).reshape(-1)
    else:
        y = _matrix(df, [label], "target", dev, label_dtype, **pin).reshape(-1)
    if categorical is None:
        return x, y
    x_cat = _matrix(df, codes, "codes", dev, torch.int64, **pin) if codes else _empty(rows, torch.int64, dev)
    return x, x_cat, y


def iter_batches(
    df: Frame, features: Sequence[str], label: str | None = None, *, categorical: Sequence[str] | None = None,
    batch_size: int = 65_536, device: str | torch.device = "auto", shuffle: bool = False, seed: int = 0,
    epoch: int = 0, drop_last: bool = False, num_classes: int | None = None, ignore_index: int | None = -100,
    label_dtype: torch.dtype = torch.int64, shard_id: int = 0, num_shards: int = 1,
) -> TableBatches:
    """``(x, y)`` batches (``(x_num, x_cat, y)`` with ``categorical``) of ``batch_size``
    rows, as a :class:`TableBatches`: an iterable with ``len()`` whose every pass (every
    ``iter()``, as a ``DataLoader`` or PyTorch Lightning iterates once per epoch) is the
    next epoch, resumable mid-epoch by ``state_dict()``; ``next()`` on it also works (one
    pass). Converted a chunk of whole batches at a time (about 262,144 rows, at least one
    batch): one gather on the frame, one conversion, one set of checks and one copy to the
    device per chunk (from pinned memory on CUDA, asynchronous as a ``DataLoader``'s with
    ``pin_memory=True``), and each batch a row slice (a view) of the chunk's tensors. The
    batches are those each batch's rows give through :func:`to_tensors` (the same rows,
    order and values for the same ``seed`` and ``epoch``); a chunk with bad rows is
    converted batch by batch, so the batches before the bad one come out and the error
    counts the rows of its batch.

    Args:
        df: a pandas, polars or cuDF frame.
        features, label, categorical, device, num_classes, ignore_index, label_dtype: as in
            :func:`to_tensors`.
        batch_size: rows per batch.
        shuffle: visit the rows in a seeded random order, as a ``DataLoader`` with
            ``shuffle=True`` does: each batch gathers rows from the whole table (a table
            sorted by time or label still gives mixed batches). Without it, batches are
            row slices in order.
        seed: seed of the row order.
        epoch: the training epoch of the first pass (the next pass is ``epoch + 1``, ...):
            with ``shuffle``, each epoch visits the rows in another order (the same one
            again for the same ``seed`` and ``epoch``).
        drop_last: drop a final batch smaller than ``batch_size`` (with ``shuffle``, other
            rows each epoch, as a DataLoader drops them).
        shard_id, num_shards: this rank's share of the rows (a ``DistributedSampler``'s
            ``rank`` and ``num_replicas``, or NVTabular's ``global_rank``/``global_size``):
            every rank draws the same epoch order and takes its contiguous slice of it
            (slices differ by one row at most, and together are every row once). With
            ``drop_last`` every rank takes the smallest slice's full batches, so all ranks
            step alike (what DDP needs); without it a rank may take one batch more, which
            it warns about when made (a DDP rank out of step with the others). Not
            taken from the launcher, unlike the image loaders: a table is often split per
            rank before it reaches here, and splitting it again would silently drop rows.

    Returns:
        A :class:`TableBatches` of ``ceil(rows / batch_size)`` (or floor, with ``drop_last``)
        batches a pass.

    Raises:
        ValueError, KeyError, BackendError: bad arguments or columns, at the call; a bad
        value in the table (a gap, an inf, a label out of range) at its batch.

    Example:
        >>> for x, y in iter_batches(prepared, features, "label", batch_size=4096):  # doctest: +SKIP
        ...     loss = model(x).cross_entropy(y)
        >>> for x_num, x_cat, y in iter_batches(prepared, numeric, "label", categorical=codes):  # doctest: +SKIP
        ...     loss = cross_entropy(model(x_num, x_cat), y)
    """
    return TableBatches(df, features, label, categorical=categorical, batch_size=batch_size, device=device,
                        shuffle=shuffle, seed=seed, epoch=epoch, drop_last=drop_last, num_classes=num_classes,
                        ignore_index=ignore_index, label_dtype=label_dtype, shard_id=shard_id,
                        num_shards=num_shards)


Batch = tuple[torch.Tensor, torch.Tensor | None] | tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]


class TableBatches:
    """The batches of :func:`iter_batches` (its arguments, checked when it is made).

    Each ``iter()`` starts a pass over the table, and each pass is the next epoch: the
    first is ``epoch``, then ``epoch + 1`` ..., a pass left before its end included (as
    Lightning leaves one under ``limit_train_batches``: the next pass is a new order, not
    the same first batches again). So a ``DataLoader``-style loop, Lightning or accelerate
    iterating it once per epoch gets every epoch's batches in a new order; a one-shot
    generator gave every epoch after the first no batch at all, silently.

    ``next()`` on it is one pass read batch by batch, as from the generator it used to be.
    ``state_dict()`` after any batch and ``load_state_dict(state)`` on a new one (same
    table and columns, ``batch_size``, ``shuffle``, ``seed``, ``drop_last`` and ``num_shards``; a state of
    another rank gives this rank's rows) go on with the rest of that epoch: the same
    batches as an uninterrupted run. A pass takes its epoch at its
    first batch; :meth:`set_epoch` before it (Lightning's, through ``batch_sampler``, counts
    from 0 and so overrides ``epoch``) chooses it.
    """

    def __init__(self, df: Frame, features: Sequence[str], label: str | None, *, categorical: Sequence[str] | None,
                 batch_size: int, device: str | torch.device, shuffle: bool, seed: int, epoch: int,
                 drop_last: bool, num_classes: int | None, ignore_index: int | None,
                 label_dtype: torch.dtype, shard_id: int = 0, num_shards: int = 1) -> None:
        for name, value, low, what in (("batch_size", batch_size, 1, ">= 1"),
                                       ("seed", seed, 0, ">= 0, the same on every rank"),
                                       ("epoch", epoch, 0, ">= 0")):
            # Checked here, not at the first batch: seed=None drew another order in every
            # rank's batches (rows twice and never, and a resume other batches).
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
                raise ValueError(f"iter_batches: {name} must be a whole number {what}, got {value!r}")
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in (shard_id, num_shards)) \
                or not 0 <= shard_id < num_shards:
            raise ValueError(f"iter_batches: shard_id must be in 0 .. num_shards - 1 (whole numbers), got "
                             f"shard_id={shard_id!r}, num_shards={num_shards!r}")
        _check_features(features, "iter_batches", label, categorical)
        _check_num_classes(num_classes, label, "iter_batches", label_dtype)
        self._frame = wrap(_collected(df, "iter_batches"))
        require_columns(self._frame, [*features, *(categorical or []), *([label] if label else [])], "iter_batches")
        self._features, self._label = list(features), label
        # Pinned on CUDA, as the image loaders' batches: each chunk's copy to the device then
        # does not wait for the training steps queued before it.
        self._convert = dict(categorical=categorical, device=device, num_classes=num_classes,
                             ignore_index=ignore_index, label_dtype=label_dtype, pin_memory=True)
        self.batch_size, self.shuffle, self.seed, self.drop_last = batch_size, shuffle, seed, drop_last
        self.rows = len(self._frame)
        self.shard_id, self.num_shards = int(shard_id), int(num_shards)
        # This rank's slice of each epoch's order and its batches, as the image loaders cut
        # theirs (with drop_last the smallest slice's full batches, the same count on every
        # rank); the order itself stays iter_batches' own (_batches).
        self._plan = EpochPlan(self.rows, batch_size, shuffle=shuffle, seed=seed, shard_id=self.shard_id,
                               num_shards=self.num_shards,
                               last_batch=LastBatch.DROP if drop_last else LastBatch.PARTIAL)
        # Warned whatever the use: this cannot tell training from evaluation, and a per-step
        # sync hangs in both.
        self._plan.warn_uneven_steps(
            "iter_batches: without drop_last", "rows", "Train with drop_last=True (every rank the smallest "
            "slice's full batches); an evaluation that syncs only at its end can ignore this", stacklevel=3)
        self._lo = self._plan.shard_start
        self._stop = len(self._plan) * batch_size if drop_last else self._plan.shard_size
        self._next_epoch, self._skip = epoch, 0  # where the next pass starts
        self._running: list[int] | None = None  # [epoch, batches yielded] of the pass going on
        # The epoch last given to set_epoch (in the state); after load_state_dict, the state's,
        # until set_epoch is called (Lightning setting it again on resume keeps the position).
        self._set_epoch: int | None = None
        self._resumed_set: int | None = None
        self._pass: Iterator[Batch] | None = None  # the pass next() reads

    def __getattr__(self, name: str) -> NoReturn:  # only called for attributes it lacks
        raise missing_attribute(self, name, "to shard, pass shard_id= and num_shards=")

    def __len__(self) -> int:
        return len(self._plan)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch``, from its first batch; after
        :meth:`load_state_dict`, the state's position is kept when ``epoch`` is the epoch that
        was set when the state was taken (Lightning on resume: the pass may be a later one,
        where Lightning's ``max_size_cycle`` iterated this, the shorter loader, again within
        that epoch) or, for a state taken without ``set_epoch``, the epoch it resumes (a loop
        that calls ``set_epoch`` every epoch, as with ``DistributedSampler`` or the image
        loader, goes on from the cut instead of replaying the batches before it)."""
        resumed, self._resumed_set, self._set_epoch = self._resumed_set, None, epoch
        if self._running is None and resumed is not None:
            if epoch == resumed:
                return
            self._skip = 0  # another epoch than the state's: from its start, whatever pass the state names
        elif self._running is not None or epoch != self._next_epoch:
            self._skip = 0
        # state_dict() now names this epoch, and next() reads it (as after load_state_dict)
        self._next_epoch, self._running, self._pass = epoch, None, None

    @property
    def batch_sampler(self) -> EpochHook:
        """Where PyTorch Lightning sets the epoch each epoch (``batch_sampler.sampler.set_epoch``,
        as on the image loader: :class:`~gpufeed.pipelines.base.EpochHook`): a run resumed from
        a checkpoint taken after a pass left early (``limit_train_batches``) then gets the next
        epoch, not the rest of the cut one. It yields no indices; there is no ``sampler``."""
        return EpochHook(self)

    def __iter__(self) -> Iterator[Batch]:
        # A generator: the pass takes its epoch at its first batch, so a set_epoch between
        # iter() and the first batch (Lightning resumed: iter() in setup_data, then the
        # epoch) sets this pass.
        epoch, skip = self._next_epoch, self._skip
        self._next_epoch, self._skip = epoch + 1, 0
        self._running = running = [epoch, skip]
        yield from self._batches(epoch, skip, running)
        if self._running is running:
            # The pass is closed (its end asked for): state_dict() names the next epoch's
            # start. Until then, after its last batch, it names this epoch's end.
            self._running = None

    def __next__(self) -> Batch:
        if self._pass is None:
            self._pass = iter(self)
        return next(self._pass)

    def state_dict(self) -> dict[str, Any]:
        """Where the batches stand: the epoch and the batches of it already yielded, with
        what makes them this table's. As the image loader's: right after a pass's last batch,
        that epoch's end (resumed, the first pass is empty, so a loop that calls
        ``set_epoch(saved_epoch)`` or none goes on alike); once the pass has ended (its
        ``StopIteration``), the next epoch's start."""
        epoch, done = (self._next_epoch, self._skip) if self._running is None else self._running
        state = {"epoch": epoch, "batches_done": done, "set_epoch": self._set_epoch, **self._fingerprint()}
        # Plain Python values: numpy ones (seed=np.int64(3)) made a Lightning checkpoint fail to
        # load (torch.load's weights_only=True refuses numpy scalars), so the run never resumed.
        return {k: v.item() if isinstance(v, np.generic) else v for k, v in state.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (:meth:`state_dict`): the next pass is the rest of its epoch.

        A state taken on another rank (``shard_id``) goes on from the same position with
        this rank's rows, as Lightning under DDP resumes every rank from rank 0's state.

        Raises:
            ValueError: the state is of another table or other batches (named).
        """
        # Lightning under DDP writes rank 0's state alone and loads it on every rank; its
        # position is every rank's, as all ranks step alike (same epoch, same batch count).
        if not isinstance(state, dict):
            raise ValueError(f"iter_batches: not a state of these batches (a dict from state_dict()), got "
                             f"{type(state).__name__}")
        # "columns" is absent from states saved before it was recorded: not compared there.
        differ = {k: (state.get(k), v) for k, v in self._fingerprint().items()
                  if k != "shard_id" and (k in state or k != "columns") and state.get(k) != v}
        if differ:
            raise ValueError("iter_batches: this state is of other batches; differing (state, these): "
                             + ", ".join(f"{k}={a!r} vs {b!r}" for k, (a, b) in differ.items()))
        position = {k: state.get(k) for k in ("epoch", "batches_done", "set_epoch")
                    if k != "set_epoch" or state.get(k) is not None}  # set_epoch: None, or absent in older states
        bad = {k: v for k, v in position.items()
               if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0}
        if bad or position["batches_done"] > len(self):
            # A damaged or hand-made state: -1 had yielded the last rows then empty batches.
            raise ValueError(f"iter_batches: not a position of these batches: {bad or position} (whole numbers, "
                             f"batches_done at most {len(self)} a pass)")
        self._next_epoch, self._skip = int(state["epoch"]), int(state["batches_done"])
        self._running, self._pass = None, None
        self._set_epoch = self._resumed_set = None if state.get("set_epoch") is None else int(state["set_epoch"])

    def _fingerprint(self) -> dict[str, Any]:
        # Plain str (a numpy str_ name would make the checkpoint unloadable, as numpy scalars did)
        columns = [str(c) for c in (*self._features, *(self._convert["categorical"] or []),
                                    *([self._label] if self._label else []))]
        return {"rows": self.rows, "columns": columns, "batch_size": self.batch_size, "shuffle": self.shuffle,
                "seed": self.seed, "drop_last": self.drop_last, "shard_id": self.shard_id,
                "num_shards": self.num_shards}

    def __getitem__(self, index: object) -> NoReturn:
        # What a DataLoader wrapped round this asks for; it would batch the batches again.
        raise TypeError("TableBatches yields whole batches and has no items to index: iterate it as it is (a "
                        "training loop, Lightning and accelerate take it in a DataLoader's place), not through a "
                        "DataLoader")

    def _batches(self, epoch: int, skip: int, running: list[int]) -> Iterator[Batch]:
        frame, features, label, convert, batch_size = (self._frame, self._features, self._label, self._convert,
                                                       self.batch_size)
        n, stop, lo = self.rows, self._stop, self._lo
        # Shuffled: rows, not batches. Shuffling only the order of fixed slices left the same
        # tail out of every epoch with drop_last, and never mixed a sorted table's rows.
        order = np.random.default_rng(self.seed if epoch == 0 else (self.seed, epoch)).permutation(n) \
            if self.shuffle else None
        # Whole batches per chunk, about _CHUNK_ROWS rows: one gather on the frame, one
        # conversion and one set of checks per chunk, and each batch a row slice (a view) of
        # the chunk's tensors, on the device already. The batches are the rows they were one
        # batch at a time (same order, same seed), and memory stays bounded by the chunk.
        step = batch_size * max(1, _CHUNK_ROWS // batch_size)
        for start in range(skip * batch_size, stop, step):
            end = min(start + step, stop)
            # positions in this rank's slice of the epoch's order
            rows = slice(lo + start, lo + end) if order is None else order[lo + start:lo + end]
            try:
                chunk = to_tensors(nw.to_native(frame[rows]), features, label, **convert)
            except (TypeError, ValueError):
                chunk = None  # (out of the except block: the batch's own error, not chained to this)
            if chunk is None:
                # Bad data somewhere in the chunk: batch by batch, as before, so the batches
                # before the bad one come out and the error counts the rows of its batch.
                for first in range(start, end, batch_size):
                    at, until = lo + first, lo + min(first + batch_size, end)  # not into the next rank's rows
                    rows = slice(at, until) if order is None else order[at:until]
                    batch = to_tensors(nw.to_native(frame[rows]), features, label, **convert)
                    running[1] += 1
                    yield batch
                continue
            x, *rest, y = chunk
            for first in range(0, end - start, batch_size):
                last = first + batch_size
                running[1] += 1
                yield (x[first:last], *(c[first:last] for c in rest), None if y is None else y[first:last])
