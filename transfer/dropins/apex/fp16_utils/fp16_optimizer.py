"""apex.fp16_utils.FP16_Optimizer: apex's legacy master-weights wrapper (apex/fp16_utils/fp16_optimizer.py until
its removal), on apex.amp's LossScaler and amp_C's scale kernel as apex had it.

Each float16 parameter of the wrapped optimizer is replaced in its param group by a float32 master copy
(its optimizer state moves along); float32 parameters stay. ``backward(loss)`` runs
(loss.float() * scale).backward(), then ``update_master_grads``: the model gradients / scale into the
masters' gradients, with the inf/nan check; under ``dynamic_loss_scale`` an overflow sets ``overflow``,
halves the scale and makes the next ``step()`` a no-op (apex.amp's rule: 2**16 start, x2 after 2000 clean
steps, or ``dynamic_loss_args``). ``step()`` steps the wrapped optimizer on the masters and copies them into
the float16 model parameters. ``clip_master_grads``, ``state_dict`` / ``load_state_dict`` (masters
included), ``zero_grad(set_grads_to_None)``, ``inspect_master_grad_data`` and the ``loss_scale``,
``state`` and ``param_groups`` properties are apex's.
"""

import torch

from transfer.dropins import _multi_tensor as _mt

from ..amp._amp_state import maybe_print
from ..amp.scaler import LossScaler
from .fp16util import clip_grad_norm


class FP16_Optimizer(object):
    """Float32 master weights and loss scaling around an optimizer of a float16 model."""

    def __init__(self, init_optimizer, static_loss_scale=1.0, dynamic_loss_scale=False, dynamic_loss_args=None,
                 verbose=True):
        self.verbose = verbose
        self.optimizer = init_optimizer
        self.fp16_groups, self.fp32_from_fp16_groups, self.fp32_from_fp32_groups = [], [], []
        for i, param_group in enumerate(self.optimizer.param_groups):
            self.maybe_print("FP16_Optimizer processing param group {}:".format(i))
            fp16_params, fp32_params, fp32_from_fp16_params = [], [], []
            for j, param in enumerate(param_group["params"]):
                if not param.requires_grad:
                    continue
                if param.type() == "torch.cuda.HalfTensor":
                    self.maybe_print("FP16_Optimizer received torch.cuda.HalfTensor with {}".format(param.size()))
                    fp16_params.append(param)
                    master_param = param.detach().clone().float()
                    master_param.requires_grad = True
                    param_group["params"][j] = master_param
                    fp32_from_fp16_params.append(master_param)
                    if param in self.optimizer.state:
                        self.optimizer.state[master_param] = self.optimizer.state.pop(param)
                elif param.type() == "torch.cuda.FloatTensor":
                    self.maybe_print("FP16_Optimizer received torch.cuda.FloatTensor with {}".format(param.size()))
                    fp32_params.append(param)
                else:
                    raise TypeError("Wrapped parameters must be either torch.cuda.FloatTensor or "
                                    "torch.cuda.HalfTensor. Received {}".format(param.type()))
            self.fp16_groups.append(fp16_params)
            self.fp32_from_fp16_groups.append(fp32_from_fp16_params)
            self.fp32_from_fp32_groups.append(fp32_params)
        self.all_fp16_params = [p for group in self.fp16_groups for p in group]
        self.all_fp32_from_fp16_params = [p for group in self.fp32_from_fp16_groups for p in group]
        self.all_fp32_from_fp32_params = [p for group in self.fp32_from_fp32_groups for p in group]
        # the optimizer's state tensors follow the masters (torch casts them in load_state_dict)
        self.optimizer.load_state_dict(self.optimizer.state_dict())
        self.dynamic_loss_scale = bool(dynamic_loss_scale)
        if dynamic_loss_scale:
            self.loss_scaler = LossScaler("dynamic", **(dynamic_loss_args or {}))
        else:
            self.loss_scaler = LossScaler(static_loss_scale)
        self.overflow = False
        self.first_closure_call_this_step = True
        self.clip_grad_norm = clip_grad_norm

    def maybe_print(self, msg):
        if self.verbose:
            print(msg)

    def __getstate__(self):
        raise RuntimeError("FP16_Optimizer should be serialized using state_dict().")

    def __setstate__(self, state):
        raise RuntimeError("FP16_Optimizer should be deserialized using load_state_dict().")

    def zero_grad(self, set_grads_to_None=False):
        for params in [group["params"] for group in self.optimizer.param_groups] + self.fp16_groups:
            for p in params:
                if set_grads_to_None:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.detach_()
                    p.grad.zero_()

    def _master_params_to_model_params(self):
        if self.all_fp16_params:
            with torch.no_grad():  # the kernel writes the parameters' memory
                _mt.scale(self.all_fp32_from_fp16_params, self.all_fp16_params, 1.0)

    def clip_master_grads(self, max_norm, norm_type=2):
        """The masters' gradients clipped to max_norm; their total norm, or -1 in an overflow state."""
        if self.overflow:
            return -1
        return self.clip_grad_norm([p for group in self.optimizer.param_groups for p in group["params"]],
                                   max_norm, norm_type)

    def state_dict(self):
        return {"loss_scaler": self.loss_scaler, "dynamic_loss_scale": self.dynamic_loss_scale,
                "overflow": self.overflow, "first_closure_call_this_step": self.first_closure_call_this_step,
                "optimizer_state_dict": self.optimizer.state_dict(), "fp32_from_fp16": self.fp32_from_fp16_groups}

    def load_state_dict(self, state_dict):
        self.loss_scaler = state_dict["loss_scaler"]
        self.dynamic_loss_scale = state_dict["dynamic_loss_scale"]
        self.overflow = state_dict["overflow"]
        self.first_closure_call_this_step = state_dict["first_closure_call_this_step"]
        self.optimizer.load_state_dict(state_dict["optimizer_state_dict"])
        for current_group, saved_group in zip(self.fp32_from_fp16_groups, state_dict["fp32_from_fp16"]):
            for current, saved in zip(current_group, saved_group):
                current.data.copy_(saved.data)

    def step(self, closure=None):
        if self.overflow:
            maybe_print("Gradient overflow.  Skipping step, reducing loss scale to {}".format(
                self.loss_scaler.loss_scale()))
            return None
        retval = self._step_with_closure(closure) if closure is not None else self.optimizer.step()
        self._master_params_to_model_params()
        return retval

    def _step_with_closure(self, closure):
        def wrapped_closure():
            if self.first_closure_call_this_step:
                self.first_closure_call_this_step = False
            else:
                self._master_params_to_model_params()
            temp_loss = closure()
            while self.overflow:
                print("OVERFLOW within closure! Skipping step, reducing loss scale to {}".format(
                    self.loss_scaler.loss_scale()))
                temp_loss = closure()
            return temp_loss

        retval = self.optimizer.step(wrapped_closure)
        self.first_closure_call_this_step = True
        return retval

    def backward(self, loss, update_master_grads=True, retain_graph=False):
        scaled_loss = loss.float() * self.loss_scaler.loss_scale()
        scaled_loss.backward(retain_graph=retain_graph)
        if update_master_grads:
            self.update_master_grads()

    def update_master_grads(self):
        """The model gradients / scale into the masters' gradients; sets ``overflow`` (dynamic scale)."""
        self.loss_scaler.clear_overflow_state()
        if self.all_fp16_params:
            model_grads, master_grads = [], []
            for model_param, master_param in zip(self.all_fp16_params, self.all_fp32_from_fp16_params):
                if model_param.grad is not None:
                    model_grads.append(model_param.grad)
                    if master_param.grad is None:
                        master_param.grad = torch.empty_like(master_param)
                    master_grads.append(master_param.grad)
            self.loss_scaler.unscale(model_grads, master_grads, self.loss_scaler.loss_scale())
        if self.all_fp32_from_fp32_params:
            grads = [p.grad for p in self.all_fp32_from_fp32_params if p.grad is not None]
            self.loss_scaler.unscale(grads, grads, self.loss_scaler.loss_scale())
        self.overflow = self.loss_scaler.update_scale()

    def inspect_master_grad_data(self):
        if self.overflow:
            print("Warning:  calling FP16_Optimizer.inspect_master_grad_data while in an overflow state.  "
                  "Gradients are currently invalid (may be inf, nan, or stale).  Returning None.")
            return None
        return [[p.grad.data if p.grad is not None else None for p in group["params"]]
                for group in self.optimizer.param_groups]

    def _get_loss_scale(self):
        return self.loss_scaler.loss_scale()

    def _set_loss_scale(self, value):
        self.loss_scaler._loss_scale = value

    loss_scale = property(_get_loss_scale, _set_loss_scale)

    def _get_state(self):
        return self.optimizer.state

    def _set_state(self, value):
        self.optimizer.state = value

    state = property(_get_state, _set_state)

    def _get_param_groups(self):
        return self.optimizer.param_groups

    def _set_param_groups(self, value):
        self.optimizer.param_groups = value

    param_groups = property(_get_param_groups, _set_param_groups)
