"""gpufeed: keep training GPUs fed.

- :mod:`gpufeed.pipelines`: image-classification loaders on DALI (GPU or CPU-only) or the
  PyTorch DataLoader, behind one contract (:func:`gpufeed.pipelines.classification_loader`).
- :mod:`gpufeed.gpu_transforms`: device-side batch transforms (images, arrays, tables).
- :mod:`gpufeed.datasets`: synthetic data generators and format converters.
- :mod:`gpufeed.bench`: benchmarks against the tuned CPU baselines users have today.
"""

__version__ = "0.1.0"
