"""The augmentation stage: per-sample random augmentation of a batch, on its own device."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpufeed.gpu_transforms.augment import checks
from gpufeed.gpu_transforms.augment.chunks import ChunkRunner, chunk_parts
from gpufeed.gpu_transforms.augment.geometric import (
    Window,
    apply_flips,
    compose,
    crop_windows,
    fill_outside,
    only_flips,
    warp,
    window_segments,
    window_spans,
)
from gpufeed.gpu_transforms.augment.mixing import MIX_UNIFORMS, check_mixers, draw_mix, mix
from gpufeed.gpu_transforms.augment.params import KINDS, AugmentParams, Op, draw_uniforms
from gpufeed.gpu_transforms.augment.targets import warp_boxes, warp_keypoints, warp_masks

_OUTPUT_DTYPES = (None, torch.uint8, torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_ops(ops: tuple[Op, ...]) -> Op | None:
    """Validate an op list from what its ops declare; returns the op that leaves values
    unbounded (e.g. Normalize, the last pixel op), if any."""
    for i, op in enumerate(ops):
        if not isinstance(op, Op):
            raise TypeError(f"ops[{i}] must be an augmentation op (e.g. RandomResizedCrop), got {op!r}")
    rank = [KINDS.index(op.kind) for op in ops]
    for i in range(1, len(ops)):
        if rank[i] < rank[i - 1]:
            raise ValueError(
                f"ops[{i}] {type(ops[i]).__name__} is a {ops[i].kind} op after a {ops[i - 1].kind} op; "
                "order ops as geometric, then pixel, then mixing (MixUp, CutMix)"
            )
    pixel = [op for op in ops if op.kind == "pixel"]
    unbounded: Op | None = None
    for op in pixel:
        if unbounded is not None and not op.takes_normalised:
            raise ValueError(f"{type(unbounded).__name__} must be the last pixel op: {type(op).__name__} after it "
                             "expects values in [0, 1] (of the pixel ops only RandomErasing takes normalised values)")
        op.check_placement(unbounded is not None)
        if op.output_range is None and unbounded is None:
            unbounded = op
    check_mixers([op for op in ops if op.mixes_samples])
    return unbounded


@dataclass
class AugmentResult:
    """What :meth:`GpuAugment.apply` returns; targets not passed in stay None.

    Attributes:
        images: (B, C, H_out, W_out) on the input's device.
        labels: as given, or (B, num_classes) float32 soft labels after MixUp/CutMix.
        boxes, box_labels: per image, boxes clipped and the empty ones dropped with their labels.
        box_indices: per image, the (M_i,) int64 indices of the kept boxes in the input's
            ``boxes[i]``, to keep other per-box data (instance masks, ids) aligned.
        masks: warped with nearest sampling, dtype kept.
        keypoints: (B, K, 2) moved; keypoints_visible: (B, K) True inside the output.
        params: the parameters used, for replay.
    """

    images: torch.Tensor
    params: AugmentParams
    labels: torch.Tensor | None = None
    boxes: list[torch.Tensor] | None = None
    box_labels: list[torch.Tensor] | None = None
    box_indices: list[torch.Tensor] | None = None
    masks: torch.Tensor | None = None
    keypoints: torch.Tensor | None = None
    keypoints_visible: torch.Tensor | None = None


class GpuAugment:
    """Per-sample random augmentation of a (B, C, H, W) batch on whatever device it is on.

    Ops run in a fixed order of kinds: geometric ops (composed into one matrix per sample
    and applied with one warp), then pixel ops in the order given (colour, blur, erasing,
    ``Normalize`` last), then the mixing ops (MixUp, CutMix). An op list out of that order
    is refused rather than silently reordered.

    Args:
        ops: the augmentation ops, e.g. ``[RandomResizedCrop(224), RandomHorizontalFlip(),
            ColorJitter(0.4, 0.4, 0.4, 0.1), Normalize(MEAN, STD)]``.
        seed: seeds the stage's generators (one per device), an int in [0, 2**64); None
            draws a seed from torch's global generator, so ``torch.manual_seed`` makes runs
            repeatable. In DataLoader workers (the stage in a ``collate_fn`` or a dataset),
            seeded or not, each worker's stream mixes the stage's seed with torch's seed
            for that worker and epoch, so workers and epochs do not repeat each other and a
            run is repeatable under ``torch.manual_seed`` (or the DataLoader's
            ``generator=``), as with torchvision's transforms; a seed set inside a worker
            (e.g. ``manual_seed`` in a ``worker_init_fn``) is used as given.
            Behind a loader (``gpu_augment=``) a stage without a seed is reseeded by the
            loader before every batch from its ``(seed, shard, epoch, batch)`` (see
            :meth:`seed_stream`), which makes ``set_epoch`` and mid-epoch resumes exact; one with a seed keeps its own stream.
        same_on_batch: every sample of a batch gets the same parameters.
        value_range: the range of float pixels, in and out: (0, 1) or (0, 255). A float
            batch outside it (e.g. 0..255 passed as 0..1) is refused.
        output_dtype: None keeps the input dtype (float32 for uint8 input with Normalize).
        fill: value in [0, 1] where a warp looks outside the image.
        mask_fill: mask value there (e.g. 255 as an ignore index); for integer masks it
            must be a whole number their dtype holds, else :meth:`apply` refuses them
            rather than wrapping the value (bool masks read it as a truth value).
        min_box_size: boxes narrower or shorter than this (pixels) after clipping are dropped.
        check_inputs: check values (float pixels' range, NaN/inf; the class ids a mixing
            op one-hot encodes), costing one device sync per batch for each. Without them
            a class id out of range fails inside ``one_hot``: a device-side assert on a GPU.
        chunk_size: samples processed together; None: the whole batch on a GPU, chunks of
            about 4 MB of float pixels on a CPU, run on one thread per torch intra-op
            thread, each op single-threaded (torch's process-wide thread setting is
            lowered for the call and restored); why: :mod:`.chunks`.

    Example:
        >>> from gpufeed.gpu_transforms.augment import (GpuAugment, RandomResizedCrop,
        ...     RandomHorizontalFlip, ColorJitter, Normalize)
        >>> stage = GpuAugment([RandomResizedCrop(32), RandomHorizontalFlip(),
        ...                     ColorJitter(0.4, 0.4, 0.4, 0.1),
        ...                     Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))], seed=0)
        >>> images = torch.randint(0, 256, (4, 3, 48, 48), dtype=torch.uint8)
        >>> out, labels = stage(images, torch.tensor([0, 1, 2, 3]))
        >>> out.shape, out.dtype
        (torch.Size([4, 3, 32, 32]), torch.float32)
        >>> bool((stage(images, params=stage.last_params) == out).all())
        True
    """

    def __init__(self, ops: Sequence[Op], *, seed: int | None = None, same_on_batch: bool = False,
                 value_range: Sequence[float] = (0.0, 1.0), output_dtype: torch.dtype | None = None,
                 fill: float = 0.0, mask_fill: float = 0, min_box_size: float = 1.0,
                 check_inputs: bool = True, chunk_size: int | None = None) -> None:
        try:
            if isinstance(ops, Op):
                raise TypeError
            ops = tuple(ops)
        except TypeError:
            raise TypeError(f"ops must be a list of augmentation ops, e.g. [RandomHorizontalFlip()], "
                            f"got {ops!r}") from None
        unbounded = _check_ops(ops)
        self.value_range = checks.check_value_range(value_range)
        if output_dtype not in _OUTPUT_DTYPES:
            raise ValueError(f"output_dtype must be None, uint8 or a float dtype, got {output_dtype!r}")
        if output_dtype == torch.uint8 and unbounded is not None:
            raise ValueError(f"output_dtype=torch.uint8 cannot hold normalised values; drop {type(unbounded).__name__} "
                             "or use a float dtype")
        if not isinstance(same_on_batch, bool):
            raise TypeError(f"same_on_batch must be a bool, got {same_on_batch!r}")
        self.ops = ops
        self.same_on_batch = bool(same_on_batch)
        self.output_dtype = output_dtype
        self.fill = checks.check_unit("fill", fill)
        self.mask_fill = checks.check_number("mask_fill", mask_fill)
        if checks.check_number("min_box_size", min_box_size) < 0:
            raise ValueError(f"min_box_size must be >= 0, got {min_box_size!r}")
        self.min_box_size = float(min_box_size)
        self.check_inputs = bool(check_inputs)
        self.chunk_size = (None if chunk_size is None
                           else checks.check_int("chunk_size", chunk_size, 1, what="None or a positive int"))
        self._chunks = ChunkRunner()
        self._geometric = [op for op in ops if op.kind == "geometric"]
        self._mixers = [op for op in ops if op.mixes_samples]
        self._mixer_names = "/".join(type(m).__name__ for m in self._mixers)
        self._inside = all(op.stays_inside for op in self._geometric)
        self._affine = all(op.affine for op in self._geometric)
        self._normalize = unbounded is not None
        self._reprs = tuple(repr(op) for op in ops)
        if seed is None:
            self.seed_stream(int(torch.randint(0, 2**62, ()).item()))
        else:
            self.manual_seed(seed)
        #: Parameters of the last call; ``stage(x, params=stage.last_params)`` replays it.
        self.last_params: AugmentParams | None = None

    def manual_seed(self, seed: int) -> GpuAugment:
        """Restart the random stream of every device from ``seed``, and make it the
        stage's own: a loader then leaves the stream alone (see :meth:`seed_stream`)."""
        self.seed_stream(seed)
        self.has_own_seed = True
        return self

    def seed_stream(self, seed: int) -> GpuAugment:
        """Restart the random stream of every device from ``seed`` without making it the
        stage's own seed.

        A stage built with ``seed=None`` has no seed of its own; ``classification_loader``
        then calls this before every batch with a seed derived from the loader's
        ``(seed, shard_id, epoch, batch)``, so a loader resumed with ``set_epoch(k)`` or
        ``load_state_dict`` repeats that epoch's (or batch's) augmentation exactly. A stage with its own seed (``seed=`` or
        :meth:`manual_seed`) keeps one stream across epochs instead.

        In a DataLoader worker, a seed set before the workers started is mixed with the
        worker's seed (see :meth:`_generator`); one set inside the worker is used as given.
        """
        value = checks.check_int("seed", seed)
        if not 0 <= value < 2**64:
            raise ValueError(f"seed must be in [0, 2**64) (torch.Generator's range), got {seed!r}")
        self.seed = value
        self.has_own_seed = False
        # Set in a worker (worker_init_fn, a dataset's own stage): the caller chose that
        # worker's seed, so it is not mixed with the worker's again.
        self._per_worker = torch.utils.data.get_worker_info() is None
        self._worker_seed: int | None = None
        self._generators: dict[torch.device, torch.Generator] = {}
        return self

    def _generator(self, device: torch.device) -> torch.Generator:
        info = torch.utils.data.get_worker_info() if self._per_worker else None
        if info is not None and info.seed != self._worker_seed:
            # A stage copied into DataLoader workers (collate_fn, a dataset) with the seed it
            # had in the main process: every worker repeated the same augmentations, and
            # every epoch repeated the first (workers start again from the main process's
            # copy). Each worker, each epoch, now mixes the stage's seed with torch's seed
            # for that worker (base seed + worker id, drawn from torch's generator or the
            # DataLoader's ``generator`` once per epoch), as torch's own random ops there do
            # and torchvision's transforms: reproducible under torch.manual_seed, different
            # per worker and per epoch, and still different for different stage seeds.
            self._worker_seed = info.seed
            self._generators = {}
        if device not in self._generators:
            seed = self.seed
            if self._worker_seed is not None:
                seed = int(np.random.SeedSequence([self.seed, self._worker_seed]).generate_state(1, np.uint64)[0])
            self._generators[device] = torch.Generator(device=device).manual_seed(seed)
        return self._generators[device]

    def __getstate__(self) -> dict:
        # Generators are per process; a copy restarts from the seed.
        state = dict(self.__dict__)
        state["_generators"] = {}
        return state

    def __setstate__(self, state: dict) -> None:
        # A stage pickled before per-worker streams existed has neither attribute (and an
        # older one has ``_drawn``: per-worker streams for drawn seeds only).
        drawn = state.pop("_drawn", None)
        self.__dict__.update({"_per_worker": True if drawn is None else drawn, "_worker_seed": None, **state})

    def __repr__(self) -> str:
        return f"GpuAugment([{', '.join(self._reprs)}], same_on_batch={self.same_on_batch}, seed={self.seed})"

    # ---------------------------------------------------------------- parameters
    def sample_params(self, images: torch.Tensor) -> AugmentParams:
        """Draw the random parameters for a batch like ``images`` without applying them.

        Returns:
            :class:`AugmentParams` on ``images.device``.
        """
        checks.check_images(images)
        b, _, h, w = images.shape
        counts = [op.num_uniforms for op in self.ops]
        extra = MIX_UNIFORMS if self._mixers else 0
        u = draw_uniforms(self._generator(images.device), b, sum(counts) + extra, images.device, self.same_on_batch)
        size, start, per_op = (h, w), 0, []
        for op, n in zip(self.ops, counts, strict=True):
            per_op.append(op.sample(u[:, start:start + n], size))
            start += n
            size = op.output_size(size)
        mix_params: dict[str, torch.Tensor] = {}
        if self._mixers:
            drawn = [p for op, p in zip(self.ops, per_op, strict=True) if op.mixes_samples]
            mix_params = draw_mix(self._mixers, drawn, u[:, start], u[:, start + 1], self.same_on_batch)
        return AugmentParams(self._reprs, b, (h, w), size, per_op, mix_params)

    def _check_replay(self, params: AugmentParams, images: torch.Tensor) -> None:
        if not isinstance(params, AugmentParams):
            raise TypeError(f"params must be AugmentParams (e.g. stage.last_params), got {type(params).__name__}")
        if params.ops != self._reprs:
            raise ValueError("params were drawn by a stage with other ops; replay them on the same stage config")
        if params.batch_size != images.shape[0] or params.input_size != tuple(images.shape[-2:]):
            raise ValueError(
                f"params were drawn for a batch of {params.batch_size} images of {params.input_size}, "
                f"got {images.shape[0]} of {tuple(images.shape[-2:])}"
            )
        if params.device is not None and params.device != images.device:
            raise ValueError(f"params are on {params.device} but images on {images.device}; use params.to(device)")

    # ---------------------------------------------------------------- applying
    def __call__(self, images: torch.Tensor, labels: torch.Tensor | None = None, *,
                 params: AugmentParams | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Augment a batch; the loader's hook.

        Args:
            images: (B, C, H, W) uint8 or float (in ``value_range``), on any device.
            labels: None, or one row per image: (B,) class ids or (B, num_classes) soft labels
                for MixUp/CutMix; without them any (B, ...) tensor, passed through as it is.
            params: replay these parameters instead of drawing new ones.

        Returns:
            ``images`` alone when no labels are given, else ``(images, labels)``; labels are
            (B, num_classes) float32 when the stage mixes samples.
        """
        res = self.apply(images, labels, params=params)
        return res.images if labels is None else (res.images, res.labels)

    def apply(self, images: torch.Tensor, labels: torch.Tensor | None = None, *,
              boxes: Sequence[torch.Tensor] | None = None, box_labels: Sequence[torch.Tensor] | None = None,
              masks: torch.Tensor | None = None, keypoints: torch.Tensor | None = None,
              params: AugmentParams | None = None) -> AugmentResult:
        """Augment a batch and its targets consistently.

        Args:
            images: (B, C, H, W) uint8 or float in ``value_range``.
            labels: one row per image, passed through as it is; MixUp/CutMix need them as
                (B,) int class ids or (B, num_classes) float soft labels.
            boxes: per image a float (N_i, 4) xyxy tensor in pixels inside the image.
            box_labels: per image an (N_i,) tensor, kept aligned with ``boxes``.
            masks: (B, H, W) or (B, K, H, W) segmentation masks of the images' size.
            keypoints: (B, K, 2) float (x, y) pixels.
            params: replay these instead of drawing new ones.

        Returns:
            An :class:`AugmentResult`; ``self.last_params`` is set to its params.

        Shape:
            images (B, C, H, W) -> (B, C, H_out, W_out), (H_out, W_out) set by a crop op.
        """
        checks.check_images(images)
        self._check_targets(images, labels, boxes, box_labels, masks, keypoints)
        if images.is_floating_point() and self.check_inputs:
            checks.check_float_values(images, self.value_range)
        if params is None:
            params = self.sample_params(images)
        else:
            self._check_replay(params, images)
        self.last_params = params

        geo = [p for op, p in zip(self.ops, params.per_op, strict=True) if op.kind == "geometric"]
        matrix, windows, spans = None, [], None
        if self._geometric and not only_flips(self._geometric):
            matrix, _ = compose(self._geometric, geo, params.input_size)
            if not self._inside:  # e.g. a crop, then a rotation: its corners are fill, as in torchvision
                windows = crop_windows(self._geometric, geo, params.input_size)
                spans = window_spans(windows, params.output_size)
        b, c = images.shape[:2]
        oh, ow = params.output_size
        parts = chunk_parts(b, c * oh * ow, images.device, self.chunk_size)
        # Without mixing each chunk goes straight to its slice of the output; mixing needs
        # the whole float batch first (partners come from anywhere in the batch).
        if len(parts) == 1:  # a GPU batch, or a small one: no output buffer to fill
            out = self._augment_chunk(images, params, parts[0], geo, matrix, spans)
            out = out if self._mixers else self._to_output(out, images.dtype)
            if out is images:  # nothing to do (no ops, same dtype): still hand back a new tensor
                out = out.clone()
        else:
            dtype = torch.float32 if self._mixers else self._output_dtype(images.dtype)
            out = torch.empty((b, c, oh, ow), dtype=dtype, device=images.device)

            def work(part: slice) -> None:
                x = self._augment_chunk(images[part], params, part, geo, None if matrix is None else matrix[part],
                                        None if spans is None else (spans[0][part], spans[1][part]))
                out[part] = x if self._mixers else self._to_output(x, images.dtype)

            self._chunks.run(work, parts, images.device)
        out_labels = labels
        if self._mixers:
            x, out_labels = mix(out, labels, params.mix["perm"], params.mix["lam"], params.mix["box"],
                                params.mix["use_box"], self._mixers[0].num_classes)
            out = self._to_output(x, images.dtype)
        result = AugmentResult(out, params, out_labels)
        self._apply_targets(result, matrix, windows, spans, geo, boxes, box_labels, masks, keypoints)
        return result

    def _check_targets(self, images, labels, boxes, box_labels, masks, keypoints) -> None:  # noqa: ANN001
        if labels is not None:
            checks.check_labels(images, labels, self._mixer_names if self._mixers else None)
            if self._mixers and self.check_inputs:
                checks.check_class_ids(labels, self._mixers[0].num_classes)
        elif self._mixers:
            raise ValueError(f"labels are required: {self._mixer_names} mixes the labels with the images")
        if self._mixers and (boxes is not None or masks is not None or keypoints is not None):
            raise ValueError(f"{self._mixer_names} cannot carry boxes, masks or keypoints; use them for classification")
        if box_labels is not None and boxes is None:
            raise ValueError("box_labels given without boxes")
        for op in self.ops:
            if op.channels is not None:
                checks.check_channels(images, op.channels, type(op).__name__, op.channels_reason())
        if boxes is not None:
            checks.check_boxes(images, boxes, box_labels)
        if masks is not None:
            checks.check_masks(images, masks, self.mask_fill)
            if self.check_inputs and self._geometric and not only_flips(self._geometric):
                checks.check_mask_values(masks, self.mask_fill)
        if keypoints is not None:
            checks.check_keypoints(images, keypoints)

    def _augment_chunk(self, images: torch.Tensor, params: AugmentParams, part: slice,
                       geo: list[dict[str, torch.Tensor]], matrix: torch.Tensor | None,
                       spans: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        """Geometric and pixel ops on samples ``part`` of the batch; float32, [0, 1] or normalised."""
        x = images.to(torch.float32)
        scale = 255.0 if images.dtype == torch.uint8 else self.value_range[1]
        if scale != 1.0:
            # In place on the fresh copy (uint8 / 255.0 with type promotion is much slower).
            x = x.div_(scale) if x.data_ptr() != images.data_ptr() else x / scale
        if matrix is not None:
            x = warp(x, matrix, params.output_size, fill=self.fill, inside=self._inside, affine=self._affine,
                     spans=spans)
        elif self._geometric:
            x = apply_flips(x, self._geometric, [{k: v[part] for k, v in p.items()} for p in geo])
        for op, p in zip(self.ops, params.per_op, strict=True):
            if op.kind == "pixel":
                x = op.apply(x, {k: v[part] for k, v in p.items()})
        return x

    def _output_dtype(self, in_dtype: torch.dtype) -> torch.dtype:
        if self.output_dtype is not None:
            return self.output_dtype
        return torch.float32 if (self._normalize and in_dtype == torch.uint8) else in_dtype

    def _to_output(self, x: torch.Tensor, in_dtype: torch.dtype) -> torch.Tensor:
        dtype = self._output_dtype(in_dtype)
        if self._normalize:
            return x.to(dtype)
        if dtype == torch.uint8:
            return (x * 255.0).round_().clamp_(0, 255).to(torch.uint8)
        top = self.value_range[1]
        return (x * top if top != 1.0 else x).to(dtype)

    def _apply_targets(self, result: AugmentResult, matrix: torch.Tensor | None,
                       windows: list[Window], spans: tuple[torch.Tensor, torch.Tensor] | None,
                       geo: list[dict[str, torch.Tensor]], boxes, box_labels, masks, keypoints) -> None:  # noqa: ANN001
        params = result.params
        if matrix is None and (boxes is not None or keypoints is not None):
            matrix = (compose(self._geometric, geo, params.input_size)[0] if self._geometric
                      else torch.eye(3, device=result.images.device).expand(params.batch_size, 3, 3))
        if masks is not None:
            if not self._geometric:
                result.masks = masks.clone()
            elif matrix is None:  # flips only
                result.masks = apply_flips(masks, self._geometric, geo)
            else:
                result.masks = warp_masks(masks, matrix, params.output_size, fill=self.mask_fill,
                                          inside=self._inside, affine=self._affine)
                fill = self.mask_fill if result.masks.dtype != torch.bool else bool(self.mask_fill)
                result.masks = fill_outside(result.masks, spans, fill)  # a fresh tensor: filled in place
        if boxes is not None:
            result.boxes, result.box_labels, result.box_indices = warp_boxes(
                list(boxes), None if box_labels is None else list(box_labels), matrix, params.output_size,
                self.min_box_size, window_segments(self._geometric, geo, params.input_size) if windows else None,
            )
        if keypoints is not None:
            result.keypoints, result.keypoints_visible = warp_keypoints(keypoints, matrix, params.output_size,
                                                                        windows)
