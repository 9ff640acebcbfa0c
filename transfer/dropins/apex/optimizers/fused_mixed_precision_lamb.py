"""apex.optimizers.FusedMixedPrecisionLamb, provided by transfer: apex's LAMB for reduced-precision models.

apex's step (apex/optimizers/fused_mixed_precision_lamb.py) with its kernel
(csrc/multi_tensor_lamb_mp.cu, transfer/dropins/_multi_tensor.py ``lamb``): ``lr`` and ``step``
are tensors on the parameters' device (no host sync); with ``reduced_precision_dtype`` the
parameters of that dtype get float32 masters (made at the first step) and float32 moments, and the
update is written into the gradients (so rounded to their dtype) before it is applied. With a
``grad_scaler`` (torch.amp.GradScaler, which calls ``step(closure, grad_scaler=...)`` since the
optimizer says ``_step_supports_amp_scaling``) the gradients are read unscaled, ``max_grad_norm``
applies to the unscaled norm and a step with inf/nan gradients changes nothing, counter included.
"""

from collections import abc as container_abcs, defaultdict
from copy import deepcopy
from itertools import chain

import torch

from transfer.dropins import _multi_tensor as _mt


class FusedMixedPrecisionLamb(torch.optim.Optimizer):
    """LAMB with float32 masters and moments for reduced-precision parameters, apex's update rule."""

    def __init__(self, params, lr=1e-3, step=0, bias_correction=True, betas=(0.9, 0.999), eps=1e-6,
                 weight_decay=0.01, amsgrad=False, adam_w_mode=True, grad_averaging=True, max_grad_norm=1.0,
                 use_nvlamb=False, reduced_precision_dtype=None):
        if amsgrad:
            raise RuntimeError("FusedLAMB does not support the AMSGrad variant.")
        defaults = dict(lr=torch.tensor(lr, dtype=torch.float32), step=torch.tensor([step], dtype=torch.int),
                        bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay,
                        grad_averaging=grad_averaging, max_grad_norm=max_grad_norm)
        super(FusedMixedPrecisionLamb, self).__init__(params, defaults)
        device = self.param_groups[0]["params"][0].device
        for group in self.param_groups:
            for item in ("lr", "step"):
                group[item] = group[item].to(device=device)
        self._dummy_overflow_buf = torch.tensor([0], dtype=torch.int, device=device)
        self.reduced_precision_dtype = reduced_precision_dtype
        self.param_groups_full_precision = []
        self._step_supports_amp_scaling = True
        self.adam_w_mode = 1 if adam_w_mode else 0
        self.use_nvlamb = use_nvlamb

    def load_state_dict(self, state_dict):
        """torch's, except that saved tensors keep their dtype (float32 moments of reduced-precision params)."""
        state_dict = deepcopy(state_dict)
        groups, saved_groups = self.param_groups, state_dict["param_groups"]
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        id_map = dict(zip(chain.from_iterable(g["params"] for g in saved_groups),
                          chain.from_iterable(g["params"] for g in groups)))

        def cast(value):
            if isinstance(value, torch.Tensor):
                return value
            if isinstance(value, dict):
                return {k: cast(v) for k, v in value.items()}
            if isinstance(value, container_abcs.Iterable) and not isinstance(value, str):
                return type(value)(cast(v) for v in value)
            return value

        state = defaultdict(dict)
        for k, v in state_dict["state"].items():
            state[id_map[k] if k in id_map else k] = cast(v) if k in id_map else v
        param_groups = []
        for group, new_group in zip(groups, saved_groups):
            new_group["params"] = group["params"]
            param_groups.append(new_group)
        self.__setstate__({"state": state, "param_groups": param_groups})

    def _setup_full_precision_params(self):
        for group in self.param_groups:
            self.param_groups_full_precision.append({"params": [
                p.clone().detach().to(dtype=torch.float32)
                if self.reduced_precision_dtype is not None and p.dtype == self.reduced_precision_dtype else None
                for p in group["params"]]})

    def add_param_group(self, param_group):
        """torch's, with tensor defaults (lr, step) cloned per group, as apex does."""
        super().add_param_group(param_group)
        for name, default in self.defaults.items():
            if isinstance(default, torch.Tensor):
                self.param_groups[len(self.param_groups) - 1][name] = default.clone()

    @torch.no_grad()
    def step(self, closure=None, grad_scaler=None):
        loss = None
        if closure is not None:
            loss = closure()
        if len(self.param_groups_full_precision) == 0:
            self._setup_full_precision_params()
        grad_list = []
        for group in self.param_groups:
            for p in group["params"]:
                assert group["params"][0].dtype == p.dtype, \
                    "Error: Parameters are not of the identical type: {} != {}".format(group["params"][0].dtype,
                                                                                        p.dtype)
                if p.grad is not None:
                    grad_list.append(p.grad)
        device = self.param_groups[0]["params"][0].device
        found_inf = (grad_scaler._check_inf_per_device(self)[device] if grad_scaler is not None
                     else torch.zeros((1,), device=device))
        self._dummy_overflow_buf.copy_(found_inf)
        if grad_scaler:
            scale = grad_scaler._get_scale_async()
            inv_scale = scale.double().reciprocal().float()
        else:
            scale = torch.ones((1,), device=device)
            inv_scale = torch.ones((1,), device=device)
        max_grad_norm = self.defaults["max_grad_norm"] * scale  # the norm below is of the scaled gradients
        grad_norm = _mt.l2norm(grad_list, False, self._dummy_overflow_buf)[0]
        for group, group_full in zip(self.param_groups, self.param_groups_full_precision):
            beta1, beta2 = group["betas"]
            group["step"] += (self._dummy_overflow_buf != 1).to(torch.int)
            lists = [[], [], [], []] + ([[]] if self.reduced_precision_dtype is not None else [])
            for p, p_full in zip(group["params"], group_full["params"]):
                if p.grad is None:
                    continue
                assert not p.grad.is_sparse
                state = self.state[p]
                if len(state) == 0:
                    dtype = p.dtype
                    if self.reduced_precision_dtype is not None and p.dtype == self.reduced_precision_dtype:
                        dtype = torch.float32
                    state["exp_avg"] = torch.zeros_like(p, dtype=dtype)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=dtype)
                master = p_full if self.reduced_precision_dtype is not None else p
                for lst, t in zip(lists, (p.grad, master, state["exp_avg"], state["exp_avg_sq"], p)):
                    lst.append(t)
            if lists[0]:
                _mt.lamb(lists[0], lists[1], lists[2], lists[3], group["lr"], beta1, beta2, group["eps"],
                         group["step"], int(group["bias_correction"]), group["weight_decay"],
                         int(group["grad_averaging"]), self.adam_w_mode, grad_norm, max_grad_norm, self.use_nvlamb,
                         inv_scale=inv_scale, skip=self._dummy_overflow_buf,
                         model_out=lists[4] if len(lists) == 5 else None)
        return loss
