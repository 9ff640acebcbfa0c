"""apex.amp._process_optimizer: what amp.initialize does to an optimizer (apex's logic).

With master weights (O2): at the first ``scale_loss`` the half parameters of
each group are replaced in the optimizer by float32 copies ("masters");
after backward their gradients are the model's half gradients unscaled into
float32; ``step`` updates the masters and copies them into the model;
``zero_grad`` zeroes the model's grads and drops the masters'. Without (O0,
O1, O3): the model's own gradients are unscaled in place. Gradients that
existed before the backward (accumulation) are stashed and added back, each
at its own scale, as apex does. "Half" is the dtype the model was cast to
(float16; bfloat16 on the cpu target by default).
"""

import types

import torch

from ._amp_state import maybe_print

_HALF = (torch.float16, torch.bfloat16)


class AmpOptimizerState(object):
    pass


def _type_error(param):
    return TypeError("Optimizer's parameters must be either float32 or half (float16/bfloat16) tensors on the "
                     "device. Received {}".format(param.type()))


def _master_params_to_model_params(self):
    stash = self._amp_stash
    for model, master in zip(stash.all_fp16_params, stash.all_fp32_from_fp16_params):
        model.data.copy_(master.data)


def lazy_init_with_master_weights(self):
    stash = self._amp_stash
    stash.fp16_groups, stash.fp32_from_fp16_groups, stash.fp32_from_fp32_groups = [], [], []
    for param_group in self.param_groups:
        fp16_this, fp32_this, fp32_from_fp16_this = [], [], []
        for i, param in enumerate(param_group["params"]):
            if param.requires_grad:
                if param.dtype in _HALF:
                    fp16_this.append(param)
                    master = param.detach().clone().float()
                    master.requires_grad = True
                    param_group["params"][i] = master
                    fp32_from_fp16_this.append(master)
                    if param in self.state:
                        self.state[master] = self.state.pop(param)
                elif param.dtype == torch.float32:
                    fp32_this.append(param)
                    param_group["params"][i] = param
                else:
                    raise _type_error(param)
        stash.fp16_groups.append(fp16_this)
        stash.fp32_from_fp16_groups.append(fp32_from_fp16_this)
        stash.fp32_from_fp32_groups.append(fp32_this)
    stash.all_fp16_params = [p for g in stash.fp16_groups for p in g]
    stash.all_fp32_from_fp16_params = [p for g in stash.fp32_from_fp16_groups for p in g]
    stash.all_fp32_from_fp32_params = [p for g in stash.fp32_from_fp32_groups for p in g]
    stash.all_fp16_grad_stash = [None for _ in stash.all_fp16_params]
    stash.all_fp32_from_fp32_grad_stash = [None for _ in stash.all_fp32_from_fp32_params]
    for param in stash.all_fp32_from_fp16_params:
        param.grad = None
    for param in stash.all_fp32_from_fp32_params:
        param.grad = None
    self.load_state_dict(self.state_dict())  # recast preexisting per-param state to float32


def post_backward_models_are_masters(scaler, params, stashed_grads, scale_override=None):
    grads_have_scale, stashed_have_scale, out_scale = scaler.loss_scale(), 1.0, 1.0
    if scaler.loss_scale() == 1.0 and not scaler.dynamic:
        for i in range(len(stashed_grads)):
            stashed_grads[i] = None
        return
    if scale_override is not None:
        grads_have_scale, stashed_have_scale, out_scale = scale_override
    needing_unscale, needing_unscale_with_stash, stashed = [], [], []
    for param, stashed_grad in zip(params, stashed_grads):
        if param.grad is None and stashed_grad is not None:
            param.grad = stashed_grad
        elif param.grad is not None and stashed_grad is None:
            needing_unscale.append(param.grad)
        elif param.grad is not None and stashed_grad is not None:
            needing_unscale_with_stash.append(param.grad)
            stashed.append(stashed_grad)
    if needing_unscale:
        scaler.unscale(needing_unscale, needing_unscale, None, models_are_masters=True,
                       scale_override=grads_have_scale / out_scale)
    if needing_unscale_with_stash:
        scaler.unscale_with_stashed(needing_unscale_with_stash, stashed, needing_unscale_with_stash,
                                    scale_override=(grads_have_scale, stashed_have_scale, out_scale))
    for i in range(len(stashed_grads)):
        stashed_grads[i] = None


def prepare_backward_with_master_weights(self):
    stash = self._amp_stash
    self._amp_lazy_init()
    for param in stash.all_fp16_params:
        param.grad = None
    for i, param in enumerate(stash.all_fp32_from_fp32_params):
        stash.all_fp32_from_fp32_grad_stash[i] = param.grad
        param.grad = None


def post_backward_with_master_weights(self, scaler):
    stash = self._amp_stash
    self._amp_lazy_init()
    fp16_needing_unscale, new_fp32, fp16_with_stash, preexisting_fp32 = [], [], [], []
    for fp16_param, fp32_param in zip(stash.all_fp16_params, stash.all_fp32_from_fp16_params):
        if fp16_param.grad is None and fp32_param.grad is not None:
            continue
        elif fp16_param.grad is not None and fp32_param.grad is None:
            fp32_param.grad = torch.empty_like(fp32_param)
            fp16_needing_unscale.append(fp16_param.grad)
            new_fp32.append(fp32_param.grad)
        elif fp16_param.grad is not None and fp32_param.grad is not None:
            fp16_with_stash.append(fp16_param.grad)
            preexisting_fp32.append(fp32_param.grad)
    if fp16_needing_unscale:
        scaler.unscale(fp16_needing_unscale, new_fp32, scaler.loss_scale(), models_are_masters=False)
    if fp16_with_stash:
        scaler.unscale_with_stashed(fp16_with_stash, preexisting_fp32, preexisting_fp32)
    post_backward_models_are_masters(scaler, stash.all_fp32_from_fp32_params, stash.all_fp32_from_fp32_grad_stash)


def lazy_init_no_master_weights(self):
    stash = self._amp_stash
    stash.all_fp16_params, stash.all_fp32_params = [], []
    for param_group in self.param_groups:
        for param in param_group["params"]:
            if param.dtype in _HALF:
                stash.all_fp16_params.append(param)
            elif param.dtype == torch.float32:
                stash.all_fp32_params.append(param)
            else:
                raise _type_error(param)
    stash.all_fp16_grad_stash = [None for _ in stash.all_fp16_params]
    stash.all_fp32_grad_stash = [None for _ in stash.all_fp32_params]


def prepare_backward_no_master_weights(self):
    stash = self._amp_stash
    self._amp_lazy_init()
    for i, param in enumerate(stash.all_fp16_params):
        stash.all_fp16_grad_stash[i] = param.grad
        param.grad = None
    for i, param in enumerate(stash.all_fp32_params):
        stash.all_fp32_grad_stash[i] = param.grad
        param.grad = None


def post_backward_no_master_weights(self, scaler):
    stash = self._amp_stash
    self._amp_lazy_init()
    for params, stashed_grads in ((stash.all_fp16_params, stash.all_fp16_grad_stash),
                                  (stash.all_fp32_params, stash.all_fp32_grad_stash)):
        post_backward_models_are_masters(scaler, params, stashed_grads)


def prepare_backward_with_master_weights_FusedSGD(self):
    if self.materialize_master_grads:
        prepare_backward_with_master_weights(self)
    else:
        stash = self._amp_stash
        self._amp_lazy_init()
        for i, param in enumerate(stash.all_fp16_params):
            stash.all_fp16_grad_stash[i] = param.grad
            param.grad = None
        for i, param in enumerate(stash.all_fp32_from_fp32_params):
            stash.all_fp32_from_fp32_grad_stash[i] = param.grad
            param.grad = None


def post_backward_with_master_weights_FusedSGD(self, scaler):
    if self.materialize_master_grads:
        post_backward_with_master_weights(self, scaler)
    else:
        stash = self._amp_stash
        self._amp_lazy_init()
        grads_have_scale = scaler.loss_scale()
        stashed_have_scale = self.most_recent_scale
        out_scale = grads_have_scale
        if self.scale_set_by_backward:
            out_scale = min(grads_have_scale, self.most_recent_scale)
        for params, stashed_grads in ((stash.all_fp16_params, stash.all_fp16_grad_stash),
                                      (stash.all_fp32_from_fp32_params, stash.all_fp32_from_fp32_grad_stash)):
            post_backward_models_are_masters(scaler, params, stashed_grads,
                                             (grads_have_scale, stashed_have_scale, out_scale))
        self.most_recent_scale = out_scale
        self.scale_set_by_backward = True


def _amp_lazy_init(self):
    stash = self._amp_stash
    if not stash.lazy_init_called:
        self._lazy_init_maybe_master_weights()
        stash.lazy_init_called = True


def _process_optimizer(optimizer, properties):
    from ..optimizers import FusedSGD

    if hasattr(optimizer, "_amp_stash"):
        raise RuntimeError("A given optimizer should only be passed through amp.initialize once.")
    optimizer._amp_stash = AmpOptimizerState()
    optimizer._amp_stash.lazy_init_called = False
    optimizer._amp_stash.already_patched = False
    optimizer._amp_stash.params_have_scaled_gradients = False
    for name in ("_lazy_init_maybe_master_weights", "_master_params_to_model_params", "_prepare_amp_backward",
                 "_post_amp_backward", "_amp_lazy_init"):
        if hasattr(optimizer, name):
            raise RuntimeError("Incoming optimizer already has {} defined.".format(name))
    is_fused_sgd = isinstance(optimizer, FusedSGD)
    if properties.master_weights:
        optimizer._lazy_init_maybe_master_weights = types.MethodType(lazy_init_with_master_weights, optimizer)
        optimizer._master_params_to_model_params = types.MethodType(_master_params_to_model_params, optimizer)
        old_step = optimizer.step

        def new_step(self, closure=None):
            if closure is not None:
                raise RuntimeError("Currently, Amp does not support closure use with optimizers.")
            retval = old_step()
            if not isinstance(self, FusedSGD):
                self._master_params_to_model_params()
            for param in self._amp_stash.all_fp32_from_fp16_params:
                param.grad = None
            return retval

        optimizer.step = types.MethodType(new_step, optimizer)

        def new_zero_grad(self, set_to_none=None):
            stash = self._amp_stash
            self._amp_lazy_init()
            for param in stash.all_fp16_params + stash.all_fp32_from_fp32_params:
                if param.grad is not None:
                    param.grad.detach_()
                    param.grad.zero_()
            for param in self._amp_stash.all_fp32_from_fp16_params:
                param.grad = None

        optimizer.zero_grad = types.MethodType(new_zero_grad, optimizer)
        prepare = prepare_backward_with_master_weights_FusedSGD if is_fused_sgd else prepare_backward_with_master_weights
        post = post_backward_with_master_weights_FusedSGD if is_fused_sgd else post_backward_with_master_weights
    else:
        optimizer._lazy_init_maybe_master_weights = types.MethodType(lazy_init_no_master_weights, optimizer)
        prepare, post = prepare_backward_no_master_weights, post_backward_no_master_weights
    optimizer._prepare_amp_backward = types.MethodType(prepare, optimizer)
    optimizer._post_amp_backward = types.MethodType(post, optimizer)
    optimizer._amp_lazy_init = types.MethodType(_amp_lazy_init, optimizer)
    old_add_param_group = optimizer.add_param_group

    def new_add_param_group(self, new_group):
        stash = self._amp_stash
        if not stash.lazy_init_called:
            self._lazy_init_maybe_master_weights()
            stash.lazy_init_called = True
        assert isinstance(new_group, dict), "param group must be a dict"
        new_params = new_group["params"]
        if isinstance(new_params, torch.Tensor):
            new_group["params"] = [new_params]
        elif isinstance(new_params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering of "
                            "tensors in sets will change between runs. Please use a list instead.")
        else:
            new_group["params"] = list(new_params)
        if properties.master_weights:
            fp16_this, fp32_this, fp32_from_fp16_this = [], [], []
            for i, param in enumerate(new_group["params"]):
                if param.requires_grad:
                    if param.dtype in _HALF:
                        fp16_this.append(param)
                        master = param.detach().clone().float()
                        master.requires_grad = True
                        new_group["params"][i] = master
                        fp32_from_fp16_this.append(master)
                    elif param.dtype == torch.float32:
                        fp32_this.append(param)
                    else:
                        raise _type_error(param)
            stash.fp16_groups.append(fp16_this)
            stash.fp32_from_fp16_groups.append(fp32_from_fp16_this)
            stash.fp32_from_fp32_groups.append(fp32_this)
            stash.all_fp16_params += fp16_this
            stash.all_fp32_from_fp16_params += fp32_from_fp16_this
            stash.all_fp32_from_fp32_params += fp32_this
            stash.all_fp32_from_fp32_grad_stash += [None for _ in fp32_this]
        else:
            for param in new_group["params"]:
                if param.dtype in _HALF:
                    stash.all_fp16_params.append(param)
                    stash.all_fp16_grad_stash.append(None)
                elif param.dtype == torch.float32:
                    stash.all_fp32_params.append(param)
                    stash.all_fp32_grad_stash.append(None)
                else:
                    raise _type_error(param)
        old_add_param_group(new_group)

    optimizer.add_param_group = types.MethodType(new_add_param_group, optimizer)
    return optimizer


__all__ = ["_process_optimizer", "maybe_print"]
