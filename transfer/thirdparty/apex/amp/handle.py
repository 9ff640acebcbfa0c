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
