"""Random parameters: drawn on the device in one shot, recorded, replayable.

Every op declares how many uniform numbers per sample it needs (``num_uniforms``) and
turns its slice of one ``torch.rand`` draw into parameters with pure tensor math
(inverse CDFs, Box-Muller, vectorised rejection). So a whole batch's parameters cost one
generator call on the device the batch lives on, and ``same_on_batch`` is simply one row
of uniforms broadcast to all samples.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import torch

#: Op kinds, in the order the stage applies them.
KINDS = ("geometric", "pixel", "mix")


class Op:
    """Base of all augmentation ops: configuration only, validated in the constructor.

    An op declares what the stage needs to know about it, so the stage never asks which
    class it is:

    - ``kind``: ``"geometric"`` (contributes a matrix to the one fused warp), ``"pixel"``
      (:meth:`apply` on the float batch) or ``"mix"`` (mixes samples with partners from
      the batch, and their labels: see :mod:`~gpufeed.gpu_transforms.augment.mixing`);
      the stage runs kinds in that order.
    - ``num_uniforms``: uniforms per sample that :meth:`sample` turns into parameters,
      a pure function of ``u`` (B, num_uniforms) in [0, 1) and the current (H, W).
    - ``output_range``: the values the op leaves pixels in: ``(0.0, 1.0)``, or None when
      they can be any real number (normalised), which only the last pixel op may do.
    - ``channels``: the channel count the op needs, or None for any.
    - ``takes_normalised``: the op may come after one that leaves values unbounded
      (``Normalize``), working in whatever units the values are in (``RandomErasing``, as
      in torchvision's and timm's recipes); :meth:`check_placement` then refuses a config
      that does not fit where the op stands.
    """

    kind: ClassVar[str] = "pixel"
    num_uniforms: int = 0
    output_range: ClassVar[tuple[float, float] | None] = (0.0, 1.0)
    channels: int | tuple[int, ...] | None = None
    takes_normalised: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        # Name the op in its constructor's errors: "p must be a probability" alone does not
        # say which of a recipe's ops (built from a config, say) was given the bad value.
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_names_op", False):
            cls.__init__ = _naming_op(init)

    def channels_reason(self) -> str:
        """What in the op's config needs ``channels`` (e.g. "3 mean/std values"), for the
        error that refuses a batch with other channel counts; empty when obvious."""
        return ""

    def check_placement(self, normalised: bool) -> None:
        """Raise ValueError if the config does not fit the op's place in a stage: after an
        op that leaves values unbounded (``normalised``) or on [0, 1] pixels."""

    @property
    def mixes_samples(self) -> bool:
        """True for ops whose output for a sample depends on other samples (and whose
        labels become soft)."""
        return self.kind == "mix"

    def sample(self, u: torch.Tensor, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        """This op's parameters for a batch, from its ``(B, num_uniforms)`` uniforms."""
        return {}

    def output_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """The (H, W) the op makes of an (H, W) input."""
        return size

    def apply(self, x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """The op on a float (B, C, H, W) batch in [0, 1], with the parameters
        :meth:`sample` drew for it. The stage calls it for pixel ops; it fuses geometric
        ops into one warp and mixes samples in one kernel instead."""
        raise NotImplementedError(f"{type(self).__name__} does not implement apply()")

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


def _naming_op(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` with the op's class name put in front of the ValueError or TypeError it
    raises (once, however many constructors of a class hierarchy it passes through)."""

    @functools.wraps(init)
    def wrapper(self: Op, *args: object, **kwargs: object) -> None:
        try:
            init(self, *args, **kwargs)
        except (ValueError, TypeError) as e:
            name = type(self).__name__
            if type(e) in (ValueError, TypeError) and e.args and isinstance(e.args[0], str) \
                    and not e.args[0].startswith(f"{name}: "):
                e.args = (f"{name}: {e.args[0]}", *e.args[1:])
            raise

    wrapper._names_op = True  # type: ignore[attr-defined]
    return wrapper


@dataclass
class AugmentParams:
    """The random parameters of one call, enough to replay it bit for bit.

    Attributes:
        ops: the stage's op reprs, to refuse a replay on a different stage.
        batch_size: B of the batch they were drawn for.
        input_size: (H, W) of that batch.
        output_size: (H, W) after the geometric ops.
        per_op: one dict of tensors per op (same order as ``ops``), on the batch's device.
        mix: partner indices ``perm``, weights ``lam``, CutMix ``box`` and ``use_box`` per
            sample when the stage mixes samples, else empty.

    Example:
        >>> out = stage(images)
        >>> again = stage(images, params=stage.last_params)  # identical to ``out``
    """

    ops: tuple[str, ...]
    batch_size: int
    input_size: tuple[int, int]
    output_size: tuple[int, int]
    per_op: list[dict[str, torch.Tensor]] = field(default_factory=list)
    mix: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def device(self) -> torch.device | None:
        """Where the parameter tensors live (None when no op drew any)."""
        for d in [*self.per_op, self.mix]:
            for v in d.values():
                return v.device
        return None

    def to(self, device: torch.device | str) -> AugmentParams:
        """The same parameters on another device (e.g. to replay a CUDA batch on CPU)."""
        moved = [{k: v.to(device) for k, v in d.items()} for d in self.per_op]
        mix = {k: v.to(device) for k, v in self.mix.items()}
        return AugmentParams(self.ops, self.batch_size, self.input_size, self.output_size, moved, mix)


def draw_uniforms(
    generator: torch.Generator, batch_size: int, count: int, device: torch.device, same_on_batch: bool,
) -> torch.Tensor:
    """All uniforms a call needs, (B, count) in [0, 1), in one generator call on ``device``."""
    rows = 1 if same_on_batch else batch_size
    u = torch.rand((rows, max(count, 1)), generator=generator, device=device, dtype=torch.float32)
    return u.expand(batch_size, -1) if same_on_batch else u


def uniform(u: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """Map uniforms in [0, 1) to [lo, hi)."""
    return lo + u * (hi - lo)


def first_fitting_sides(u: torch.Tensor, size: tuple[int, int], scale: Sequence[float], ratio: Sequence[float],
                        tries: int, fits: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """torchvision's box search (``RandomResizedCrop``, ``RandomErasing``) for a whole batch:
    ``tries`` draws of an area (a ``scale`` share of the image's) and a log-uniform aspect in
    ``ratio`` from ``u[:, :2 * tries]``; the sides ``round(sqrt(area * aspect))`` and
    ``round(sqrt(area / aspect))`` of each sample's first draw that ``fits``, and whether
    one did (B,)."""
    h, w = size
    area = h * w * uniform(u[:, :tries], *scale)
    aspect = torch.exp(uniform(u[:, tries:2 * tries], math.log(ratio[0]), math.log(ratio[1])))
    a, b = torch.round(torch.sqrt(area * aspect)), torch.round(torch.sqrt(area / aspect))
    ok = fits(a, b)
    first = torch.argmax(ok.to(torch.int8), dim=1, keepdim=True)
    return a.gather(1, first).squeeze(1), b.gather(1, first).squeeze(1), ok.any(dim=1)


def randint(u: torch.Tensor, lo: torch.Tensor | int, hi: torch.Tensor | int) -> torch.Tensor:
    """Integers in [lo, hi) from uniforms (float results, exact for image-sized ints)."""
    v = torch.floor(lo + u * (hi - lo))
    # u < 1 always, but float rounding can still land on hi.
    return torch.minimum(v, hi - 1) if isinstance(hi, torch.Tensor) else v.clamp(max=hi - 1)


def normal_pair(u1: torch.Tensor, u2: torch.Tensor) -> torch.Tensor:
    """One standard normal per element from two uniforms (Box-Muller)."""
    return torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2.0 * math.pi * u2)


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (Wellons' lowbias32) on int64 tensors holding values < 2**32.

    Products wrap in int64 the same way on every device; the mask keeps the low 32 bits.
    ``x`` is left as it is (the first step makes a new tensor; the rest work in place on it).
    """
    mask = 0xFFFFFFFF
    x = x ^ (x >> 16)
    x.mul_(0x7FEB352D).bitwise_and_(mask)
    x.bitwise_xor_(x >> 15)
    x.mul_(0x846CA68B).bitwise_and_(mask)
    return x.bitwise_xor_(x >> 16)


def sample_keys(key: torch.Tensor) -> torch.Tensor:
    """(B,) int64 hash keys from (B, 2) uniforms in [0, 1) (a sample's parameters)."""
    bits = (key.to(torch.float64) * (1 << 24)).long()  # 24 random bits per uniform
    return _mix32(bits[:, 0] ^ _mix32(bits[:, 1] + 0x9E3779B9))


def hashed_normal(keys: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """float32 standard normals, one per element of ``index`` (int64 flat indices), each a
    pure function of its index and its key (``keys`` from :func:`sample_keys`, broadcast
    against ``index``): two 32-bit hashes -> two 24-bit uniforms -> Box-Muller."""
    # normal_pair's arithmetic, in place on the fresh temporaries (a third faster on a CPU).
    even = 2 * index
    u1 = _mix32(even ^ keys).bitwise_right_shift_(8).to(torch.float32).mul_(2.0**-24)
    u2 = _mix32(even.add_(1) ^ keys).bitwise_right_shift_(8).to(torch.float32).mul_(2.0**-24)
    return torch.log1p(u1.neg_()).mul_(-2.0).sqrt_().mul_(torch.cos(u2.mul_(2.0 * math.pi)))


def keyed_normal(key: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """(B, *shape) float32 standard normals, a pure function of one key per sample.

    Args:
        key: (B, 2) uniforms in [0, 1) (a sample's parameters), so the noise is replayed
            bit for bit from the recorded parameters, on any device and in any chunking.

    Each element hashes its flat index with the key (:func:`hashed_normal`): no generator
    state, no host round trip. Computing only some elements (their flat indices into
    ``shape``) gives the same values.
    """
    k = sample_keys(key).view(-1, *([1] * len(shape)))
    idx = torch.arange(math.prod(shape), device=key.device, dtype=torch.int64).view(1, *shape)
    return hashed_normal(k, idx)


#: Candidates per Gamma draw in :func:`gamma`; each is accepted with probability > 0.95,
#: so all failing is rarer than 1e-10 and falls back to the mean.
GAMMA_TRIES = 8
#: Uniforms :func:`beta` consumes per sample.
BETA_UNIFORMS = 2 * (3 * GAMMA_TRIES + 1)


def gamma(u: torch.Tensor, alpha: float) -> torch.Tensor:
    """Gamma(alpha, 1) per row from ``u`` (B, 3*GAMMA_TRIES + 1) uniforms.

    Marsaglia-Tsang with a fixed number of vectorised tries (no data-dependent loop, so no
    device sync); alpha < 1 uses the boost Gamma(a) = Gamma(a + 1) * U^(1/a).
    """
    a = alpha + 1.0 if alpha < 1.0 else alpha
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    t = GAMMA_TRIES
    x = normal_pair(u[:, :t], u[:, t:2 * t])
    v = (1.0 + c * x) ** 3
    accept = (v > 0) & (
        torch.log(u[:, 2 * t:3 * t].clamp_min(1e-30)) < 0.5 * x * x + d - d * v + d * torch.log(v.clamp_min(1e-30))
    )
    first = torch.argmax(accept.to(torch.int8), dim=1, keepdim=True)
    g = torch.where(accept.any(dim=1, keepdim=True), (d * v).gather(1, first), torch.full_like(first, d, dtype=u.dtype))
    g = g.squeeze(1)
    if alpha < 1.0:
        g = g * u[:, 3 * t].clamp_min(1e-30) ** (1.0 / alpha)
    return g


def beta(u: torch.Tensor, alpha: float) -> torch.Tensor:
    """Beta(alpha, alpha) per row from ``u`` (B, BETA_UNIFORMS) uniforms."""
    half = BETA_UNIFORMS // 2
    x, y = gamma(u[:, :half], alpha), gamma(u[:, half:], alpha)
    return x / (x + y)


def permutation(u: torch.Tensor, same_on_batch: bool) -> torch.Tensor:
    """A random partner index per sample, never the sample itself (for B >= 2): the
    samples in a random order (argsort of uniforms), each paired with the next one in that
    order, the last with the first, so each sample's partner is uniform over the others.
    (A plain random permutation pairs a sample with itself with probability 1/B: a batch of
    2 went unmixed half the time, even with ``p=1``.) A roll by one when all samples share
    their parameters (then every row of ``u`` is equal)."""
    b = u.shape[0]
    if same_on_batch or b < 2:
        return torch.roll(torch.arange(b, device=u.device), 1)
    order = torch.argsort(u)
    return torch.empty_like(order).scatter_(0, order, torch.roll(order, -1))
