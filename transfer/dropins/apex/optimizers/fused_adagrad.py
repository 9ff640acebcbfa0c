"""apex.optimizers.FusedAdagrad: apex's update rule (csrc/multi_tensor_adagrad.cu) as torch foreach ops.

Per element, in float32 math: L2 mode (default) ``g += wd * p; h += g * g; p -= lr * g / (sqrt(h) + eps)``;
``adagrad_w_mode=True`` ``h += g * g; p -= lr * (g / (sqrt(h) + eps) + wd * p)``. State ``sum`` (h).
"""

import torch

from ._apex_zero_grad import SetGradNone


class FusedAdagrad(SetGradNone, torch.optim.Optimizer):
    def __init__(self, params, lr=1e-2, eps=1e-10, weight_decay=0.0, set_grad_none=True, adagrad_w_mode=False):
        defaults = dict(lr=lr, eps=eps, weight_decay=weight_decay)
        super(FusedAdagrad, self).__init__(params, defaults)
        self.adagrad_w_mode = 1 if adagrad_w_mode else 0
        self.set_grad_none = set_grad_none

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, sums = [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("FusedAdagrad does not support sparse gradients")
                if p.dtype not in (torch.float16, torch.float32):
                    raise RuntimeError("FusedAdagrad only support fp16 and fp32.")
                state = self.state[p]
                if len(state) == 0:
                    state["sum"] = torch.zeros_like(p)
                params.append(p)
                grads.append(p.grad)
                sums.append(state["sum"])
            if not params:
                continue
            lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
            p32 = [p.float() for p in params]
            g32 = [g.float() for g in grads]
            h32 = [h.float() for h in sums]
            if self.adagrad_w_mode == 0 and wd != 0:
                torch._foreach_add_(g32, p32, alpha=wd)
            torch._foreach_addcmul_(h32, g32, g32)
            denom = torch._foreach_add(torch._foreach_sqrt(h32), eps)
            step = torch._foreach_div(g32, denom)
            if self.adagrad_w_mode == 1 and wd != 0:
                torch._foreach_add_(step, p32, alpha=wd)
            torch._foreach_add_(p32, step, alpha=-lr)
            for p, new_p, h, new_h in zip(params, p32, sums, h32):
                if new_p is not p:
                    p.copy_(new_p)
                if new_h is not h:
                    h.copy_(new_h)
        return loss
