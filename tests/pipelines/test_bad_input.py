"""Bad files never kill an epoch: skipped and reported (exact counts), or raised by name."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gpufeed.backends import dali_installed
from gpufeed.datasets.images import generate_image_folder
from gpufeed.pipelines import BadImageError, classification_loader
from tests.helpers import impossible_huffman, png16_bytes, with_png_crcs
from tests.pipelines.test_loader_contract import BACKENDS, load

BAD = {  # file name -> words the reason must contain
    "truncated.jpg": "truncated",
    "zero.jpg": "empty file",
    "notes.jpg": "not an image",
    "readme.txt": "not an image",
    "broken_header.jpg": "decode",  # passes the byte checks: each decoder finds it
    "scrambled_header.jpg": "could not decode: Bogus Huffman table definition",  # the byte checks, libjpeg's words
    "animation.gif": "unsupported image format (GIF)",
    "corrupt.png": "corrupt PNG (CRC error in its IDAT chunk)",
    "scrambled.png": "decode",  # CRCs intact: only a decoder finds it (libpng crashed torchvision's)
    "broken.tif": "cannot identify image file",  # and no memory address after it (it varied per run)
}
DECODABLE = ("picture.png", "gray.jpg", "cmyk.jpg")
#: Files a folder source leaves out (no image extension: ImageFolder would not load them).
NOT_IMAGES = ("readme.txt", "animation.gif", ".DS_Store")


@pytest.fixture(scope="module")
def messy_folder(tmp_path_factory) -> Path:
    """12 good JPEGs in 2 classes, the bad files above, PNG/grayscale/CMYK images that must
    decode, and an empty class folder."""
    root = tmp_path_factory.mktemp("messy") / "train"
    generate_image_folder(root, num_images=12, num_classes=2, seed=4, min_side=64, max_side=96)
    good = root / "class_000" / "img_000000.jpg"
    data = good.read_bytes()
    bad = root / "class_000"
    (bad / "truncated.jpg").write_bytes(data[: len(data) // 2])
    (bad / "zero.jpg").write_bytes(b"")
    (bad / "notes.jpg").write_text("not a picture at all")
    (bad / "readme.txt").write_text("hello")
    header = bytearray(data)
    sos = header.find(b"\xff\xda")  # scramble the Huffman tables before the scan
    header[sos - 200: sos] = bytes(range(200))
    (bad / "scrambled_header.jpg").write_bytes(bytes(header))
    (bad / "broken_header.jpg").write_bytes(impossible_huffman(data))  # passes the byte checks
    with Image.open(good) as img:
        img.save(bad / "animation.gif")
    with Image.open(good) as img:
        img.save(root / "class_001" / "picture.png")
        img.convert("L").save(root / "class_001" / "gray.jpg")
        img.convert("CMYK").save(root / "class_001" / "cmyk.jpg")
    with Image.open(good) as img:
        img.save(bad / "corrupt.png")
    png = bytearray((bad / "corrupt.png").read_bytes())
    png[len(png) // 2: len(png) // 2 + 64] = np.random.default_rng(0).integers(0, 256, 64, dtype=np.uint8).tobytes()
    (bad / "corrupt.png").write_bytes(bytes(png))
    (bad / "scrambled.png").write_bytes(with_png_crcs(png))
    (bad / "broken.tif").write_bytes(b"II*\x00" + bytes(100))
    (bad / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (root / "class_002").mkdir()
    return root


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_files_are_skipped_reported_and_counted_exactly(messy_folder, backend):
    bad_images = {name: words for name, words in BAD.items() if name not in NOT_IMAGES}
    with pytest.warns(UserWarning) as built:
        loader = load(messy_folder, backend, train=True, batch_size=4, size=32)
    # files without an image extension: left out, counted once in one line at build time
    messages = [str(w.message) for w in built]
    assert any("class folder(s)" in m and "class_002" in m for m in messages)
    assert any(f"left out {len(NOT_IMAGES)} file(s) whose extension is not one ImageFolder loads" in m
               and ".jpg .jpeg .png" in m for m in messages)
    assert loader.samples.ignored == len(NOT_IMAGES)
    assert len(loader.samples) == 12 + len(bad_images) + len(DECODABLE)
    assert loader.classes == ["class_000", "class_001", "class_002"]  # a list, as ImageFolder's
    for epoch in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yielded = sum(len(y) for _, y in loader)
        reasons = {os.path.basename(s.path): s.reason for s in loader.skipped}
        assert set(reasons) == set(bad_images), reasons
        for name, words in bad_images.items():
            assert words in reasons[name] and " at 0x" not in reasons[name], (name, reasons[name])
        assert yielded + len(loader.skipped) == len(loader.samples) == loader.samples_yielded + len(bad_images)
        gpufeed_warnings = [w for w in caught if "skipped" in str(w.message)]
        # one warning line the first time these files turn up, none after
        assert len(gpufeed_warnings) == (1 if epoch == 0 else 0)


def test_a_folder_counts_the_samples_torchvision_imagefolder_counts(messy_folder):
    from torchvision.datasets import ImageFolder

    with pytest.warns(UserWarning):
        loader = classification_loader(messy_folder, train=False, batch_size=4, backend="torch", device="cpu")
    reference = ImageFolder(messy_folder, allow_empty=True)
    assert len(loader.samples) == len(reference)
    assert list(loader.samples.paths) == [p for p, _ in reference.samples]
    assert list(loader.samples.labels) == [y for _, y in reference.samples]


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
def test_dali_decode_failures_say_what_is_wrong_with_the_file(messy_folder):
    with pytest.warns(UserWarning):  # the empty class folder, then the skipped files
        loader = load(messy_folder, "dali", train=False, batch_size=8)
        list(loader)
    reasons = {os.path.basename(s.path): s.reason for s in loader.skipped}
    # DALI names its codec's error code; PIL's words say what is wrong with the bytes.
    assert "PIL: broken data stream" in reasons["broken_header.jpg"]
    # What the byte checks find is reported in the torch backend's words (libjpeg's).
    assert reasons["scrambled_header.jpg"] == "could not decode: Bogus Huffman table definition"


@pytest.mark.parametrize("backend", BACKENDS)
def test_png_grayscale_and_cmyk_images_are_decoded_as_rgb(messy_folder, backend):
    files = [(str(messy_folder / "class_001" / n), i) for i, n in enumerate(DECODABLE)]
    loader = load(None, backend, file_list=files, train=False, batch_size=3, size=32)
    (x, y), = list(loader)
    assert x.shape == (3, 3, 32, 32) and y.tolist() == [0, 1, 2] and not loader.skipped
    # the grayscale image's three channels hold one value per pixel (before normalisation)
    loader_u8 = load(None, backend, file_list=files, train=False, batch_size=3, size=32, dtype=__import__("torch").uint8)
    (xu, _), = list(loader_u8)
    gray = xu[1].int()
    assert (gray[0] - gray[1]).abs().max() <= 2 and (gray[1] - gray[2]).abs().max() <= 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(BAD))
def test_on_error_raise_names_the_file(messy_folder, backend, name):
    files = [(str(messy_folder / "class_000" / "img_000000.jpg"), 0), (str(messy_folder / "class_000" / name), 0)]
    loader = load(None, backend, file_list=files, train=False, batch_size=2, size=32, on_error="raise")
    with pytest.raises(BadImageError, match=name) as info:
        list(loader)
    assert info.value.path.endswith(name) and BAD[name] in info.value.reason


def test_missing_root_names_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        classification_loader(tmp_path / "nowhere", train=True, batch_size=4, backend="torch")


def test_a_root_without_class_folders_is_refused(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"x")
    with pytest.raises(ValueError, match="no class folders"):
        classification_loader(tmp_path, train=True, batch_size=4, backend="torch")


def test_malformed_file_list_line_is_named(tmp_path):
    listing = tmp_path / "list.txt"
    listing.write_text("a.jpg 0\nb.jpg zero\n")
    with pytest.raises(ValueError, match=r"list.txt:2"):
        classification_loader(tmp_path, file_list=listing, train=True, batch_size=4, backend="torch")


def test_negative_labels_in_a_file_list_are_named_by_line(image_folder, tmp_path):
    first, second = sorted(str(p) for p in Path(image_folder).rglob("*.jpg"))[:2]
    listing = tmp_path / "list.txt"
    listing.write_text(f"{first} 0\n{second} -3\n")
    with pytest.raises(ValueError, match=r"labels must be >= 0; 1 negative: .*list.txt:2 \(-3\)"):
        classification_loader(None, file_list=listing, train=True, batch_size=4, backend="torch")
    with pytest.raises(ValueError, match=r"file_list\[1\] \(-1\)"):
        classification_loader(None, file_list=[(first, 0), (second, -1)], train=True, batch_size=4, backend="torch")


def test_a_bad_rank_from_the_environment_is_named(image_folder, monkeypatch):
    monkeypatch.setenv("RANK", "worker-1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"RANK='worker-1' and WORLD_SIZE='2' from the environment"):
        classification_loader(image_folder, train=True, batch_size=4, backend="torch")


@pytest.mark.parametrize("backend", BACKENDS)
def test_16_bit_png_is_scaled_to_8_bits(tmp_path, backend):
    pixels = np.random.default_rng(0).integers(0, 65536, (40, 40, 3)).astype(np.uint16)
    (tmp_path / "deep.png").write_bytes(png16_bytes(pixels))
    files = [(str(tmp_path / "deep.png"), 0)]
    # train: torch's resize kernels used to refuse the uint16 pixels and kill the epoch
    loader = load(None, backend, file_list=files, train=True, batch_size=1, size=32, dtype=torch.uint8)
    (x, _), = list(loader)
    assert x.dtype == torch.uint8 and x.shape == (1, 3, 32, 32) and not loader.skipped
    # val: no resize (40 -> 40, crop 40), so the pixels are the 16-bit values' top 8 bits
    val = load(None, backend, file_list=files, train=False, batch_size=1, size=40, val_resize=40,
               dtype=torch.uint8)
    (x, _), = list(val)
    expected = torch.from_numpy((pixels >> 8).astype(np.uint8)).permute(2, 0, 1)
    assert (x[0].int() - expected.int()).abs().max() <= 1  # DALI rounds, PIL/torchvision truncate


def test_missing_or_folder_entries_in_a_file_list_are_refused_up_front(tmp_path):
    generate_image_folder(tmp_path, num_images=2, num_classes=1, seed=0, min_side=32, max_side=40)
    listing = tmp_path / "list.txt"
    listing.write_text("class_000/img_000000.jpg 0\nclass_000/gone.jpg 0\nclass_000 1\n")
    with pytest.raises(FileNotFoundError, match=r"2 of 3 entries") as info:
        classification_loader(file_list=listing, train=True, batch_size=4, backend="torch")
    assert "list.txt:2" in str(info.value) and "gone.jpg does not exist" in str(info.value)
    assert "list.txt:3" in str(info.value) and "is a folder" in str(info.value)
    pairs = [(str(tmp_path / "class_000" / "img_000000.jpg"), 0), (str(tmp_path / "nope.jpg"), 0)]
    with pytest.raises(FileNotFoundError, match=r"1 of 2 entries.*file_list\[1\].*nope.jpg"):
        classification_loader(file_list=pairs, train=True, batch_size=4, backend="torch")


def test_file_list_fields_may_be_separated_by_any_whitespace(tmp_path):
    generate_image_folder(tmp_path, num_images=2, num_classes=1, seed=0, min_side=32, max_side=40)
    listing = tmp_path / "list.txt"
    listing.write_text("class_000/img_000000.jpg\t0\nclass_000/img_000001.jpg \t 1\n")
    loader = classification_loader(file_list=listing, train=False, batch_size=4, backend="torch",
                                    num_workers=0, device="cpu")
    assert loader.samples.labels == (0, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_file_names_that_are_not_utf8_are_read_resumed_and_converted(tmp_path, backend):
    from gpufeed.datasets.shards.convert import convert

    root = generate_image_folder(tmp_path / "src", num_images=6, num_classes=2, seed=2, min_side=40, max_side=48)
    first = sorted((root / "class_000").glob("*.jpg"))[0]
    try:  # a Latin-1 name copied from an old disk: not valid UTF-8, so Python holds it with surrogates
        os.rename(bytes(first), os.fsencode(root / "class_000") + b"/caf\xe9.jpg")
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    loader = load(root, backend, train=False, batch_size=2, size=32)
    batches = iter(loader)
    next(batches)
    state = loader.state_dict()  # the dataset's fingerprint hashes the names
    rest = sum(len(y) for _, y in batches)
    resumed = load(root, backend, train=False, batch_size=2, size=32)
    resumed.load_state_dict(state)
    assert sum(len(y) for _, y in resumed) == rest == 4 and not loader.skipped
    report = convert(root, tmp_path / "wds", format="webdataset", workers=0, progress=False)
    assert report.written == 6 and not report.skipped


@pytest.mark.parametrize("backend", BACKENDS)
def test_files_gone_since_the_loader_was_built_are_skipped_and_reported(tmp_path, backend):
    root = generate_image_folder(tmp_path / "src", num_images=8, num_classes=2, seed=3, min_side=40, max_side=48)
    (root / "class_001" / "link.jpg").symlink_to(tmp_path / "nowhere.jpg")  # a dangling link
    with pytest.warns(UserWarning):
        loader = load(root, backend, train=True, batch_size=3, size=32)
        gone = sorted((root / "class_000").glob("*.jpg"))[1]
        gone.unlink()  # deleted after the source was listed (a cleanup job, a re-sync)
        yielded = sum(len(y) for _, y in loader)
    reasons = {os.path.basename(s.path): s.reason for s in loader.skipped}
    assert reasons == {"link.jpg": "could not read: No such file or directory",
                       gone.name: "could not read: No such file or directory"}
    assert yielded == 7 and yielded + len(loader.skipped) == len(loader.samples) == 9


def _one_per_class_with_bad_files(root: Path) -> tuple[set[int], set[str]]:
    """12 JPEGs, one per class (a label is its sample), and 6 bad files in classes of their
    own, two of them side by side; the good labels and the bad names."""
    generate_image_folder(root, num_images=12, num_classes=12, seed=6, min_side=40, max_side=56)
    data = (root / "class_000" / "img_000000.jpg").read_bytes()
    bad = {"zero.jpg": b"", "cut.jpg": data[: len(data) // 2], "words.jpg": b"not a picture",
           "huffman.jpg": impossible_huffman(data), "zero2.jpg": b"", "cut2.jpg": data[:100]}
    for k, (name, content) in enumerate(bad.items()):
        (root / f"class_{12 + k:03d}").mkdir()
        (root / f"class_{12 + k:03d}" / name).write_bytes(content)
    return set(range(12)), set(bad)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("policy", ["drop", "fill", "partial"])
def test_bad_files_never_change_a_ranks_step_count_or_batch_size(tmp_path, backend, policy):
    """A rank whose batch was all bad files used to yield a step fewer than len(loader):
    under torchrun the other ranks then waited at their next collective (a hang on NCCL).
    drop/fill: stand-ins from the rank's own share keep every batch full; partial: bad
    files are left out and every good sample comes exactly once."""
    good, bad = _one_per_class_with_bad_files(tmp_path / "train")
    seen: list[int] = []
    skipped: set[str] = set()
    for rank in range(3):
        loader = load(tmp_path / "train", backend, train=True, batch_size=2, size=16, shuffle=True, seed=3,
                      last_batch=policy, shard_id=rank, num_shards=3)
        for epoch in range(2):
            loader.set_epoch(epoch)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                batches = [labels.tolist() for _, labels in loader]
            if policy != "partial":
                assert len(batches) == len(loader) == 3 and all(len(b) == 2 for b in batches), batches
                assert set(sum(batches, [])) <= good  # stand-ins come from the good samples
            if epoch == 0:
                seen += sum(batches, [])
                skipped |= {os.path.basename(s.path) for s in loader.skipped}
    if policy == "partial":
        assert sorted(seen) == sorted(good)  # each good sample once, across the ranks
    assert len(seen) == (12 if policy == "partial" else 18)
    assert skipped == bad


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rank_whose_files_are_all_bad_is_named_not_left_short(tmp_path, backend):
    root = tmp_path / "train"
    (root / "a").mkdir(parents=True)
    for k in range(4):
        (root / "a" / f"{k}.jpg").write_bytes(b"")
    loader = load(root, backend, train=True, batch_size=2, size=16, last_batch="drop")
    with warnings.catch_warnings(), pytest.raises(RuntimeError, match="no sample of epoch 0 could be read"):
        warnings.simplefilter("ignore")
        list(loader)
    if backend == "torch":  # raised in the worker: the files and reasons travel in the error
        with warnings.catch_warnings(), pytest.raises(RuntimeError, match=r"e\.g\. .*[0-3]\.jpg: empty file"):
            warnings.simplefilter("ignore")
            list(load(root, backend, train=True, batch_size=2, size=16, last_batch="drop"))
    with pytest.raises(BadImageError, match="empty file"):  # on_error="raise": the first bad file, named
        list(load(root, backend, train=True, batch_size=2, size=16, last_batch="drop", on_error="raise"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_known_bad_file_met_as_a_stand_in_is_reported_every_epoch(tmp_path, backend):
    # the DALI feed remembered it from epoch 0 and left it out of later epochs' reports
    root = tmp_path / "train"
    generate_image_folder(root, num_images=9, num_classes=1, seed=2, min_side=40, max_side=48)
    names = sorted(p.name for p in (root / "class_000").iterdir())
    for bad in (names[5], names[6], names[-1]):  # two in the second batch, one in the dropped tail
        (root / "class_000" / bad).write_bytes(b"")
    loader = load(root, backend, train=False, batch_size=4, size=16, last_batch="drop", shuffle=False)
    reports = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert [len(y) for _, y in loader] == [4, 4]
        reports.append(sorted(os.path.basename(s.path) for s in loader.skipped))
    assert reports == [sorted([names[5], names[6], names[-1]])] * 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_tiffs_of_1_32_and_float_bits_are_yielded_by_both_backends_with_the_same_pixels(tmp_path, backend):
    """DALI's decoder fails on a bilevel or a 32-bit TIFF, which PIL reads: the DALI
    backend hands them over decoded as the torch backend decodes them, so both yield the
    same samples, with the same pixels."""
    from gpufeed.datasets.image_bytes import tiff_beyond_dali

    rng = np.random.default_rng(5)
    gray = Image.fromarray(rng.integers(0, 256, (48, 40), dtype=np.uint8))
    names = {"bilevel.tif": gray.convert("1"), "i32.tif": Image.fromarray(np.asarray(gray).astype(np.int32) * 100),
             "float.tif": Image.fromarray(np.asarray(gray).astype(np.float32) / 255), "gray.tif": gray}
    for name, image in names.items():
        image.save(tmp_path / name)
    # float32 TIFFs DALI decodes as PIL does: they go to DALI as they are
    assert [tiff_beyond_dali((tmp_path / n).read_bytes()) for n in names] == [True, True, False, False]
    files = [(str(tmp_path / n), i) for i, n in enumerate(names)]
    kit = load(None, backend, file_list=files, train=False, batch_size=4, size=32, dtype=torch.uint8)
    (x, y), = list(kit)
    assert y.tolist() == [0, 1, 2, 3] and not kit.skipped
    reference = load(None, "torch", file_list=files, train=False, batch_size=4, size=32, dtype=torch.uint8)
    (x_torch, _), = list(reference)
    # The same decoded pixels; resizing differs a little between the backends' kernels.
    assert (x.int() - x_torch.int()).abs().float().mean() < 3


def _break(path: Path, how: str) -> bytes:
    """Make the file at ``path`` unreadable ``how`` ("missing": renamed away, as in a network
    disk's hiccup; "truncated": its first third, as a copy still being written), or
    undecodable by DALI's decoder ("decoder": passes the byte checks); return its bytes."""
    data = path.read_bytes()
    if how == "missing":
        path.rename(path.with_name(path.name + ".away"))
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 3])
    else:
        path.write_bytes(impossible_huffman(data))
    return data


def _restore(path: Path, how: str, data: bytes) -> None:
    if how == "missing":
        path.with_name(path.name + ".away").rename(path)
    else:
        path.write_bytes(data)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["missing", "truncated", "decoder"])
@pytest.mark.parametrize("last_batch", ["partial", "fill"])
def test_a_file_bad_in_one_epoch_and_whole_in_the_next_is_read_again(tmp_path, backend, how, last_batch):
    """The DALI feed remembered a bad file for the loader's life: one missing or half-written
    in epoch 0 (a network disk's hiccup, a copy still running) stayed skipped, with its
    stale reason, in every later epoch, where the torch backend read it again."""
    root = generate_image_folder(tmp_path / "train", num_images=10, num_classes=2, seed=3, min_side=40,
                                 max_side=56)
    victim = sorted((root / "class_000").iterdir())[0]
    loader = load(root, backend, train=True, batch_size=4, size=16, last_batch=last_batch)
    data = _break(victim, how)  # after the scan: gone or cut short since
    counts, reports = [], []
    for epoch in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            labels = [y for _, y in loader]
        counts.append(sum(len(y) for y in labels))
        reports.append([os.path.basename(s.path) for s in loader.skipped])
        if epoch == 0:
            _restore(victim, how, data)
    full = 10 if last_batch == "partial" else 12  # fill: 3 full batches (the bad file's place taken)
    assert counts == [full - (last_batch == "partial"), full, full]
    assert reports == [[victim.name], [], []]


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
@pytest.mark.parametrize("how", ["missing", "truncated"])
def test_the_dali_iterator_reads_a_file_again_once_it_is_whole(tmp_path, how):
    """As the loader: the iterator's feed had skipped it for good. ``auto_reset=False``: with
    DALI's default auto reset the next epoch's first batches are read (prefetched) as soon
    as an epoch ends, before a loop's body could mend the file."""
    root = generate_image_folder(tmp_path / "train", num_images=10, num_classes=2, seed=3, min_side=40,
                                 max_side=56)
    victim = sorted((root / "class_000").iterdir())[0]
    loader = load(root, "dali", train=False, batch_size=4, size=16)
    data = _break(victim, how)
    it = loader.dali_iterator(auto_reset=False)
    counts, reports = [], []
    for epoch in range(3):
        counts.append(sum(len(d[0]["label"]) for d in it))
        reports.append([os.path.basename(s.path) for s in it.gpufeed_skipped.skipped])
        if epoch == 0:
            _restore(victim, how, data)
        it.reset()
    assert counts == [9, 10, 10]
    assert reports == [[victim.name], [], []]


@pytest.mark.skipif(not dali_installed(), reason="DALI not installed")
def test_a_file_dalis_decoder_failed_on_is_not_fed_again_while_unchanged(tmp_path, monkeypatch):
    """What the memory of bad files is for: each time DALI's decoder fails, the pipeline is
    rebuilt (about 2 s on a GPU). An unchanged file it failed on is not fed again; a
    replaced one is."""
    from gpufeed.pipelines import dali_loader

    root = generate_image_folder(tmp_path / "train", num_images=10, num_classes=2, seed=3, min_side=40,
                                 max_side=56)
    victim = sorted((root / "class_000").iterdir())[0]
    data = _break(victim, "decoder")
    builds = []
    real = dali_loader.build_pipeline
    monkeypatch.setattr(dali_loader, "build_pipeline", lambda *a, **k: builds.append(k) or real(*a, **k))
    loader = load(root, "dali", train=False, batch_size=4, size=16)
    counts = []
    for epoch in range(4):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            counts.append(sum(len(y) for _, y in loader))
        if epoch == 1:
            _restore(victim, "decoder", data)
    assert counts == [9, 9, 10, 10]
    feeds = [k for k in builds if k.get("batch_size") != 1]  # not the one-sample probe
    assert len(feeds) == 2  # the first pipeline and one rebuild, in epoch 0 only


def test_the_memory_of_bad_files_holds_while_the_file_is_unchanged(tmp_path):
    from gpufeed.pipelines.skips import FIXED, SkipLog, file_stamp

    path = tmp_path / "x.jpg"
    path.write_bytes(b"\xff\xd8 cut short")
    log = SkipLog("skip")
    log.add(str(path), "truncated JPEG", file_stamp(str(path), len(path.read_bytes())))
    assert log.known(str(path)) == "truncated JPEG"
    log.add(str(path), "truncated JPEG")  # listed again: the stamp is kept
    assert log.known(str(path)) == "truncated JPEG"
    path.write_bytes(b"\xff\xd8 cut short")  # rewritten with the same bytes: another version
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 10**9))  # (a clock of coarse ticks: later still)
    assert log.known(str(path)) is None and log.known(str(path)) is None  # forgotten: read it again
    # read while it grew (a copy still running): what was judged is not this version
    assert file_stamp(str(path), 3) is None and file_stamp(str(tmp_path / "gone.jpg")) is None
    log.add(str(tmp_path / "gone.jpg"), "could not read: No such file or directory")  # a failed read
    assert log.known(str(tmp_path / "gone.jpg")) is None
    log.add("a.tar:key", "not an image", FIXED)  # a shard member or a cached copy: bytes fixed
    assert log.known("a.tar:key") == "not an image"
    assert [s.path for s in log.skipped] == [str(path), str(tmp_path / "gone.jpg"), "a.tar:key"]
