"""Synthetic data generators (ImageNet-like JPEG folders, sensor tables) and format converters."""
