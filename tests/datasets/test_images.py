"""The synthetic ImageNet-like folder: layout, sizes, determinism, realistic compression."""

import hashlib

from PIL import Image

from gpufeed.datasets.images import default_image_dataset, generate_image_folder


def digest(root):
    return {p.relative_to(root).as_posix(): hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*.jpg"))}


def test_folder_layout_sizes_and_seeded_repeat(tmp_path):
    a = generate_image_folder(tmp_path / "a", num_images=7, num_classes=3, seed=5)
    b = generate_image_folder(tmp_path / "b", num_images=7, num_classes=3, seed=5)
    assert digest(a) == digest(b)
    assert sorted(d.name for d in a.iterdir()) == ["class_000", "class_001", "class_002"]
    assert [len(list(d.iterdir())) for d in sorted(a.iterdir())] == [3, 2, 2]
    for path in a.rglob("*.jpg"):
        with Image.open(path) as img:
            assert img.format == "JPEG" and img.mode == "RGB"
            assert 300 <= min(img.size) <= 500


def test_images_compress_like_photos_not_noise(tmp_path):
    root = generate_image_folder(tmp_path, num_images=6, num_classes=2, seed=1)
    for path in root.rglob("*.jpg"):
        with Image.open(path) as img:
            bits_per_pixel = path.stat().st_size * 8 / (img.size[0] * img.size[1])
        # photos at q90: ~1-4 bits/pixel; white noise at q90 is ~8+
        assert 0.5 < bits_per_pixel < 5, bits_per_pixel


def test_default_dataset_is_generated_once_then_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path))
    root = default_image_dataset(5, 2, progress=False)
    first = digest(root)
    stamp = {p: p.stat().st_mtime_ns for p in root.rglob("*.jpg")}
    again = default_image_dataset(5, 2, progress=False)
    assert again == root and digest(again) == first
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*.jpg")} == stamp  # not rewritten
    (root.parent / "dataset.json").unlink()  # an interrupted generation is redone
    assert digest(default_image_dataset(5, 2, progress=False)) == first


def test_cli_reports_the_classes_it_wrote_and_warns_about_old_files(tmp_path, capsys):
    from gpufeed.cli import main

    out = tmp_path / "imgs"
    assert main(["data", "images", str(out), "--images", "3", "--classes", "5"]) == 0
    captured = capsys.readouterr()
    assert "wrote 3 images in 3 classes" in captured.out and "warning" not in captured.err
    assert len([d for d in out.iterdir() if d.is_dir()]) == 3
    (out / "class_000" / "old.jpg").write_bytes(b"x")
    assert main(["data", "images", str(out), "--images", "2", "--classes", "2"]) == 0
    captured = capsys.readouterr()
    assert "already holds 4 files" in captured.err and "wrote 2 images in 2 classes" in captured.out


def test_one_cache_folder_holds_generated_tables_too(tmp_path, monkeypatch):
    # $GPUFEED_CACHE moves every cached thing (a container's volume): tables went to
    # ~/.cache/gpufeed/tables (or $GPUFEED_DATA) whatever it said.
    from gpufeed.datasets.transactions import cached_transaction_file

    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path))
    assert cached_transaction_file(50).parent == tmp_path / "tables"
