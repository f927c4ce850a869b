"""Test helpers: small image trees with known contents."""

from __future__ import annotations

from pathlib import Path

from gpufeed.datasets.images import generate_image_folder


def indexed_file_list(root: Path, n: int = 23) -> list[tuple[str, int]]:
    """``n`` JPEGs under ``root``, each with its own label (label == sample number), so a
    batch's labels say exactly which samples it holds."""
    generate_image_folder(root, num_images=n, num_classes=1, seed=3, min_side=48, max_side=64)
    files = sorted(str(p) for p in root.rglob("*.jpg"))
    return [(f, i) for i, f in enumerate(files)]
