"""flash_attn.losses.cross_entropy (2.7 API) in torch: ``CrossEntropyLoss`` and ``cross_entropy_loss``.

Per row, in float32 as flash-attention's kernel: ``lse = logsumexp(logit_scale * logits)``; a row whose
label is ``ignore_index`` has loss 0 (and z-loss 0); otherwise ``loss = lse - smoothing * sum(scaled)
/ n_classes - (1 - smoothing) * scaled[label]`` (``lse - scaled[label]`` without smoothing), plus the
z-loss ``lse_square_scale * lse**2``. ``reduction="mean"`` divides by the rows not ignored.
``inplace_backward`` is accepted (it only saved memory). Tensor parallelism over the vocabulary
(``process_group``) is not provided: NotImplementedError.
"""

from typing import Optional, Tuple

import torch
import torch.nn as nn

__all__ = ["CrossEntropyLoss", "cross_entropy_loss"]


def cross_entropy_loss(logits: torch.Tensor, labels: torch.Tensor, precomputed_lse: Optional[torch.Tensor] = None,
                       label_smoothing: float = 0.0, logit_scale: float = 1.0, lse_square_scale: float = 0.0,
                       ignore_index=-100, inplace_backward: bool = False,
                       process_group=None) -> Tuple[torch.Tensor, torch.Tensor]:
    """(losses, z_losses), each (batch,) float32; z_losses for logging only (no gradient)."""
    if process_group is not None:
        raise NotImplementedError("flash_attn's cross_entropy_loss with a process_group (the vocabulary split "
                                  "over tensor-parallel ranks) is not provided by transfer")
    scaled = logits.float() * logit_scale
    lse = torch.logsumexp(scaled, dim=-1) if precomputed_lse is None else precomputed_lse.float()
    ignored = labels == ignore_index
    n_classes = scaled.shape[-1]
    in_range = (labels >= 0) & (labels < n_classes)
    picked = scaled.gather(-1, torch.where(in_range, labels, 0).long().unsqueeze(-1)).squeeze(-1)
    if label_smoothing > 0:
        loss = lse - label_smoothing * scaled.sum(-1) / n_classes - (1 - label_smoothing) * picked
        loss = torch.where(in_range, loss, label_smoothing * (lse - scaled.sum(-1) / n_classes))
    else:
        loss = torch.where(in_range, lse - picked, torch.zeros_like(lse))
    z_loss = lse_square_scale * lse * lse
    loss = loss + z_loss
    zero = torch.zeros_like(loss)
    return torch.where(ignored, zero, loss), torch.where(ignored, zero, z_loss).detach()


class CrossEntropyLoss(nn.Module):
    def __init__(self, ignore_index=-100, reduction="mean", label_smoothing=0.0, logit_scale=1.0,
                 lse_square_scale=0.0, inplace_backward=False, process_group=None, return_z_loss=False):
        super().__init__()
        if reduction not in ["mean", "none", "sum"]:
            raise NotImplementedError("Only support reduction = 'mean' or 'none' or 'sum'")
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing
        self.logit_scale = logit_scale
        self.lse_square_scale = lse_square_scale
        self.inplace_backward = inplace_backward
        self.process_group = process_group
        self.return_z_loss = return_z_loss

    def forward(self, input, target, precomputed_lse=None):
        loss, z_loss = cross_entropy_loss(input, target, precomputed_lse=precomputed_lse,
                                          label_smoothing=self.label_smoothing, logit_scale=self.logit_scale,
                                          lse_square_scale=self.lse_square_scale, ignore_index=self.ignore_index,
                                          inplace_backward=self.inplace_backward, process_group=self.process_group)
        count = (target != self.ignore_index).sum()
        if self.reduction == "mean":
            loss = loss.sum() / count
        elif self.reduction == "sum":
            loss = loss.sum()
        if not self.return_z_loss:
            return loss
        if self.reduction == "mean":
            z_loss = z_loss.sum() / count
        elif self.reduction == "sum":
            z_loss = z_loss.sum()
        return loss, z_loss
