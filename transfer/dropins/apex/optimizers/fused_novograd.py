"""apex.optimizers.FusedNovoGrad, provided by transfer: apex's NovoGrad (csrc/multi_tensor_novograd.cu).

The step is apex's (apex/optimizers/fused_novograd.py): one step counter per group; per group and
precision a float32 tensor of per-parameter gradient norms in ``group["exp_avg_sq"]`` ([fp16, fp32]),
the norms themselves, not their squares, started at the first step's norms (``init_zero=False``,
so the first blend leaves them) or at 0; the update is ``amp_C.multi_tensor_novograd``'s
(transfer/dropins/_multi_tensor.py ``novograd``), fp16 launched before fp32. ``reg_inside_moment``
selects moment mode 0 (the paper's: weight decay inside the moment), else decoupled decay.
"""

import torch

from transfer.dropins import _multi_tensor as _mt

from ._apex_zero_grad import SetGradNone


class FusedNovoGrad(SetGradNone, torch.optim.Optimizer):
    """NovoGrad with apex's hyper-parameters and update rule."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, reg_inside_moment=False, grad_averaging=True, norm_type=2, init_zero=False,
                 set_grad_none=True):
        if amsgrad:
            raise RuntimeError("FusedNovoGrad does not support the AMSGrad variant.")
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay,
                        grad_averaging=grad_averaging, norm_type=norm_type, init_zero=init_zero)
        super(FusedNovoGrad, self).__init__(params, defaults)
        self.moment_mode = 0 if reg_inside_moment else 1
        self.set_grad_none = set_grad_none

    def load_state_dict(self, state_dict):
        super(FusedNovoGrad, self).load_state_dict(state_dict)
        for group in self.param_groups:  # the per-group norms follow the parameters' device, as apex moves them
            if len(group["params"]) > 0 and "exp_avg_sq" in group:
                device = group["params"][0].device
                group["exp_avg_sq"] = [group["exp_avg_sq"][0].to(device), group["exp_avg_sq"][1].to(device)]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        device = self.param_groups[0]["params"][0].device
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            group["step"] = group.get("step", 0) + 1
            lists = {torch.float16: ([], [], []), torch.float32: ([], [], [])}
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("FusedNovoGrad does not support sparse gradients, please consider SparseAdam "
                                       "instead")
                if p.dtype not in lists:
                    raise RuntimeError("FusedNovoGrad only support fp16 and fp32.")
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                g_l, p_l, m_l = lists[p.dtype]
                g_l.append(p.grad)
                p_l.append(p)
                m_l.append(state["exp_avg"])
            g_16, g_32 = lists[torch.float16][0], lists[torch.float32][0]
            if "exp_avg_sq" not in group:
                if group["init_zero"]:
                    first = [[0.0] * len(g_16), [0.0] * len(g_32)]
                elif group["norm_type"] == 0:
                    first = [[g.float().abs().max().item() for g in gl] for gl in (g_16, g_32)]
                elif group["norm_type"] == 2:
                    first = [[g.float().pow(2).sum().sqrt().item() for g in gl] for gl in (g_16, g_32)]
                else:
                    raise RuntimeError("FusedNovoGrad only support l2/inf norm now.")
                group["exp_avg_sq"] = [torch.tensor(v, dtype=torch.float32, device=device) for v in first]
            else:
                assert len(g_16) == group["exp_avg_sq"][0].numel()
                assert len(g_32) == group["exp_avg_sq"][1].numel()
            for slot, dtype in enumerate((torch.float16, torch.float32)):
                g_l, p_l, m_l = lists[dtype]
                if g_l:
                    _mt.novograd(g_l, p_l, m_l, group["exp_avg_sq"][slot], group["lr"], beta1, beta2, group["eps"],
                                 group["step"], int(group["bias_correction"]), group["weight_decay"],
                                 int(group["grad_averaging"]), self.moment_mode, group["norm_type"])
        return loss
