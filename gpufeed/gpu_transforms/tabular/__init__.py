"""Table preprocessing on cuDF (GPU) with polars and pandas fallbacks, and Dask for scale-out.

The backend is chosen once, when the table is read (:mod:`gpufeed.datasets.tables`);
every op here runs on the frame's own backend with identical results:

- :mod:`.ops` and :mod:`.categorical`: the table ops (:class:`TableOp`), and
  :mod:`.recipe`: a :class:`Recipe` of them, fitted on train, applied anywhere, saved as JSON.
  :mod:`.kernels` holds the per-backend fast paths they use, :mod:`.stats` shared statistics.
- :mod:`.split`: random, by-group and by-time splits, every row counted.
- :mod:`.rules`: declarative row rules compiled to vectorised case-when.
- :mod:`.downcast`: lossless dtype shrinking with a per-column report.
- :mod:`.frames`: the backend edge (detection, conversion, narwhals wrapping);
  :mod:`.errors`: the bad-table errors, shared with the readers and writers.
- :mod:`.dask`: partitions, files and a local cluster for the same recipes.
- :mod:`.cudf_pandas`: run unchanged pandas scripts on the GPU, with a fallback report.

Reading and writing files: :mod:`gpufeed.datasets.tables`; the hand-off to torch:
:mod:`gpufeed.pipelines.tables`.

Nothing here imports cuDF or cupy unless a cuDF frame is passed or cuDF is asked for.
"""

from gpufeed.gpu_transforms.tabular.categorical import (
    MISSING_INDEX,
    UNSEEN_INDEX,
    Categorify,
    HashBucket,
    LabelEncode,
)
from gpufeed.gpu_transforms.tabular.downcast import DowncastReport, downcast
from gpufeed.gpu_transforms.tabular.errors import (
    BackendError,
    ColumnTypeError,
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
from gpufeed.gpu_transforms.tabular.frames import backend_of, to_backend
from gpufeed.gpu_transforms.tabular.ops import Clip, FillMissing, Log, MinMax, Standardize, TableOp
from gpufeed.gpu_transforms.tabular.recipe import Recipe
from gpufeed.gpu_transforms.tabular.rules import Rule, apply_rules, apply_rules_rowwise, col
from gpufeed.gpu_transforms.tabular.split import Split, split_by_group, split_by_time, split_random

__all__ = [
    "MISSING_INDEX", "UNSEEN_INDEX", "BackendError", "Categorify", "Clip", "ColumnTypeError", "DowncastError", "DowncastReport",
    "EmptyTableError", "FillMissing", "HashBucket", "LabelEncode", "Log", "MalformedCSVError", "MinMax", "MissingColumnError",
    "MixedTypeError", "NonFiniteError", "Recipe", "Rule", "Split", "Standardize", "TableOp", "TabularError",
    "UnknownFormatError", "UnseenCategoryError", "apply_rules", "apply_rules_rowwise", "backend_of", "col",
    "downcast", "split_by_group", "split_by_time", "split_random", "to_backend",
]
