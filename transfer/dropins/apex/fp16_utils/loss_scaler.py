"""apex.fp16_utils.LossScaler / DynamicLossScaler: apex's legacy loss scalers (apex/fp16_utils/loss_scaler.py
until its removal), for code that scales by hand.

LossScaler(scale): a fixed scale, never an overflow. DynamicLossScaler(init_scale=2**32, scale_factor=2.,
scale_window=1000): ``has_overflow(params)`` is True when a gradient holds inf/nan; ``update_scale(overflow)``
divides the scale by scale_factor on overflow (not below 1) and multiplies it by scale_factor every
scale_window iterations after the last overflow. ``backward(loss)`` runs (loss * scale).backward().
"""


class LossScaler:
    """A static loss scale."""

    def __init__(self, scale=1):
        self.cur_scale = scale

    def has_overflow(self, params):
        return False

    def _has_inf_or_nan(x):
        return False

    def update_scale(self, overflow):
        pass

    @property
    def loss_scale(self):
        return self.cur_scale

    def scale_gradient(self, module, grad_in, grad_out):
        return tuple(self.loss_scale * g for g in grad_in)

    def backward(self, loss, retain_graph=False):
        scaled_loss = loss * self.loss_scale
        scaled_loss.backward(retain_graph=retain_graph)


class DynamicLossScaler(LossScaler):
    """apex's dynamic loss scale: down on overflow, up after scale_window clean iterations."""

    def __init__(self, init_scale=2 ** 32, scale_factor=2., scale_window=1000):
        self.cur_scale = init_scale
        self.cur_iter = 0
        self.last_overflow_iter = -1
        self.scale_factor = scale_factor
        self.scale_window = scale_window

    def has_overflow(self, params):
        return any(p.grad is not None and DynamicLossScaler._has_inf_or_nan(p.grad) for p in params)

    def _has_inf_or_nan(x):
        total = float(x.float().sum())
        return total in (float("inf"), -float("inf")) or total != total

    def update_scale(self, overflow):
        if overflow:
            self.cur_scale = max(self.cur_scale / self.scale_factor, 1)
            self.last_overflow_iter = self.cur_iter
        elif (self.cur_iter - self.last_overflow_iter) % self.scale_window == 0:
            self.cur_scale *= self.scale_factor
        self.cur_iter += 1

