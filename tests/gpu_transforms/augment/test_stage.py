"""The augmentation stage as a whole: randomness, replay, dtypes, mixing, bad input."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from gpufeed.gpu_transforms.augment import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ColorJitter,
    CutMix,
    GaussianBlur,
    GpuAugment,
    MixUp,
    Normalize,
    RandomAffine,
    RandomErasing,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomPerspective,
    RandomPosterize,
    RandomResizedCrop,
    RandomRotation,
    RandomSolarize,
)
from gpufeed.gpu_transforms.augment.params import BETA_UNIFORMS, beta, keyed_normal
from gpufeed.gpu_transforms.augment.photometric import box_mask


def u8(b: int = 6, h: int = 40, w: int = 48, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (b, 3, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def recipe(**kw) -> GpuAugment:
    return GpuAugment([RandomResizedCrop(32), RandomHorizontalFlip(), RandomAffine(10, scale=(0.9, 1.1)),
                       ColorJitter(0.4, 0.4, 0.4, 0.1), GaussianBlur(3, p=0.5), RandomGrayscale(0.2),
                       RandomErasing(0.5), Normalize(IMAGENET_MEAN, IMAGENET_STD)], **kw)


def test_each_sample_gets_its_own_parameters():
    stage = recipe(seed=0)
    stage(u8(8))
    crop, _, affine, jitter = stage.last_params.per_op[:4]
    assert len({tuple(r) for r in crop["box"].tolist()}) == 8
    assert len(set(affine["angle"].tolist())) == 8
    assert len(set(jitter["brightness"].tolist())) == 8


def test_same_on_batch_shares_parameters_and_output():
    stage = recipe(seed=0, same_on_batch=True)
    x = u8(1).expand(5, -1, -1, -1).contiguous()
    out = stage(x)
    for p in stage.last_params.per_op:
        for v in p.values():
            assert (v == v[:1]).all()
    # Equal up to float rounding: with many cores the batch is split into chunks run on
    # different threads, and a chunk's vector width can change the last bit (seen on 16 cores).
    torch.testing.assert_close(out, out[:1].expand_as(out), rtol=1e-5, atol=1e-5)


def test_replay_is_bit_for_bit_and_new_calls_differ():
    stage = recipe(seed=1)
    x = u8()
    first = stage(x)
    params = stage.last_params
    second = stage(x)
    assert not torch.equal(first, second)
    assert torch.equal(stage(x, params=params), first)


def test_seed_makes_runs_repeatable_and_seeds_differ():
    x = u8()
    assert torch.equal(recipe(seed=3)(x), recipe(seed=3)(x))
    assert not torch.equal(recipe(seed=3)(x), recipe(seed=4)(x))
    torch.manual_seed(11)
    a = recipe()(x)
    torch.manual_seed(11)
    assert torch.equal(a, recipe()(x))


def test_pickled_stage_restarts_from_its_seed():
    stage = recipe(seed=5)
    x = u8()
    copy = pickle.loads(pickle.dumps(stage))
    assert torch.equal(copy(x), recipe(seed=5)(x))


def test_input_is_not_modified():
    x = u8()
    f = x.float() / 255
    before_x, before_f = x.clone(), f.clone()
    recipe(seed=0)(x)
    recipe(seed=0)(f)
    assert torch.equal(x, before_x) and torch.equal(f, before_f)


def test_uint8_and_float_paths_agree():
    x = u8()
    a = recipe(seed=2)(x)
    b = recipe(seed=2)(x.float() / 255)
    c = recipe(seed=2, value_range=(0, 255))(x.float())
    assert torch.equal(a, b)
    torch.testing.assert_close(a, c, atol=1e-5, rtol=0)


def test_output_dtypes_and_ranges():
    ops = [RandomRotation(20), ColorJitter(0.3, 0.3, 0.3, 0.05)]
    x = u8()
    out = GpuAugment(ops, seed=0)(x)
    assert out.dtype == torch.uint8 and out.shape == x.shape
    as_float = GpuAugment(ops, seed=0, output_dtype=torch.float32)(x)
    assert as_float.dtype == torch.float32 and as_float.min() >= 0 and as_float.max() <= 1
    assert torch.equal(out, (as_float * 255).round().to(torch.uint8))
    big = GpuAugment(ops, seed=0, value_range=(0, 255))(x.float())
    assert big.max() > 1.5 and big.max() <= 255
    half = GpuAugment([*ops, Normalize(IMAGENET_MEAN, IMAGENET_STD)], seed=0, output_dtype=torch.float16)(x)
    assert half.dtype == torch.float16


def test_fill_value_outside_the_image():
    x = torch.ones(2, 3, 20, 20) * 0.5
    out = GpuAugment([RandomAffine(0, translate=(0.5, 0.5), p=1.0)], seed=0, fill=1.0)(x)
    near_fill, near_image = (out - 1.0).abs() < 1e-5, (out - 0.5).abs() < 1e-5
    assert (near_fill | near_image).all() and near_fill.any() and near_image.any()


def test_mixup_blends_images_and_labels_alike():
    x = u8(8).float() / 255
    labels = torch.arange(8) % 4
    stage = GpuAugment([MixUp(num_classes=4, alpha=0.4)], seed=0)
    out, soft = stage(x, labels)
    mixp = stage.last_params.mix
    lam, perm = mixp["lam"], mixp["perm"]
    assert soft.shape == (8, 4) and soft.dtype == torch.float32
    torch.testing.assert_close(soft.sum(1), torch.ones(8))
    expected = lam.view(-1, 1, 1, 1) * x + (1 - lam.view(-1, 1, 1, 1)) * x[perm]
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    for i in range(8):
        ref = torch.zeros(4)
        ref[labels[i]] += lam[i]
        ref[labels[perm[i]]] += 1 - lam[i]
        torch.testing.assert_close(soft[i], ref)


def test_cutmix_label_weight_is_the_kept_area():
    x = torch.zeros(8, 3, 32, 32)
    x[:, :, :, :] = torch.arange(8).view(8, 1, 1, 1).float() / 8
    stage = GpuAugment([CutMix(num_classes=8, alpha=1.0)], seed=1)
    out, soft = stage(x, torch.arange(8))
    perm = stage.last_params.mix["perm"]
    for i in range(8):
        own = (out[i, 0] == x[i, 0, 0, 0]).float().mean()
        if perm[i] != i:
            torch.testing.assert_close(soft[i, i], own)


def test_mixup_and_cutmix_together_choose_per_sample():
    stage = GpuAugment([MixUp(num_classes=3), CutMix(num_classes=3)], seed=0)
    stage(u8(16), torch.zeros(16, dtype=torch.long))
    use_box = stage.last_params.mix["use_box"]
    assert 0 < int(use_box.sum()) < 16


def test_beta_sampler_moments():
    u = torch.rand(40000, BETA_UNIFORMS, generator=torch.Generator().manual_seed(0))
    for alpha in (0.2, 1.0, 2.0):
        s = beta(u, alpha)
        assert s.min() >= 0 and s.max() <= 1
        assert abs(s.mean() - 0.5) < 0.01
        assert abs(s.var() - 1 / (4 * (2 * alpha + 1))) < 0.01


@pytest.mark.parametrize("make, match", [
    (lambda: GpuAugment([ColorJitter(0.2), RandomResizedCrop(8)]), "geometric op after a pixel op"),
    (lambda: GpuAugment([Normalize((0.5,), (0.5,)), ColorJitter(0.2)]), "Normalize must be the last"),
    (lambda: GpuAugment([MixUp(3), ColorJitter(0.2)]), "pixel op after a mix op"),
    (lambda: GpuAugment([MixUp(3), CutMix(4)]), "same num_classes"),
    (lambda: GpuAugment([RandomRotation(5)], value_range=(0, 2)), "value_range"),
    (lambda: GpuAugment([Normalize((0.5,), (0.5,))], output_dtype=torch.uint8), "uint8"),
    (lambda: GpuAugment(["flip"]), "ops\\[0\\]"),
    (lambda: RandomResizedCrop(0), "size"),
    (lambda: RandomResizedCrop(8, scale=(0.9, 0.1)), "scale"),
    (lambda: RandomHorizontalFlip(p=1.5), "p must be"),
    (lambda: ColorJitter(brightness=-1), "brightness"),
    (lambda: ColorJitter(hue=0.7), "hue"),
    (lambda: GaussianBlur(4), "kernel_size"),
    (lambda: Normalize((0.5, 0.5), (0.5,)), "same non-zero length"),
    (lambda: Normalize((0.5,), (0.0,)), "std"),
    (lambda: MixUp(num_classes=0), "num_classes"),
    (lambda: MixUp(num_classes=3, alpha=0), "alpha"),
    (lambda: RandomAffine(0, translate=(2, 0)), "translate"),
    # DALI-style 0..255 values turned every pixel into about -2.1, silently.
    (lambda: Normalize([123.675, 116.28, 103.53], [58.395, 57.12, 57.375]), "divide DALI-style 0..255 values by 255"),
    # A negative single number was silently made positive; torchvision raises.
    (lambda: RandomRotation(-10), "degrees must be non-negative when it is a single number"),
    (lambda: ColorJitter(hue=-0.1), "hue must be non-negative when it is a single number"),
    (lambda: RandomAffine(0, shear=-10), "shear must be non-negative when it is a single number"),
    (lambda: ColorJitter(brightness=-0.1), "brightness must be non-negative when it is a single number"),
    # Python internals leaked out instead of the argument's name.
    (lambda: RandomAffine(0, translate=0.1), r"translate must be a \(fx, fy\) pair"),
    (lambda: RandomAffine(0, translate=("a", "b")), r"translate must be a \(fx, fy\) pair"),
    (lambda: Normalize(0.5, 0.5), "mean must be one number per channel"),
    (lambda: GpuAugment([], mask_fill="a"), "mask_fill must be a finite number"),
    (lambda: GpuAugment([], min_box_size="a"), "min_box_size must be a finite number"),
    (lambda: GpuAugment(RandomHorizontalFlip()), "ops must be a list of augmentation ops"),
    # Accepted, then a cryptic "Overflow when unpacking long long" on the first batch.
    (lambda: GpuAugment([RandomHorizontalFlip()], seed=2**64), r"seed must be in \[0, 2\*\*64\)"),
    (lambda: GpuAugment([RandomHorizontalFlip()], seed=-1), "seed must be in"),
    # numpy values that are not what the argument takes name it (np.array(224) failed on len()).
    (lambda: RandomResizedCrop(np.array([[24, 24]])), "size must be a positive int"),
    (lambda: RandomResizedCrop(np.float64(24)), "size must be a positive int"),
    (lambda: GaussianBlur(np.array(4)), "kernel_size must be a positive odd int"),
    (lambda: GaussianBlur(np.float32(3)), "kernel_size must be a positive odd int"),
    (lambda: RandomPosterize(np.int64(9)), r"bits must be an int in \[1, 8\]"),
    (lambda: MixUp(num_classes=np.array(0)), "num_classes must be a positive int"),
    (lambda: CutMix(num_classes=np.float64(10)), "num_classes must be a positive int"),
    (lambda: GpuAugment([], chunk_size=np.float64(8)), "chunk_size must be None or a positive int"),
    (lambda: GpuAugment([], chunk_size=True), "chunk_size must be None or a positive int"),
    (lambda: GpuAugment([], seed=np.float64(1)), "seed must be an int"),
    (lambda: Normalize(np.array(0.5), np.array(0.5)), "mean must be one number per channel"),
])
def test_bad_config_is_refused_in_the_constructor(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


@pytest.mark.parametrize("images, match", [
    (torch.zeros(3, 8, 8), "B, C, H, W"),
    (torch.zeros(2, 3, 8, 8, dtype=torch.int32), "dtype"),
    (torch.zeros(0, 3, 8, 8), "empty batch"),
    (torch.zeros(2, 8, 8, 3), "channels-last"),
    (torch.full((2, 3, 8, 8), 200.0), "0..255"),
    (torch.full((2, 3, 8, 8), -1.5), "already normalised"),
    (torch.full((2, 3, 8, 8), float("nan")), "NaN"),
    (torch.full((2, 3, 8, 8), float("inf")), "inf"),
    (torch.zeros(2, 2, 8, 8), "ColorJitter needs 1 or 3"),
    ("not a tensor", "torch.Tensor"),
])
def test_bad_images_are_refused_with_a_clear_error(images, match):
    stage = GpuAugment([RandomRotation(5), ColorJitter(0.1, 0.1, 0.1, 0.1)], seed=0)
    with pytest.raises((ValueError, TypeError), match=match):
        stage(images)


def test_bad_labels_and_device_mismatch_are_refused():
    stage = GpuAugment([MixUp(num_classes=3)], seed=0)
    x = u8(4)
    with pytest.raises(ValueError, match="labels are required"):
        stage(x)
    with pytest.raises(ValueError, match="labels must have shape"):
        stage(x, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="num_classes=3"):
        stage(x, torch.tensor([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="labels is on meta"):
        stage(x, torch.zeros(4, dtype=torch.long, device="meta"))


def test_replay_with_mismatching_params_is_refused():
    stage = recipe(seed=0)
    stage(u8(4))
    with pytest.raises(ValueError, match="batch of 4"):
        stage(u8(5), params=stage.last_params)
    with pytest.raises(ValueError, match="other ops"):
        GpuAugment([RandomRotation(3)])(u8(4), params=stage.last_params)
    with pytest.raises(TypeError, match="AugmentParams"):
        stage(u8(4), params={"angle": 3})


def test_labels_pass_through_without_mixing():
    labels = torch.arange(6)
    out, lab = recipe(seed=0)(u8(), labels)
    assert lab is labels and out.shape == (6, 3, 32, 32)


def test_every_op_runs_on_a_single_channel_batch():
    x = torch.rand(3, 1, 24, 24)
    out = GpuAugment([RandomPerspective(p=1.0), GaussianBlur(3), ColorJitter(0.3, 0.3),
                      Normalize((0.5,), (0.25,))], seed=0)(x)
    assert out.shape == x.shape and torch.isfinite(out).all()


@pytest.mark.parametrize("make", [
    lambda chunk: recipe(seed=0, chunk_size=chunk),
    lambda chunk: GpuAugment([RandomHorizontalFlip(), ColorJitter(0.2, 0.2), CutMix(3), MixUp(3)], seed=0,
                             chunk_size=chunk),
])
@pytest.mark.parametrize("chunk", [1, 4])
def test_cache_sized_chunks_give_the_whole_batch_result(make, chunk):
    x, labels = u8(6), torch.tensor([0, 1, 2, 0, 1, 2])
    whole, parts = make(6), make(chunk)
    a, la = whole(x, labels)
    b, lb = parts(x, labels)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert torch.equal(la, lb)
    with pytest.raises(ValueError, match="chunk_size"):
        make(0)


def test_cpu_chunks_restore_the_torch_thread_setting():
    before = torch.get_num_threads()
    recipe(seed=0, chunk_size=1)(u8(4))
    assert torch.get_num_threads() == before


def test_ops_declare_their_traits_and_the_stage_needs_no_edit_for_new_ones():
    # The three bases a user's op subclasses come from the package, as docs/augment.md says.
    from gpufeed.gpu_transforms.augment import GeometricOp, MixOp, Op

    assert GeometricOp.__module__.endswith(".geometric") and issubclass(GeometricOp, Op)

    class HalfMix(MixOp):  # a new mixing op: blends every sample half and half with its partner
        def sample(self, u, size):
            return {"lam": torch.full((u.shape[0],), 0.5), "box": torch.zeros(u.shape[0], 4)}

    class Standardize(Op):  # a new pixel op that leaves values unbounded, like Normalize
        output_range = None
        channels = 3

        def apply(self, x, params):
            return (x - 0.5) * 4

    x, labels = u8(8).float() / 255, torch.arange(8) % 2
    stage = GpuAugment([HalfMix(num_classes=2)], seed=0)
    out, soft = stage(x, labels)
    torch.testing.assert_close(out, 0.5 * x + 0.5 * x[stage.last_params.mix["perm"]])
    torch.testing.assert_close(soft.sum(1), torch.ones(8))
    both = GpuAugment([HalfMix(2), MixUp(2)], seed=0)
    both(u8(16), torch.zeros(16, dtype=torch.long))
    assert {round(v, 3) for v in both.last_params.mix["lam"].tolist()} != {0.5}  # MixUp picked for some
    with pytest.raises(ValueError, match="HalfMix and MixUp must have the same num_classes"):
        GpuAugment([HalfMix(2), MixUp(3)])
    with pytest.raises(ValueError, match="Standardize must be the last pixel op"):
        GpuAugment([Standardize(), ColorJitter(0.2)])
    with pytest.raises(ValueError, match="drop Standardize"):
        GpuAugment([Standardize()], output_dtype=torch.uint8)
    with pytest.raises(ValueError, match="Standardize needs 3"):
        GpuAugment([Standardize()])(torch.rand(2, 1, 8, 8))
    assert GpuAugment([Standardize()], seed=0)(u8()).dtype == torch.float32  # unbounded: float out


def test_a_geometric_op_applied_alone_matches_the_stage():
    x = u8().float() / 255
    for op in (RandomRotation(30), RandomResizedCrop(24), RandomPerspective(p=1.0)):
        stage = GpuAugment([op], seed=0)
        expected = stage(x)
        torch.testing.assert_close(op.apply(x, stage.last_params.per_op[0]), expected, atol=1e-5, rtol=0)


@pytest.mark.gpu
def test_cpu_and_cuda_agree_given_the_same_parameters():
    x = u8(8)
    cpu = recipe(seed=0)
    expected = cpu(x)
    gpu = recipe(seed=0)
    got = gpu(x.cuda(), params=cpu.last_params.to("cuda"))
    assert got.device.type == "cuda"
    torch.testing.assert_close(got.cpu(), expected, atol=1e-3, rtol=0)
    replay = gpu(x.cuda(), params=gpu.last_params)
    assert torch.equal(replay, got)
    sampled = gpu(x.cuda())
    assert gpu.last_params.device.type == "cuda" and sampled.shape == expected.shape


class _Augmented:
    """A collate_fn running a stage in DataLoader workers (picklable, for the forkserver)."""

    def __init__(self, stage: GpuAugment) -> None:
        self.stage = stage

    def __call__(self, images: list[torch.Tensor]) -> torch.Tensor:
        return self.stage(torch.stack(images))


def test_an_unseeded_stage_in_dataloader_workers_draws_per_worker_streams():
    """Drawn once when the stage was built, the seed made every worker repeat the same
    augmentations (torchvision's transforms differ per worker)."""
    from torch.utils.data import DataLoader

    stage = GpuAugment([RandomResizedCrop(8), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4, 0.1)])
    data = [torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8)] * 8  # one image: only the draws differ

    def epoch(seed: int) -> list[torch.Tensor]:
        torch.manual_seed(seed)  # the DataLoader's per-worker seeds come from it
        return list(DataLoader(data, batch_size=4, num_workers=2, collate_fn=_Augmented(stage),
                               multiprocessing_context="forkserver"))

    first, again = epoch(0), epoch(0)
    assert not torch.equal(first[0], first[1])  # workers 0 and 1
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))  # repeatable under manual_seed


@pytest.mark.parametrize("channels", [2, 4])
def test_contrast_on_a_batch_without_a_luma_is_refused_by_name(channels):
    """Contrast takes 1 or 3 channels, as in torchvision; 4 failed inside a matrix product."""
    with pytest.raises(ValueError, match=f"images has {channels} channels but ColorJitter needs 1 or 3"):
        GpuAugment([ColorJitter(contrast=0.4)], seed=0)(torch.randint(0, 256, (2, channels, 8, 8), dtype=torch.uint8))
    for ok in (1, 3):
        assert GpuAugment([ColorJitter(contrast=0.4)], seed=0)(torch.zeros(2, ok, 8, 8, dtype=torch.uint8)).shape[1] == ok


def test_a_stage_pickled_before_per_worker_streams_still_runs():
    stage = GpuAugment([RandomHorizontalFlip()], seed=0)
    state = stage.__getstate__()
    for name in ("_per_worker", "_worker_seed"):  # what an older build's pickle lacks
        state.pop(name)
    old = GpuAugment.__new__(GpuAugment)
    old.__setstate__(state)
    images = u8()
    assert torch.equal(old(images), GpuAugment([RandomHorizontalFlip()], seed=0)(images))


@pytest.mark.parametrize("make, match", [
    (lambda: RandomSolarize(128), r"threshold must be in \[0, 1\] pixel units.*pass 0.502"),
    (lambda: RandomErasing(value="noise"), "value must be a number, one number per channel, or 'random'"),
    (lambda: GpuAugment([], fill=(0.5, 0.5, 0.5)), r"fill must be a number in \[0, 1\] \(pixel units\)"),
    (lambda: RandomPerspective(distortion_scale=1.5), "distortion_scale must be a number in"),
])
def test_values_that_are_not_probabilities_are_not_called_one(make, match):
    with pytest.raises((ValueError, TypeError), match=match) as info:
        make()
    assert "probability" not in str(info.value)


@pytest.mark.parametrize(("make", "error"), [
    (lambda: RandomResizedCrop(224.0), TypeError),
    (lambda: RandomResizedCrop((224.0, 224)), TypeError),
    (lambda: RandomPerspective(None), TypeError),
    (lambda: RandomHorizontalFlip(p="0.5"), TypeError),
    (lambda: RandomSolarize("0.5"), TypeError),
    (lambda: GpuAugment([], fill="0"), TypeError),
    (lambda: RandomResizedCrop(0), ValueError),
    (lambda: RandomResizedCrop((24, 24, 3)), ValueError),
    (lambda: RandomHorizontalFlip(p=1.5), ValueError),
    (lambda: RandomSolarize(2.0), ValueError),
])
def test_a_value_of_the_wrong_kind_is_a_type_error_and_one_out_of_range_a_value_error(make, error):
    # As docs/augment.md says (and torchvision does): "3.0 for an int" is a TypeError.
    with pytest.raises(error):
        make()


def test_numpy_scalars_are_taken_like_python_numbers():
    """Values read from numpy-based configs: p=np.float32(0.5) was refused as "not a
    probability in [0, 1]", size=np.int64(224) as "not a positive int"."""
    x = u8()
    for numpy_ops, python_ops in (
        ([RandomResizedCrop(np.int64(24), scale=(np.float32(0.5), 1.0)), RandomHorizontalFlip(p=np.float32(0.5))],
         [RandomResizedCrop(24, scale=(0.5, 1.0)), RandomHorizontalFlip(p=0.5)]),
        ([RandomRotation(np.float64(10.0), p=np.float32(1.0)), GaussianBlur(np.int64(3)), RandomSolarize(np.float32(0.5))],
         [RandomRotation(10.0, p=1.0), GaussianBlur(3), RandomSolarize(0.5)]),
        ([ColorJitter(np.float32(0.25), hue=np.float64(0.1)), Normalize(np.array(IMAGENET_MEAN), np.array(IMAGENET_STD))],
         [ColorJitter(0.25, hue=0.1), Normalize(IMAGENET_MEAN, IMAGENET_STD)]),
    ):
        assert torch.equal(GpuAugment(numpy_ops, seed=0)(x), GpuAugment(python_ops, seed=0)(x))


def test_numpy_integers_and_0d_arrays_are_taken_wherever_an_int_is():
    """The docs promise numpy scalars everywhere: chunk_size=np.int64(8) and MixUp/CutMix
    num_classes=np.int64(10) were refused, RandomResizedCrop(np.array(224)) raised
    "TypeError: len() of unsized object"; one shared integer check now takes them all."""
    x, labels = u8(), torch.tensor([0, 1, 2, 0, 1, 2])
    numpy_stage = GpuAugment([RandomResizedCrop(np.array(24)), GaussianBlur(np.array(3)), RandomPosterize(np.int8(4)),
                              RandomErasing(p=np.array(0.5), value=np.float32(0.0)), CutMix(np.int64(3)),
                              MixUp(np.int32(3), alpha=np.float32(0.5))],
                             seed=np.uint64(5), chunk_size=np.int64(2))
    python_stage = GpuAugment([RandomResizedCrop(24), GaussianBlur(3), RandomPosterize(4),
                               RandomErasing(p=0.5, value=0.0), CutMix(3), MixUp(3, alpha=float(np.float32(0.5)))],
                              seed=5, chunk_size=2)
    assert numpy_stage.chunk_size == 2 and type(numpy_stage.chunk_size) is int
    assert type(numpy_stage.ops[-1].num_classes) is int and numpy_stage.ops[0].size == (24, 24)
    a, la = numpy_stage(x, labels)
    b, lb = python_stage(x, labels)
    assert torch.equal(a, b) and torch.equal(la, lb)


def test_a_seeded_stage_in_dataloader_workers_differs_per_worker_and_epoch_yet_repeats():
    """seed=0 made both workers draw the same parameters and every epoch repeat the first:
    workers start from the main process's copy of the stage. Now, as torchvision's
    transforms under torch.manual_seed: repeatable run to run, different per worker and epoch."""
    from torch.utils.data import DataLoader

    data = [torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8)] * 8  # one image: only the draws differ

    def run(stage_seed: int, torch_seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        stage = GpuAugment([RandomResizedCrop(8), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4, 0.1)],
                           seed=stage_seed)
        torch.manual_seed(torch_seed)  # the DataLoader's per-worker seeds come from it
        loader = DataLoader(data, batch_size=4, num_workers=2, collate_fn=_Augmented(stage),
                            multiprocessing_context="forkserver")
        first, second = list(loader), list(loader)
        assert stage.has_own_seed and stage.seed == stage_seed  # the main process's stage is left as it was
        return first, second

    epoch1, epoch2 = run(0, 0)
    assert not torch.equal(epoch1[0], epoch1[1])  # workers 0 and 1
    assert not any(torch.equal(a, b) for a, b in zip(epoch1, epoch2, strict=True))  # epoch 2 is new
    again1, again2 = run(0, 0)
    assert all(torch.equal(a, b) for a, b in zip(epoch1 + epoch2, again1 + again2, strict=True))  # repeatable
    other, _ = run(1, 0)  # the stage's seed still matters
    assert not any(torch.equal(a, b) for a, b in zip(epoch1, other, strict=True))


def test_a_seed_set_inside_a_worker_is_used_as_given(monkeypatch):
    """A seed chosen in the worker (worker_init_fn) is the caller's per-worker seed: not mixed again."""
    from types import SimpleNamespace

    from torch.utils.data import _utils

    x = u8()
    expected = GpuAugment([ColorJitter(0.4)], seed=5)(x)
    in_worker = SimpleNamespace(id=0, num_workers=2, seed=1234, dataset=None)
    monkeypatch.setattr(_utils.worker, "_worker_info", in_worker)
    assert torch.equal(GpuAugment([ColorJitter(0.4)], seed=5)(x), expected)  # made in the worker
    monkeypatch.setattr(_utils.worker, "_worker_info", None)
    made_before = GpuAugment([ColorJitter(0.4)], seed=5)
    monkeypatch.setattr(_utils.worker, "_worker_info", in_worker)
    assert not torch.equal(made_before(x), expected)  # copied into a worker: mixed with the worker's seed


def test_saturation_hue_and_grayscale_leave_a_single_channel_batch_as_torchvision_does():
    """torchvision v2 (like PIL) makes saturation and hue no-ops on one channel and keeps a
    1-channel image as it is under RandomGrayscale; the stage refused both."""
    x = torch.randint(0, 256, (5, 1, 12, 12), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    assert torch.equal(GpuAugment([ColorJitter(saturation=0.9, hue=0.4), RandomGrayscale(1.0)], seed=0)(x), x)
    # Brightness and contrast still apply, with the very parameters the full jitter draws.
    full = GpuAugment([ColorJitter(0.4, 0.4, 0.9, 0.4)], seed=0)(x)
    assert not torch.equal(full, x)
    assert torch.equal(full, GpuAugment([ColorJitter(0.4, 0.4)], seed=0)(x))
    with pytest.raises(ValueError, match="images has 2 channels but RandomGrayscale needs 1 or 3"):
        GpuAugment([RandomGrayscale(1.0)], seed=0)(torch.zeros(2, 2, 8, 8))


def test_erasing_after_normalize_paints_the_mean_colour_as_torchvisions_recipe_does():
    """[..., Normalize, RandomErasing] (torchvision's and timm's ImageNet recipe) was refused."""
    import torchvision.transforms.v2.functional as TF

    x = u8()
    stage = GpuAugment([Normalize(IMAGENET_MEAN, IMAGENET_STD), RandomErasing(p=1.0)], seed=0)
    out = stage(x)
    normalised = TF.normalize(x.float() / 255, list(IMAGENET_MEAN), list(IMAGENET_STD))
    for i, (left, top, w, h) in enumerate(stage.last_params.per_op[1]["box"].long().tolist()):
        assert w > 0 and h > 0
        ref = TF.erase(normalised[i], top, left, h, w, torch.tensor(0.0))  # 0 = the mean colour
        torch.testing.assert_close(out[i], ref, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="Normalize must be the last pixel op: ColorJitter after it"):
        GpuAugment([Normalize(IMAGENET_MEAN, IMAGENET_STD), ColorJitter(0.4)])


def test_erasing_takes_a_per_channel_value_and_random_noise_like_torchvision():
    x = u8()
    mean = (0.485, 0.456, 0.406)
    stage = GpuAugment([RandomErasing(p=1.0, value=mean)], seed=0)
    out = stage(x.float() / 255)
    left, top, w, h = stage.last_params.per_op[0]["box"][0].long().tolist()
    assert torch.equal(out[0, :, top:top + h, left:left + w],
                       torch.tensor(mean).view(3, 1, 1).expand(3, h, w))
    with pytest.raises(ValueError, match="images has 1 channels but RandomErasing needs 3"):
        stage(torch.zeros(2, 1, 8, 8))
    with pytest.raises(ValueError, match=r"value must be in \[0, 1\] pixel units before Normalize"):
        GpuAugment([RandomErasing(value=2.0), Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    with pytest.raises(ValueError, match=r"value='random'\) fills with standard-normal noise.*put it after Normalize"):
        GpuAugment([RandomErasing(value="random")])

    noisy = GpuAugment([Normalize(IMAGENET_MEAN, IMAGENET_STD), RandomErasing(p=1.0, scale=(0.3, 0.33),
                                                                              value="random")], seed=0)
    big = u8(4, 64, 64)
    out = noisy(big)
    clean = Normalize(IMAGENET_MEAN, IMAGENET_STD).apply(big.float() / 255, {})
    inside = torch.zeros_like(out, dtype=torch.bool)
    for i, (left, top, w, h) in enumerate(noisy.last_params.per_op[1]["box"].long().tolist()):
        inside[i, :, top:top + h, left:left + w] = True
    torch.testing.assert_close(out[~inside], clean[~inside], atol=1e-6, rtol=0)
    noise = out[inside]
    assert abs(noise.mean().item()) < 0.05 and abs(noise.std().item() - 1.0) < 0.05  # standard normal
    assert not torch.equal(out[0][inside[0]][:100], out[1][inside[1]][:100])  # per-sample noise
    assert torch.equal(noisy(big, params=noisy.last_params), out)  # replayed bit for bit
    chunked = GpuAugment(noisy.ops, seed=0, chunk_size=1)
    assert torch.equal(chunked(big), out)


@pytest.mark.parametrize("chunk", [1, 3])
def test_random_erasing_noise_is_only_computed_where_erased_yet_equals_the_whole_batch_noise(chunk):
    """The noise was hashed for every pixel of every sample whatever p or the box (3.5x the
    cost of value=0 at p=0.25). On a CPU it is now hashed for the erased pixels only: each
    value is still the pure function of the sample's key and the pixel's index, so a
    chunked run and a replay equal the whole-batch noise bit for bit."""
    ops = [Normalize(IMAGENET_MEAN, IMAGENET_STD), RandomErasing(p=0.5, scale=(0.05, 0.2), value="random")]
    x = u8(7, 37, 43)  # odd sizes: the erased pixels fall at any offset of a vector
    whole = GpuAugment(ops, seed=1)
    out = whole(x)
    params = whole.last_params
    box, key = params.per_op[1]["box"], params.per_op[1]["noise_key"]
    erased = (box[:, 2] * box[:, 3] > 0).tolist()
    assert any(erased) and not all(erased)
    # The whole batch's noise as a GPU computes it: every pixel, then the boxes kept.
    clean = Normalize(IMAGENET_MEAN, IMAGENET_STD).apply(x.float() / 255, {})
    dense = torch.where(box_mask(box, (37, 43)), keyed_normal(key, (3, 37, 43)), clean)
    assert torch.equal(out, dense)
    assert torch.equal(GpuAugment(ops, seed=1, chunk_size=chunk)(x), out)
    assert torch.equal(whole(x, params=params), out)
