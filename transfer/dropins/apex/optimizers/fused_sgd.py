"""apex.optimizers.FusedSGD, provided by transfer.

apex's SGD (csrc/multi_tensor_sgd_kernel.cu), float32 math: g *= 1/most_recent_scale
(set by apex.amp with FusedSGD), weight decay g += wd*p before momentum (after it
with ``wd_after_momentum``), momentum v = mu*v + (1-dampening)*g (v = g on the first
run), nesterov g += mu*v else g = v, p -= lr*g. "First run" is decided per launch
set from the last parameter's momentum buffer, as apex's ``get_momentums`` does.
Under apex.amp with master weights (O2) it updates the float32 masters and writes
the fp16 model weights itself, as apex does.
"""

import torch
from torch.optim.optimizer import Optimizer, required

from transfer.dropins import _multi_tensor as _mt

from ._apex_zero_grad import SetGradNone


class FusedSGD(SetGradNone, Optimizer):
    """SGD (optionally with momentum) with apex's update rule."""

    def __init__(self, params, lr=required, momentum=0, dampening=0, weight_decay=0, nesterov=False,
                 wd_after_momentum=False, materialize_master_grads=True, set_grad_none=False):
        if lr is not required and lr < 0.0:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if momentum < 0.0:
            raise ValueError("Invalid momentum value: {}".format(momentum))
        if weight_decay < 0.0:
            raise ValueError("Invalid weight_decay value: {}".format(weight_decay))
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super(FusedSGD, self).__init__(params, defaults)
        self.wd_after_momentum = wd_after_momentum
        self.materialize_master_grads = materialize_master_grads
        self.most_recent_scale = 1.0
        self.scale_set_by_backward = False
        self.set_grad_none = set_grad_none

    def __setstate__(self, state):
        super(FusedSGD, self).__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)

    def get_momentums(self, params):
        momentums = []
        first_run = True
        for p in params:
            param_state = self.state[p]
            if "momentum_buffer" not in param_state:
                first_run = True
                buf = param_state["momentum_buffer"] = torch.zeros_like(p)
                momentums.append(buf)
            else:
                first_run = False
                momentums.append(param_state["momentum_buffer"])
        return momentums, first_run

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        explicit_master_params = hasattr(self, "_amp_stash") and hasattr(self._amp_stash, "fp32_from_fp16_groups")
        for gid, group in enumerate(self.param_groups):
            first_runs = [True, True]
            if explicit_master_params:
                stash = self._amp_stash
                fp32_params = [p for p in stash.fp32_from_fp32_groups[gid] if p.grad is not None]
                fp32_grads = [p.grad for p in stash.fp32_from_fp32_groups[gid] if p.grad is not None]
                fp32_momentums, first_runs[1] = self.get_momentums(fp32_params)
                if self.materialize_master_grads:
                    fp16_model_params = [p for i, p in enumerate(stash.fp16_groups[gid])
                                         if stash.fp32_from_fp16_groups[gid][i].grad is not None]
                    fp32_from_fp16_grads = [p.grad for p in stash.fp32_from_fp16_groups[gid] if p.grad is not None]
                    fp32_from_fp16_params = [p for p in stash.fp32_from_fp16_groups[gid] if p.grad is not None]
                    fp32_from_fp16_momentums, first_runs[0] = self.get_momentums(fp32_from_fp16_params)
                    fp16_set = [fp32_from_fp16_grads, fp32_from_fp16_params, fp32_from_fp16_momentums,
                                fp16_model_params]
                else:
                    fp16_model_params = [p for p in stash.fp16_groups[gid] if p.grad is not None]
                    fp16_model_grads = [p.grad for p in stash.fp16_groups[gid] if p.grad is not None]
                    fp32_from_fp16_params = [p for i, p in enumerate(stash.fp32_from_fp16_groups[gid])
                                             if stash.fp16_groups[gid][i].grad is not None]
                    fp32_from_fp16_momentums, first_runs[0] = self.get_momentums(fp32_from_fp16_params)
                    fp16_set = [fp16_model_grads, fp32_from_fp16_params, fp32_from_fp16_momentums, fp16_model_params]
                launch_sets = [fp16_set, [fp32_grads, fp32_params, fp32_momentums]]
            else:
                fp16_params = [p for p in group["params"] if p.dtype == torch.float16 and p.grad is not None]
                fp16_grads = [p.grad for p in fp16_params]
                fp16_momentums, first_runs[0] = self.get_momentums(fp16_params)
                fp32_params = [p for p in group["params"] if p.dtype == torch.float32 and p.grad is not None]
                fp32_grads = [p.grad for p in fp32_params]
                fp32_momentums, first_runs[1] = self.get_momentums(fp32_params)
                others = [p for p in group["params"] if p.grad is not None and p.dtype not in
                          (torch.float16, torch.float32)]
                if others:
                    raise RuntimeError("multi_tensor_sgd only supports some combinations of gradient & weight "
                                       f"types. Given: gradient: {others[0].grad.dtype}, weight: {others[0].dtype}")
                launch_sets = [[fp16_grads, fp16_params, fp16_momentums], [fp32_grads, fp32_params, fp32_momentums]]
            for launch_set, first_run in zip(launch_sets, first_runs):
                if len(launch_set[0]) > 0:
                    _mt.sgd(launch_set[0], launch_set[1], launch_set[2], group["weight_decay"], group["momentum"],
                            group["dampening"], group["lr"], group["nesterov"], first_run, self.wd_after_momentum,
                            1.0 / self.most_recent_scale, launch_set[3] if len(launch_set) == 4 else None)
        self.most_recent_scale = 1.0
        self.scale_set_by_backward = False
        return loss
