"""Table preprocessing on cuDF (GPU) with polars and pandas fallbacks, and Dask for scale-out.

Choose the backend once (``backend="auto" | "cudf" | "polars" | "pandas"``) when reading;
every op after that runs on the frame's own backend with identical results:

- :mod:`.io`: read/write CSV, Parquet, Feather, pickle, HDF5, JSON; bad lines reported.
- :mod:`.downcast`: lossless dtype shrinking with a per-column report.
- :mod:`.rules`: declarative row rules compiled to vectorised case-when.
- :mod:`.recipe` and :mod:`.split`: fit on train / transform anywhere, saved as JSON.
- :mod:`.torch_handoff`: float32/int64 tensors on the device (DLPack from cuDF).
- :mod:`.dask`: partitions, files and a local cluster for the same recipes.
- :mod:`.cudf_pandas`: run unchanged pandas scripts on the GPU, with a fallback report.

Nothing here imports cuDF or cupy unless a cuDF frame is passed or cuDF is asked for.
"""

from gpufeed.gpu_transforms.tabular.downcast import DowncastReport, downcast
from gpufeed.gpu_transforms.tabular.errors import (
    BackendError,
    DowncastError,
    EmptyTableError,
    MalformedCSVError,
    MissingColumnError,
    MixedTypeError,
    NonFiniteError,
    TabularError,
    UnknownFormatError,
    UnseenCategoryError,
)
from gpufeed.gpu_transforms.tabular.frames import backend_of, choose_backend, to_backend
from gpufeed.gpu_transforms.tabular.io import (
    FORMATS,
    ReadReport,
    detect_format,
    read_table,
    read_table_with_report,
    write_table,
)
from gpufeed.gpu_transforms.tabular.recipe import (
    Categorify,
    Clip,
    FillMissing,
    HashBucket,
    Log,
    MinMax,
    Recipe,
    Standardize,
)
from gpufeed.gpu_transforms.tabular.rules import Rule, apply_rules, apply_rules_rowwise, col
from gpufeed.gpu_transforms.tabular.split import Split, split_by_group, split_by_time, split_random
from gpufeed.gpu_transforms.tabular.torch_handoff import iter_batches, to_tensors

__all__ = [
    "FORMATS", "BackendError", "Categorify", "Clip", "DowncastError", "DowncastReport", "EmptyTableError",
    "FillMissing", "HashBucket", "Log", "MalformedCSVError", "MinMax", "MissingColumnError", "MixedTypeError",
    "NonFiniteError", "ReadReport", "Recipe", "Rule", "Split", "Standardize", "TabularError",
    "UnknownFormatError", "UnseenCategoryError", "apply_rules", "apply_rules_rowwise", "backend_of",
    "choose_backend", "col", "detect_format", "downcast", "iter_batches", "read_table",
    "read_table_with_report", "split_by_group", "split_by_time", "split_random", "to_backend", "to_tensors",
    "write_table",
]
