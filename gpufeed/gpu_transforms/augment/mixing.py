"""Batch-level mixing: MixUp and CutMix with one mixing weight per sample.

Each sample is blended with a partner from the same batch (a random permutation) and its
label becomes ``lam * onehot(y) + (1 - lam) * onehot(y_partner)``. Both ops reduce to one
kernel: a per-pixel weight that is ``lam`` everywhere (MixUp) or 0 inside a box and 1
outside (CutMix), so a stage holding several mixing ops draws, per sample, which one
applies (:func:`draw_mix`). A new mixing op subclasses :class:`MixOp`: its ``sample``
returns the same ``lam`` and ``box`` per sample, and ``pastes_box`` says which weight
applies.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from gpufeed.gpu_transforms.arrays import constant
from gpufeed.gpu_transforms.augment.checks import check_int, check_number, check_probability
from gpufeed.gpu_transforms.augment.params import BETA_UNIFORMS, Op, beta, permutation, randint
from gpufeed.gpu_transforms.augment.photometric import box_mask

#: Uniforms per sample the stage draws for mixing, beyond each op's own: the partner
#: permutation and the choice among the stage's mixing ops.
MIX_UNIFORMS = 2


class MixOp(Op):
    """Common configuration of the mixing ops.

    ``sample`` returns, per sample, ``lam`` (the weight of the sample's own label) and
    ``box`` ((x, y, w, h) in pixels, zeros when unused); ``pastes_box`` says how the
    pixels mix: True pastes the partner's pixels inside ``box``, False blends whole images
    by ``lam``.
    """

    kind = "mix"
    num_uniforms = BETA_UNIFORMS + 3
    pastes_box: bool = False

    def __init__(self, num_classes: int, alpha: float = 1.0, p: float = 1.0) -> None:
        self.num_classes = check_int("num_classes", num_classes, 1)
        self.alpha = check_number("alpha", alpha)
        if not self.alpha > 0:
            raise ValueError(f"alpha must be a positive number, got {alpha!r}")
        self.p = check_probability("p", p)


class MixUp(MixOp):
    """Blend whole images: ``lam * x + (1 - lam) * x_partner``, ``lam ~ Beta(alpha, alpha)``.

    Args:
        num_classes: size of the soft labels it returns.
        alpha: Beta concentration.
        p: probability that a sample is mixed.
    """

    def sample(self, u: torch.Tensor, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        lam = beta(u[:, :BETA_UNIFORMS], self.alpha)
        lam = torch.where(u[:, BETA_UNIFORMS] < self.p, lam, torch.ones_like(lam))
        return {"lam": lam, "box": torch.zeros(u.shape[0], 4, device=u.device)}


class CutMix(MixOp):
    """Paste a box from the partner (torchvision's box sampler); ``lam`` is the kept area.

    Args:
        num_classes: size of the soft labels it returns.
        alpha: Beta concentration of the area drawn.
        p: probability that a sample is mixed.
    """

    pastes_box = True

    def sample(self, u: torch.Tensor, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        h, w = size
        lam = beta(u[:, :BETA_UNIFORMS], self.alpha)
        cx, cy = randint(u[:, BETA_UNIFORMS + 1], 0, w), randint(u[:, BETA_UNIFORMS + 2], 0, h)
        r = 0.5 * torch.sqrt(1.0 - lam)
        rw, rh = torch.floor(r * w), torch.floor(r * h)
        x1, x2 = (cx - rw).clamp(min=0), (cx + rw).clamp(max=w)
        y1, y2 = (cy - rh).clamp(min=0), (cy + rh).clamp(max=h)
        on = u[:, BETA_UNIFORMS] < self.p
        box = torch.stack([x1, y1, x2 - x1, y2 - y1], 1) * on[:, None]
        lam = 1.0 - box[:, 2] * box[:, 3] / (h * w)
        return {"lam": lam, "box": box}


def check_mixers(mixers: Sequence[MixOp]) -> None:
    """A stage's mixing ops: each kind at most once, all with the same ``num_classes``."""
    names = " and ".join(type(m).__name__ for m in mixers)
    if len({type(m) for m in mixers}) != len(mixers):
        raise ValueError(f"give each mixing op at most once (got {names})")
    if len({m.num_classes for m in mixers}) > 1:
        raise ValueError(f"{names} must have the same num_classes")


def draw_mix(mixers: Sequence[MixOp], drawn: Sequence[dict[str, torch.Tensor]], u_perm: torch.Tensor,
             u_choice: torch.Tensor, same_on_batch: bool) -> dict[str, torch.Tensor]:
    """Per sample, a partner and one of the stage's mixing ops, each equally likely.

    Args:
        mixers: the stage's mixing ops; drawn: their ``sample`` results, in the same order.
        u_perm, u_choice: (B,) uniforms for the partner permutation and the choice.

    Returns:
        The stage's ``params.mix``: ``perm``, ``use_box``, ``lam`` and ``box`` per sample.
        The choice indexes the ops sorted by class name, so it does not depend on the
        order the op list gives them in.
    """
    order = sorted(range(len(mixers)), key=lambda i: type(mixers[i]).__name__)
    choice = randint(u_choice, 0, len(order)).long()
    lam = torch.stack([drawn[i]["lam"] for i in order], 1).gather(1, choice[:, None]).squeeze(1)
    boxes = torch.stack([drawn[i]["box"] for i in order], 1)  # (B, ops, 4)
    use_box = constant(tuple(mixers[i].pastes_box for i in order), u_choice.device, torch.bool)[choice]
    box = boxes.gather(1, choice.view(-1, 1, 1).expand(-1, 1, 4)).squeeze(1)
    return {
        "perm": permutation(u_perm, same_on_batch),
        "use_box": use_box,
        "lam": lam,
        "box": torch.where(use_box[:, None], box, 0.0),
    }


def mix(x: torch.Tensor, labels: torch.Tensor, perm: torch.Tensor, lam: torch.Tensor,
        box: torch.Tensor, use_box: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mix each sample with ``x[perm]``: by ``lam`` (MixUp) or by ``box`` (CutMix).

    Args:
        x: (B, C, H, W) float. labels: (B,) int or (B, num_classes) float.
        perm: (B,) partner indices. lam: (B,) weight of the sample itself.
        box: (B, 4) CutMix boxes (x, y, w, h). use_box: (B,) bool, CutMix for that sample.

    Returns:
        Mixed images and (B, num_classes) float32 soft labels.
    """
    if labels.is_floating_point():
        if labels.shape[1] != num_classes:
            raise ValueError(f"soft labels have {labels.shape[1]} classes, the stage num_classes={num_classes}")
        soft = labels.float()
    else:  # class ids in range: checked by the stage (check_inputs), not here (two device syncs)
        soft = F.one_hot(labels.long(), num_classes).float()
    inside = box_mask(box, x.shape[-2:])
    weight = torch.where(use_box.view(-1, 1, 1, 1), (~inside).to(x.dtype), lam.view(-1, 1, 1, 1).to(x.dtype))
    partner = x[perm]
    # lerp is exact at weight 0 and 1, so an unmixed sample comes out bit for bit.
    out = torch.lerp(partner, x, weight)
    lam_l = lam.view(-1, 1)
    return out, lam_l * soft + (1.0 - lam_l) * soft[perm]
