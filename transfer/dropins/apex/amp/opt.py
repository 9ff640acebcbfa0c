"""apex.amp.opt.OptimWrapper: ``handle.wrap_optimizer(optimizer, num_loss)`` of apex's old handle API,
one loss scaler per loss (apex's rule), the step skipped after an overflow of any loss."""

import contextlib

from ._amp_state import maybe_print
from .handle import _unscale_and_update


class OptimWrapper(object):
    def __init__(self, optimizer, amp_handle, num_loss):
        from .scaler import LossScaler

        self._optimizer = optimizer
        self._amp_handle = amp_handle
        self._num_loss = num_loss
        self._loss_idx = 0
        self._skip_next = [False] * num_loss
        self._loss_scaler = [LossScaler("dynamic") for _ in range(num_loss)]

    @contextlib.contextmanager
    def scale_loss(self, loss):
        if not self._amp_handle.is_active():
            yield loss
            return
        scaler = self._loss_scaler[self._loss_idx]
        yield loss * scaler.loss_scale()
        self._skip_next[self._loss_idx] = _unscale_and_update(scaler, self._optimizer)
        self._loss_idx += 1
        self._amp_handle._clear_cache()

    def _cur_loss_scaler(self):
        assert 0 <= self._loss_idx < self._num_loss
        return self._loss_scaler[self._loss_idx]

    def step(self, closure=None):
        if not self._amp_handle.is_active():
            return self._optimizer.step(closure=closure)
        self._loss_idx = 0
        for group in self._optimizer.param_groups:
            for p in group["params"]:
                self._amp_handle.remove_cache(p)
        if closure is not None:
            raise NotImplementedError("The `closure` argument is unsupported by the amp optimizer wrapper.")
        if any(self._skip_next):
            maybe_print("Gradient overflow, skipping update")
            self._skip_next = [False] * self._num_loss
        else:
            return self._optimizer.step(closure=closure)

    def __getattr__(self, attr):
        return getattr(self._optimizer, attr)

    def __getstate__(self):
        return self._optimizer.__getstate__()

    def __setstate__(self):
        return self._optimizer.__setstate__()

    def __repr__(self):
        return self._optimizer.__repr__()

    def state_dict(self):
        return self._optimizer.state_dict()

    def load_state_dict(self, state_dict):
        return self._optimizer.load_state_dict(state_dict)

    def zero_grad(self):
        return self._optimizer.zero_grad()

    def add_param_group(self, param_group):
        return self._optimizer.add_param_group(param_group)
