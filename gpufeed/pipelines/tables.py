"""Hand a prepared table to torch: float32 features, int64 labels, on the training device.

From cuDF the columns go to a cupy matrix on the GPU and into torch through DLPack
(:func:`gpufeed.gpu_transforms.arrays.cudf_to_torch`), so the data never leaves the device
(cuDF's matrix is column-major: one copy on the GPU makes it row-major, as from numpy). From pandas and polars they go through one
numpy float32 matrix (``torch.from_numpy`` shares it), then ``.to(device)``. Tables larger
than one batch are cut into row slices (or, shuffled, gathered rows) first, so only one
batch is ever converted at a time.

Not imported by :mod:`gpufeed.pipelines` itself, so image-only code never loads the table
stack (narwhals, polars).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

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


def _missing_error(columns: Sequence[str], counts: np.ndarray, rows: int) -> NonFiniteError:
    """Name each column with missing values and how many rows miss it (``counts``: per column)."""
    bad = [(c, int(k)) for c, k in zip(columns, counts, strict=True) if k]
    return NonFiniteError(f"missing values in column(s) {[c for c, _ in bad]} "
                          f"({', '.join(str(k) for _, k in bad)} of {rows} rows): "
                          "fill them (FillMissing) before the hand-off")


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


def _label_error(column: str, dtype: object) -> ColumnTypeError:
    return ColumnTypeError(f"label column {column!r} has dtype {dtype}, not integers: a label here is a class "
                           "index (int64); cast whole-number floats or booleans to int64 first, encode text "
                           "classes with Categorify, and pass a regression target as a feature column instead")


def _check_label_range(column: str, dtype: object, highest: Callable[[], Any]) -> None:
    """Refuse uint64 labels beyond int64, on every backend: cast to the int64 class index
    they would wrap round to negative values. ``highest()`` (the column's maximum, None or
    missing when it is empty) is only computed for a uint64 column."""
    if _numpy_kind(dtype) != "u" or _numpy_dtype(dtype).itemsize < 8:
        return
    top = highest()
    if top is not None and not is_missing(top) and int(top) > np.iinfo(np.int64).max:
        raise ColumnTypeError(f"label column {column!r} holds values beyond int64 (up to {int(top)}), "
                              "which would wrap round to negative class indices: encode them (Categorify)")


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
                "missing value); encode the classes with Categorify, or drop those rows")
    if num_classes is not None and high >= num_classes:
        raise ColumnTypeError(f"label column {column!r} holds class indices beyond num_classes={num_classes} "
                              f"({int((labels >= num_classes).sum())} of {rows} rows, highest {high}); Categorify's "
                              "codes need num_embeddings(column) classes")


def _check_num_classes(num_classes: int | None, label: str | None, where: str) -> None:
    if num_classes is None:
        return
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


def _check_features(features: Sequence[str], where: str, label: str | None = None) -> None:
    """Refuse a bare string, no feature, a feature listed twice, or the label among the
    features, naming them."""
    if isinstance(features, str):
        raise TypeError(f"{where}: features is a list of column names, got the string {features!r} "
                        f"(write [{features!r}])")
    if not features:
        raise ValueError(f"{where} needs at least one feature column")
    twice = repeated(features)
    if twice:  # polars cannot select a column twice; pandas could: one answer on every backend
        raise ValueError(f"{where}: feature column(s) {', '.join(map(repr, twice))} listed more than once; "
                         "list each column once (to feed a column twice, copy it under a new name)")
    if label is not None and label in features:
        # the model would be handed its answer: a perfect training score, useless in serving
        raise ValueError(f"{where}: the label column {label!r} is also listed as a feature; leave it out of "
                         "the features (the model would be given the answer it is to predict)")


def _check_numeric(df: Frame, columns: Sequence[str]) -> None:
    """Name the columns a tensor cannot hold (text, categories, dates) before converting.

    Bad data in the hand-off raises the table ops' errors (:class:`ColumnTypeError`,
    :class:`NonFiniteError`: ``TypeError``/``ValueError`` subclasses), so one ``except
    TabularError`` covers a whole preprocessing script."""
    schema = wrap(df).collect_schema()
    # pandas object columns may hold numbers: they are tried (and named if they fail) below.
    bad = {c: str(schema[c]) for c in columns if not (schema[c].is_numeric() or schema[c] in (nw.Boolean, nw.Object))}
    if bad:
        raise ColumnTypeError(f"to_tensors needs numeric columns; {bad} are not: encode them first "
                        "(Categorify or HashBucket for categories)")


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


def _matrix(df: Frame, columns: Sequence[str], dtype: torch.dtype, device: torch.device,
            num_classes: int | None = None, ignore_index: int | None = -100) -> torch.Tensor:
    backend = backend_of(df)
    is_label = dtype == torch.int64
    if backend == "cudf":
        picked = df[list(columns)]
        nulls = picked.isna().any().to_numpy()
        if nulls.any():
            if is_label:
                raise _label_missing_error(columns[0], int(picked.iloc[:, 0].isna().sum()), len(picked))
            raise _missing_error(columns, picked.isna().sum().to_numpy(), len(picked))
        if is_label and _numpy_kind(picked.dtypes.iloc[0]) not in "iu":
            raise _label_error(columns[0], picked.dtypes.iloc[0])
        if is_label:
            _check_label_range(columns[0], picked.dtypes.iloc[0], lambda: picked.iloc[:, 0].max())
        # No host round trip. cuDF's matrix is column-major: made row-major, as from numpy
        # (a row of a batch then is contiguous for the model's first layer).
        tensor = cudf_to_torch(picked, "int64" if is_label else "float32").contiguous()
        if not is_label and not bool(torch.isfinite(tensor).all()):  # one sync per hand-off
            # Named from the float64 values, as on pandas: in the float32 tensor a value
            # beyond float32's range is inf already, and was called an inf value.
            _raise_non_finite(columns, cudf_to_torch(picked, "float64").cpu().numpy())
        if is_label and tensor.numel():
            low, high = (int(v) for v in torch.aminmax(tensor))  # one sync
            _check_label_values(columns[0], tensor, low, high, num_classes, ignore_index)
        return tensor if tensor.device == device else tensor.to(device)
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
    if is_label and array.dtype.kind in "fO" and (gaps := int(np.isnan(values).sum())):
        raise _label_missing_error(columns[0], gaps, len(values))
    if is_label and array.dtype.kind not in "iu":
        raise _label_error(columns[0], array.dtype)
    if is_label:
        _check_label_range(columns[0], array.dtype, lambda: array.max() if array.size else None)
    with np.errstate(over="ignore"):  # checked below, with the column named
        matrix = np.ascontiguousarray(array, dtype=np.int64 if is_label else np.float32)
    # One pass in the common case (every value finite), after the cast so that a float64
    # beyond float32's range is caught too; which columns fail is only worked out then.
    if not is_label and array.dtype.kind in "fO" and not np.isfinite(matrix).all():
        _raise_non_finite(columns, values)
    if is_label and matrix.size:
        _check_label_values(columns[0], matrix, int(matrix.min()), int(matrix.max()), num_classes, ignore_index)
    array = matrix
    if not array.flags.writeable:
        # A read-only view of the frame's own buffer (pandas copy-on-write, Arrow memory):
        # torch tensors are writable, so copy rather than let a write corrupt the table.
        array = array.copy()
    tensor = torch.from_numpy(array)  # shares the numpy buffer
    return tensor if device.type == "cpu" else tensor.to(device, non_blocking=True)


def to_tensors(
    df: Frame, features: Sequence[str], label: str | None = None, *, device: str | torch.device = "auto",
    num_classes: int | None = None, ignore_index: int | None = -100,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Features as a float32 ``(rows, len(features))`` tensor and labels as int64 ``(rows,)``.

    Args:
        df: a pandas, polars or cuDF frame (after preprocessing: no missing labels).
        features: feature columns, in the order the model expects.
        label: the label column, or None for inference.
        device: ``"auto" | "cpu" | "cuda" | "cuda:N"``.
        num_classes: the number of classes the model predicts: a label at or above it is
            an error (as a negative label is) instead of a failure inside the loss.
        ignore_index: the one negative label allowed, for rows the loss leaves out
            (``cross_entropy``'s ``ignore_index``, -100 by default); None allows none.

    Returns:
        ``(x, y)``; ``y`` is None without a label. From cuDF they are made on the GPU
        (no host copy).

    Raises:
        MissingColumnError: a feature or the label is absent. ColumnTypeError: text
            features, labels that are not integers, negative labels (or labels from
            ``num_classes`` on). NonFiniteError: missing or infinite values. ValueError: the
            label listed among the features.

    Example:
        >>> x, y = to_tensors(prepared, features, "label", device="cpu")  # doctest: +SKIP
        >>> x.dtype, y.dtype  # doctest: +SKIP
        (torch.float32, torch.int64)
    """
    _check_features(features, "to_tensors", label)
    _check_num_classes(num_classes, label, "to_tensors")
    df = _collected(df, "to_tensors")
    require_columns(wrap(df), [*features, *([label] if label else [])], "to_tensors")
    _check_numeric(df, [*features, *([label] if label else [])])
    dev = resolve_device(device)
    x = _matrix(df, features, torch.float32, dev)
    y = _matrix(df, [label], torch.int64, dev, num_classes, ignore_index).reshape(-1) if label else None
    return x, y


def iter_batches(
    df: Frame, features: Sequence[str], label: str | None = None, *, batch_size: int = 65_536,
    device: str | torch.device = "auto", shuffle: bool = False, seed: int = 0, epoch: int = 0,
    drop_last: bool = False, num_classes: int | None = None, ignore_index: int | None = -100,
) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
    """Yield ``(x, y)`` batches of ``batch_size`` rows; only one batch is converted at a time.

    Args:
        df: a pandas, polars or cuDF frame.
        features, label, device, num_classes, ignore_index: as in :func:`to_tensors`.
        batch_size: rows per batch.
        shuffle: visit the rows in a seeded random order, as a ``DataLoader`` with
            ``shuffle=True`` does: each batch gathers rows from the whole table (a table
            sorted by time or label still gives mixed batches). Without it, batches are
            row slices in order.
        seed: seed of the row order.
        epoch: the training epoch: with ``shuffle``, each epoch visits the rows in another
            order (the same one again for the same ``seed`` and ``epoch``).
        drop_last: drop a final batch smaller than ``batch_size`` (with ``shuffle``, other
            rows each epoch, as a DataLoader drops them).

    Returns:
        An iterator over ``ceil(rows / batch_size)`` (or floor, with ``drop_last``) batches.

    Example:
        >>> for x, y in iter_batches(prepared, features, "label", batch_size=4096):  # doctest: +SKIP
        ...     loss = model(x).cross_entropy(y)
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    _check_features(features, "iter_batches", label)
    _check_num_classes(num_classes, label, "iter_batches")
    frame = wrap(_collected(df, "iter_batches"))
    require_columns(frame, [*features, *([label] if label else [])], "iter_batches")
    n = len(frame)
    starts = list(range(0, n, batch_size))
    if drop_last and starts and n - starts[-1] < batch_size:
        starts.pop()
    # Shuffled: rows, not batches. Shuffling only the order of fixed slices left the same
    # tail out of every epoch with drop_last, and never mixed a sorted table's rows.
    order = np.random.default_rng(seed if epoch == 0 else (seed, epoch)).permutation(n) if shuffle else None
    for start in starts:
        rows = slice(start, start + batch_size) if order is None else order[start:start + batch_size]
        yield to_tensors(nw.to_native(frame[rows]), features, label, device=device, num_classes=num_classes,
                         ignore_index=ignore_index)
