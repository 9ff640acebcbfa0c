"""apex.amp.handle: scale_loss and disable_casts (apex's logic)."""

import contextlib

import torch

from ._amp_state import _amp_state, maybe_print


@contextlib.contextmanager
def scale_loss(loss, optimizers, loss_id=0, model=None, delay_unscale=False, delay_overflow_check=False):
    """Yields ``loss.float() * loss_scale``; on exit (unless ``delay_unscale``) the gradients are unscaled
    (into the float32 masters with master weights) and checked for inf/nan: with dynamic scaling an
    overflow skips the next ``optimizer.step()`` and halves the scale, as apex does."""
    if not hasattr(_amp_state, "opt_properties"):
        raise RuntimeError("Invoked 'with amp.scale_loss`, but internal Amp state has not been initialized.  "
                           "model, optimizer = amp.initialize(model, optimizer, opt_level=...) must be called "
                           "before `with amp.scale_loss`.")
    if not _amp_state.opt_properties.enabled:
        yield loss
        return
    if isinstance(optimizers, torch.optim.Optimizer):
        optimizers = [optimizers]
    loss_scaler = _amp_state.loss_scalers[loss_id]
    loss_scale = loss_scaler.loss_scale()
    if (not _amp_state.opt_properties.master_weights) and (not loss_scaler.dynamic) and loss_scale == 1.0:
        yield loss.float()
        return
    if not delay_unscale and isinstance(optimizers, list):
        for optimizer in optimizers:
            if not optimizer._amp_stash.params_have_scaled_gradients:
                optimizer._prepare_amp_backward()
    yield (loss.float()) * loss_scale
    if delay_unscale:
        for optimizer in optimizers:
            optimizer._amp_stash.params_have_scaled_gradients = True
        return
    loss_scaler.clear_overflow_state()
    for optimizer in optimizers:
        optimizer._post_amp_backward(loss_scaler)
        optimizer._amp_stash.params_have_scaled_gradients = False
    should_skip = False if delay_overflow_check else loss_scaler.update_scale()
    if should_skip:
        for optimizer in optimizers:
            if not optimizer._amp_stash.already_patched:
                def patch_step(opt, loss_scaler, loss_id):
                    opt_step = opt.step

                    def skip_step(closure=None):
                        if closure is not None:
                            raise RuntimeError("Currently, Amp does not support closure use with optimizers.")
                        maybe_print(("Gradient overflow.  Skipping step, loss scaler " +
                                     "{} reducing loss scale to {}").format(loss_id, loss_scaler.loss_scale()))
                        if hasattr(opt._amp_stash, "all_fp32_from_fp16_params"):
                            for param in opt._amp_stash.all_fp32_from_fp16_params:
                                param.grad = None
                        if hasattr(opt, "most_recent_scale"):
                            opt.most_recent_scale = 1.0
                            opt.scale_set_by_backward = False
                        opt.step = opt_step
                        opt._amp_stash.already_patched = False
                    return skip_step

                optimizer.step = patch_step(optimizer, loss_scaler, loss_id)
                optimizer._amp_stash.already_patched = True


@contextlib.contextmanager
def disable_casts():
    """O1's casts off inside the block."""
    with torch.autocast(device_type=getattr(_amp_state, "device_type", "cpu"), enabled=False):
        yield


class AmpHandle(object):
    """apex's old handle API (``handle = amp.init()``): O1's casts on for the whole process until
    ``_deactivate()`` (one ``torch.autocast`` region of the target's device type), and loss scaling with
    ``handle.scale_loss(loss, optimizer)`` / ``handle.wrap_optimizer(optimizer)`` (apex's LossScaler rule)."""

    def __init__(self, loss_scale="dynamic", enable_caching=True, verbose=False):
        from transfer.dropins import _mixed
        from .scaler import LossScaler

        self._enable_caching = enable_caching
        self._verbose = verbose
        self._cache = dict()
        self._default_scaler = LossScaler(loss_scale)
        self._is_active = True
        self._all_wrappers = []
        device_type = torch.zeros(0, device="cuda").device.type
        self._autocast = torch.autocast(device_type=device_type, dtype=_mixed.half_dtype(device_type),
                                        cache_enabled=enable_caching)
        self._autocast.__enter__()

    def is_active(self):
        return self._is_active

    @contextlib.contextmanager
    def _disable_casts(self):
        with torch.autocast(device_type=self._autocast.device, enabled=False):
            yield

    def wrap_optimizer(self, optimizer, num_loss=1):
        from .opt import OptimWrapper

        self._default_scaler = None
        return OptimWrapper(optimizer, self, num_loss)

    @contextlib.contextmanager
    def scale_loss(self, loss, optimizer):
        if not self.is_active():
            yield loss
            return
        if self._default_scaler is None:
            raise RuntimeError("After calling `handle.wrap_optimizer()`, you must explicitly use "
                               "`optimizer.scale_loss(loss)`.")
        loss_scale = self._default_scaler.loss_scale()
        yield loss * loss_scale
        should_skip = _unscale_and_update(self._default_scaler, optimizer)
        if should_skip:
            optimizer_step = optimizer.step

            def skip_step():
                maybe_print("Gradient overflow, skipping update")
                optimizer.step = optimizer_step

            optimizer.step = skip_step
        self._clear_cache()

    def _clear_cache(self):
        self._cache.clear()

    def _deactivate(self):
        if self._is_active:
            self._autocast.__exit__(None, None, None)
            self._is_active = False

    @property
    def has_cache(self):
        return self._enable_caching

    @property
    def cache(self):
        return self._cache

    def remove_cache(self, param):
        if self.has_cache and param in self.cache:
            del self.cache[param]

    @property
    def verbose(self):
        return self._verbose


class NoOpHandle(object):
    """``amp.init(enabled=False)``: nothing cast, nothing scaled."""

    def is_active(self):
        return False

    @contextlib.contextmanager
    def _disable_casts(self):
        yield

    def wrap_optimizer(self, optimizer, num_loss=1):
        from .opt import OptimWrapper

        return OptimWrapper(optimizer, self, num_loss)

    @contextlib.contextmanager
    def scale_loss(self, loss, optimizer):
        yield loss

    @property
    def has_cache(self):
        return False

    @property
    def verbose(self):
        return False

    def _clear_cache(self):
        pass

    def _deactivate(self):
        pass


def _unscale_and_update(scaler, optimizer):
    """The gradients divided by the scale in place; True when they held inf/nan (dynamic: skip the step)."""
    grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    scaler.clear_overflow_state()
    scaler.unscale(grads, grads, scaler.loss_scale(), models_are_masters=True)
    return scaler.update_scale()
