"""apex.optimizers.FusedLAMB, provided by transfer.

apex's LAMB (csrc/multi_tensor_lamb.cu): the global gradient norm (over every
group's fp32 and fp16 gradients) clips the gradients to ``max_grad_norm``
(taken from the constructor's defaults, as apex does); Adam moments with
``grad_averaging``; the update u = m_hat/(sqrt(v_hat)+eps) (+ wd*p with
``adam_w_mode``, the default; with adam_w_mode=False, g += wd*p before the
moments); p -= lr * trust_ratio * u with trust_ratio = ||p||/||u|| where
weight_decay != 0 or ``use_nvlamb`` (1 when either norm is 0), else 1.
As the kernel does, each gradient tensor receives its update u. One step
counter per group. Defaults as apex: eps=1e-6, weight_decay=0.01,
max_grad_norm=1.0; amsgrad raises; bfloat16 parameters raise.
"""

import torch

from transfer.dropins import _multi_tensor as _mt

from ._apex_zero_grad import SetGradNone


class FusedLAMB(SetGradNone, torch.optim.Optimizer):
    """LAMB with apex's hyper-parameters and update rule."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                 amsgrad=False, adam_w_mode=True, grad_averaging=True, set_grad_none=True, max_grad_norm=1.0,
                 use_nvlamb=False):
        if amsgrad:
            raise RuntimeError("FusedLAMB does not support the AMSGrad variant.")
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay,
                        grad_averaging=grad_averaging, max_grad_norm=max_grad_norm)
        super(FusedLAMB, self).__init__(params, defaults)
        self.adam_w_mode = 1 if adam_w_mode else 0
        self.set_grad_none = set_grad_none
        self.use_nvlamb = use_nvlamb

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        g_all_32, g_all_16 = [], []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dtype == torch.float32:
                    g_all_32.append(p.grad)
                elif p.dtype == torch.float16:
                    g_all_16.append(p.grad)
                else:
                    raise RuntimeError("FusedLAMB only support fp16 and fp32.")
        device = self.param_groups[0]["params"][0].device
        g_norm_32 = _mt.l2norm(g_all_32)[0] if g_all_32 else torch.zeros(1, device=device)
        g_norm_16 = _mt.l2norm(g_all_16)[0] if g_all_16 else torch.zeros(1, device=device)
        global_grad_norm = _mt.l2norm([g_norm_32, g_norm_16])[0]
        max_grad_norm = self.defaults["max_grad_norm"]
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            group["step"] = group.get("step", 0) + 1
            g_l, p_l, m_l, v_l = [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("FusedLAMB does not support sparse gradients, please consider SparseAdam instead")
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                g_l.append(p.grad)
                p_l.append(p)
                m_l.append(state["exp_avg"])
                v_l.append(state["exp_avg_sq"])
            for dtype in (torch.float16, torch.float32):  # apex launches fp16 then fp32
                idx = [i for i, p in enumerate(p_l) if p.dtype == dtype]
                if idx:
                    _mt.lamb([g_l[i] for i in idx], [p_l[i] for i in idx], [m_l[i] for i in idx],
                             [v_l[i] for i in idx], group["lr"], beta1, beta2, group["eps"], group["step"],
                             int(group["bias_correction"]), group["weight_decay"], int(group["grad_averaging"]),
                             self.adam_w_mode, global_grad_norm, max_grad_norm, self.use_nvlamb)
        return loss
