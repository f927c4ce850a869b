"""What a folder or a file list names as samples and labels, against torchvision's
ImageFolder and DALI's file-list format."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from gpufeed.pipelines.sources import open_source, read_file_list, scan_image_folder
from tests.pipelines.test_loader_contract import BACKENDS


def _jpeg(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (200, 10, 10)).save(path)


def test_a_hidden_folder_holding_images_is_a_class_as_in_imagefolder(tmp_path):
    """Labels must be ImageFolder's class_to_idx: leaving a hidden class out shifted every
    later label against a model trained with torchvision."""
    from torchvision.datasets import ImageFolder

    for name in (".hidden/x.jpg", "a/x.jpg", "b/x.jpg", "b/y.jpg"):
        _jpeg(tmp_path / name)
    with pytest.warns(UserWarning, match=r"\.hidden hold images and are classes.*labels 0"):
        samples = scan_image_folder(tmp_path)
    reference = ImageFolder(tmp_path)
    assert list(samples.classes) == list(reference.classes) == [".hidden", "a", "b"]
    assert [(p, y) for p, y in zip(samples.paths, samples.labels, strict=True)] == reference.samples


def test_a_hidden_folder_without_images_is_left_out_and_said(tmp_path):
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "notes-checkpoint.ipynb").write_text("{}")
    for name in ("a/x.jpg", "b/x.jpg"):
        _jpeg(tmp_path / name)
    with pytest.warns(UserWarning, match=r"\.ipynb_checkpoints hold no image and are left out"):
        samples = scan_image_folder(tmp_path)
    assert samples.classes == ("a", "b") and list(samples.labels) == [0, 1]
    assert samples.ignored == 0  # the checkpoint file is not counted as a left-out image


def test_a_file_list_line_starting_with_hash_is_a_file_as_in_dali(tmp_path):
    for name in ("#top.jpg", "b.jpg"):
        _jpeg(tmp_path / name)
    listing = tmp_path / "list.txt"
    listing.write_text("#top.jpg 0\n\nb.jpg 1\n")
    samples = read_file_list(listing)
    assert [Path(p).name for p in samples.paths] == ["#top.jpg", "b.jpg"] and list(samples.labels) == [0, 1]


def test_path_label_pairs_given_as_source_point_to_file_list(tmp_path):
    _jpeg(tmp_path / "a.jpg")
    with pytest.raises(ValueError, match=r"\(path, label\) pairs.*file_list="):
        open_source([(str(tmp_path / "a.jpg"), 0)])
    assert len(open_source(tmp_path, file_list=[("a.jpg", 0)])) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_loader_dataset_has_imagefolders_attributes_with_its_meanings(image_folder, backend):
    """The README sends code written for ImageFolder to ``loader.dataset`` (labels are its
    ``class_to_idx``): a checkpoint's index-to-class map, class weights and a
    WeightedRandomSampler read ``class_to_idx``, ``targets`` and ``samples``; each raised
    AttributeError."""
    import pickle

    from torchvision.datasets import ImageFolder

    from gpufeed.pipelines import classification_loader

    reference = ImageFolder(image_folder)
    loader = classification_loader(image_folder, train=False, batch_size=8, size=16, backend=backend,
                                   device="cpu", num_workers=0 if backend == "torch" else 1)
    dataset = loader.dataset
    assert loader.class_to_idx == dataset.class_to_idx == reference.class_to_idx
    assert type(dataset.targets) is list and dataset.targets == reference.targets
    assert all(type(t) is int for t in dataset.targets)
    assert dataset.samples == dataset.imgs == reference.samples == reference.imgs
    assert all(type(s) is tuple for s in dataset.samples)
    # computed once; a pickle for DataLoader workers leaves them out, and its copy has them too
    assert dataset.targets is dataset.targets
    copy = pickle.loads(pickle.dumps(dataset))
    assert "samples" not in copy.__dict__ and copy.samples == reference.samples


def test_a_file_lists_dataset_has_them_too(tmp_path):
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        _jpeg(tmp_path / name)
    samples = read_file_list([("a.jpg", 2), ("b.jpg", 0), ("c.jpg", 2)], tmp_path)
    assert samples.class_to_idx == {"0": 0, "1": 1, "2": 2}
    assert samples.targets == [2, 0, 2]
    assert samples.samples == [(str(tmp_path / n), y) for n, y in (("a.jpg", 2), ("b.jpg", 0), ("c.jpg", 2))]
