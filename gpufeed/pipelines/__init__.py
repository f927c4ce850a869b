"""Image-classification loaders behind one contract: DALI (GPU or CPU-only) or PyTorch.

Use :func:`classification_loader`; it picks the backend once, here at the edge.
"""

from gpufeed.datasets.samples import SampleSource
from gpufeed.pipelines.base import ClassificationLoader
from gpufeed.pipelines.loader import classification_loader
from gpufeed.pipelines.options import LastBatch, LoaderOptions, OnError
from gpufeed.pipelines.skips import BadImageError, Skipped
from gpufeed.pipelines.sources import open_source

__all__ = [
    "BadImageError", "ClassificationLoader", "LastBatch", "LoaderOptions", "OnError", "SampleSource",
    "Skipped", "classification_loader", "open_source",
]
