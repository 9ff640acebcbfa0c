"""apex.amp.scaler.LossScaler: apex's loss scale and its update rule.

Dynamic scaling: the scale starts at min(max_loss_scale, 2**16); a step whose
gradients hold inf/nan is skipped and halves the scale (not below
min_loss_scale); 2000 steps in a row without overflow double it (not above
max_loss_scale, default 2**24). Static: a fixed scale, no check. Unscaling
and the inf/nan check run as one kernel, torch.amp GradScaler's
``_amp_foreach_non_finite_check_and_unscale_`` (float32 math; the result in
the master gradients' dtype).
"""

import torch

from transfer.dropins import _multi_tensor as _mt


class LossScaler(object):
    warned_no_fused_kernel = False
    warned_unscaling_non_fp32_grad = False
    has_fused_kernel = True

    def __init__(self, loss_scale, init_scale=2. ** 16, scale_factor=2., scale_window=2000, min_loss_scale=None,
                 max_loss_scale=2. ** 24):
        if loss_scale == "dynamic":
            self.dynamic = True
            self._loss_scale = min(max_loss_scale, init_scale)
        else:
            self.dynamic = False
            self._loss_scale = loss_scale
        self._max_loss_scale = max_loss_scale
        self._min_loss_scale = min_loss_scale
        self._scale_seq_len = scale_window
        self._unskipped = 0
        self._has_overflow = False
        self._found = []  # found_inf tensors of this backward, read once in update_scale

    def loss_scale(self):
        return self._loss_scale

    def unscale(self, model_grads, master_grads, unused_scale, models_are_masters=False, scale_override=None):
        """master = model / scale (float32 math), recording whether any model grad held inf/nan."""
        if self._has_overflow:
            return
        scale = self._loss_scale if scale_override is None else scale_override
        if scale == 1.0 and models_are_masters and not self.dynamic:
            return
        pairs = [(g, m) for g, m in zip(model_grads, master_grads) if g is not None]
        if pairs:
            flag = torch.zeros(1, dtype=torch.int32, device=pairs[0][0].device)
            _mt.scale([g for g, _ in pairs], [m for _, m in pairs], 1. / scale, flag)
            self._found.append(flag)

    def unscale_with_stashed(self, model_grads, stashed_master_grads, master_grads, scale_override=None):
        """master = model / grads_scale + stashed / stashed_scale (gradient accumulation across backwards)."""
        if self._has_overflow:
            return
        grads_have_scale, stashed_have_scale, out_scale = self._loss_scale, 1.0, 1.0
        if scale_override is not None:
            grads_have_scale, stashed_have_scale, out_scale = scale_override
        if model_grads:
            flag = torch.zeros(1, dtype=torch.int32, device=model_grads[0].device)
            _mt.axpby(model_grads, stashed_master_grads, master_grads, out_scale / grads_have_scale,
                      out_scale / stashed_have_scale, 0, flag)
            self._found.append(flag)

    def clear_overflow_state(self):
        self._has_overflow = False
        self._found = []

    def update_scale(self):
        """Apply the scale rule; True when the step must be skipped (one host read per backward)."""
        if self.dynamic and not self._has_overflow and self._found:
            self._has_overflow = bool(torch.stack([f.reshape(()) for f in self._found]).any().item())
        self._found = []
        if self._has_overflow and self.dynamic:
            should_skip = True
            if self._min_loss_scale:
                self._loss_scale = max(self._min_loss_scale, self._loss_scale / 2.)
            else:
                self._loss_scale = self._loss_scale / 2.
            self._unskipped = 0
        else:
            should_skip = False
            self._unskipped += 1
        if self._unskipped == self._scale_seq_len and self.dynamic:
            self._loss_scale = min(self._max_loss_scale, self._loss_scale * 2.)
            self._unskipped = 0
        return should_skip
