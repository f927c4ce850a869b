"""ImageNet-like synthetic JPEG folders.

White noise compresses unlike photos (JPEG files 5-10x larger, decode times off), so the
images here are built the way natural images look to a codec: a 1/f ("pink") spectrum of
smooth colour fields, a few hard-edged shapes, and a little sensor grain, saved at
quality 90 with the short side between 300 and 500 px. Each class has its own palette,
so a small model can learn something from them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from gpufeed.datasets.cache import cache_dir

#: Bump when the generator's output changes, so cached default datasets are rebuilt.
GENERATOR_VERSION = 1


def _pink_field(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A (h, w, 3) float field in [0, 1] with a roughly 1/f spectrum, built from octaves."""
    out = np.zeros((h, w, 3), np.float32)
    amp, total = 1.0, 0.0
    for cells in (2, 4, 8, 16, 32, 64, 128):
        coarse = rng.random((cells, max(2, cells * w // h), 3), dtype=np.float32)
        up = np.asarray(
            Image.fromarray((coarse * 255).astype(np.uint8)).resize((w, h), Image.BICUBIC),
            np.float32,
        ) / 255.0
        out += amp * up
        total += amp
        amp *= 0.7
    return out / total


def synth_image(rng: np.random.Generator, label: int, num_classes: int, min_side: int = 300,
                max_side: int = 500) -> Image.Image:
    """One natural-looking RGB image for class ``label``; the short side is in [min_side, max_side]."""
    short = int(rng.integers(min_side, max_side + 1))
    aspect = float(rng.uniform(1.0, 1.5))
    h, w = (short, int(short * aspect)) if rng.random() < 0.75 else (int(short * aspect), short)
    hue = label / max(1, num_classes)
    tint = np.array([np.cos(2 * np.pi * (hue + k / 3)) for k in range(3)], np.float32) * 0.25
    field = np.clip(_pink_field(rng, h, w) + tint, 0.0, 1.0)
    img = Image.fromarray((field * 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(2, 7))):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        x1, y1 = x0 + int(rng.integers(w // 10, w // 2)), y0 + int(rng.integers(h // 10, h // 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1, y1), fill=colour)
    arr = np.asarray(img, np.float32) + rng.normal(0, 6.0, (h, w, 3)).astype(np.float32)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def generate_image_folder(
    root: str | os.PathLike[str],
    *,
    num_images: int = 1000,
    num_classes: int = 10,
    seed: int = 0,
    min_side: int = 300,
    max_side: int = 500,
    quality: int = 90,
    progress: bool = False,
) -> Path:
    """Write an ImageFolder-style tree ``root/class_XXX/img_XXXXXX.jpg``.

    Args:
        root: output folder (created; existing files with the same names are replaced).
        num_images: total images, spread evenly over the classes (the first classes get
            one more when it does not divide).
        num_classes: number of class folders.
        seed: the same seed writes the same bytes.
        min_side, max_side: range of the short side in pixels.
        quality: JPEG quality.
        progress: show progress on stderr: a bar in a terminal, a line at the start and
            end (and every 30 s) in a log.

    Returns:
        The root folder.

    Example:
        >>> root = generate_image_folder("/tmp/imgs", num_images=20, num_classes=2)
    """
    if num_images < 1 or num_classes < 1:
        raise ValueError(f"num_images and num_classes must be >= 1, got {num_images}, {num_classes}")
    if not 1 <= min_side <= max_side:
        raise ValueError(f"need 1 <= min_side <= max_side, got {min_side}, {max_side}")
    root = Path(root)
    rng = np.random.default_rng(seed)
    indices = range(num_images)
    if progress:
        from gpufeed.progress import progress as report

        indices = report(indices, desc=f"generating {root}", unit="img")
    for i in indices:
        label = i % num_classes
        folder = root / f"class_{label:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        img = synth_image(rng, label, num_classes, min_side, max_side)
        img.save(folder / f"img_{i:06d}.jpg", format="JPEG", quality=quality)
    return root


def default_image_dataset(num_images: int = 1024, num_classes: int = 10, *, progress: bool = True) -> Path:
    """The benchmark's default dataset: generated once, then reused from the cache.

    A ``dataset.json`` written last marks a complete folder, so an interrupted generation
    is redone rather than trusted.
    """
    spec = {"num_images": num_images, "num_classes": num_classes, "seed": 0,
            "generator": GENERATOR_VERSION}
    root = cache_dir() / f"images-{num_images}x{num_classes}-v{GENERATOR_VERSION}"
    marker = root / "dataset.json"
    if marker.exists() and json.loads(marker.read_text()).get("spec") == spec:
        return root / "train"
    generate_image_folder(root / "train", num_images=num_images, num_classes=num_classes, seed=0,
                          progress=progress)
    files = sorted((root / "train").rglob("*.jpg"))
    sizes = [f.stat().st_size for f in files]
    marker.write_text(json.dumps({
        "spec": spec, "files": len(files), "bytes": sum(sizes),
        "mean_kib": sum(sizes) / len(sizes) / 1024,
        "description": f"{num_images} synthetic ImageNet-like JPEGs (q90, short side 300-500 px) in {num_classes} classes",
    }, indent=2))
    return root / "train"
