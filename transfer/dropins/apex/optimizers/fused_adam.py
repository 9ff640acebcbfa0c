"""apex.optimizers.FusedAdam, provided by transfer.

apex's update rule (csrc/multi_tensor_adam.cu), float32 math whatever the
parameter dtype (float32 exp_avg/exp_avg_sq for every parameter):

* ``adam_w_mode=True`` (the default): p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p);
* ``adam_w_mode=False``: g += wd * p, then Adam (L2 regularization);
* m_hat = m / (1 - beta1**step), v_hat = v / (1 - beta2**step) with
  ``bias_correction``, else m and v themselves;
* one step counter per parameter group (``group["step"]``), counted at every
  ``step()``, as apex does (torch's optimizers count per parameter);
* ``amsgrad=True`` raises, as apex does; ``master_weights`` needs
  ``capturable``; capturable steps skip (and do not count) when the
  ``grad_scaler`` passed to ``step`` found inf/nan, and unscale the grads in place.

float32 parameters run torch's fused Adam(W) kernel where the target has one
(torch >= 2.4 on CPU), else torch foreach ops.
"""

import torch

from transfer.dropins import _multi_tensor as _mt

from ._apex_zero_grad import SetGradNone

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)


class FusedAdam(SetGradNone, torch.optim.Optimizer):
    """Adam / AdamW with apex's hyper-parameters and update rule."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, adam_w_mode=True,
                 weight_decay=0.0, amsgrad=False, set_grad_none=True, capturable=False, master_weights=False):
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
        if master_weights and not capturable:
            raise RuntimeError("Master weights is currently only supported with the capturable version.")
        lr = torch.tensor(lr, dtype=torch.float32) if capturable else lr
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay)
        super(FusedAdam, self).__init__(params, defaults)
        self.adam_w_mode = 1 if adam_w_mode else 0
        self.set_grad_none = set_grad_none
        self.capturable = capturable
        self.master_weights = master_weights
        self.param_groups_master = []
        for group in self.param_groups:
            self.param_groups_master.append(
                {"params": [p.clone().detach().float() if self.master_weights else None for p in group["params"]]})
        if capturable:
            for group in self.param_groups:
                if len(group["params"]) == 0:
                    continue
                group["lr"] = group["lr"].to(device=group["params"][0].device)
            self._step_supports_amp_scaling = True
        first = next((p for g in self.param_groups for p in g["params"]), None)
        self._fused = first is not None and not capturable and _mt.fused_adam_available(first, bool(self.adam_w_mode))

    @torch.no_grad()
    def step(self, closure=None, grads=None, output_params=None, scale=None, grad_norms=None, grad_scaler=None):
        """Performs a single optimization step (the remaining arguments are apex's deprecated ones)."""
        if any(p is not None for p in [grads, output_params, scale, grad_norms]):
            raise RuntimeError("FusedAdam has been updated.  Simply initialize it identically to torch.optim.Adam, "
                               "and call step() with no arguments.")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group, group_master in zip(self.param_groups, self.param_groups_master):
            if len(group["params"]) == 0:
                continue
            device = group["params"][0].device
            beta1, beta2 = group["betas"]
            skip, inv_scale = False, None
            if self.capturable:
                found_inf = (grad_scaler._check_inf_per_device(self)[device] if grad_scaler is not None
                             else torch.zeros((1,), device=device))
                skip = bool(found_inf.item())
                if grad_scaler is not None:
                    inv_scale = grad_scaler._get_scale_async().double().reciprocal().float()
            if "step" in group:
                group["step"] += (1 if not self.capturable else int(not skip))
            else:
                group["step"] = 1 if not self.capturable else torch.tensor([int(not skip)], dtype=torch.int,
                                                                              device=device)
            g_l, p_l, m_l, v_l, masters = [], [], [], [], []
            for p, p_master in zip(group["params"], group_master["params"]):
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("FusedAdam does not support sparse gradients, please consider SparseAdam instead")
                if p.dtype not in _SUPPORTED:
                    raise RuntimeError("FusedAdam only support fp16 and fp32.")
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p).float()
                    state["exp_avg_sq"] = torch.zeros_like(p).float()
                g_l.append(p.grad)
                p_l.append(p)
                m_l.append(state["exp_avg"])
                v_l.append(state["exp_avg_sq"])
                masters.append(p_master)
            if not p_l or skip:
                continue
            if inv_scale is not None:
                for g in g_l:
                    g.copy_(g.float() * inv_scale)
            step = int(group["step"]) if not torch.is_tensor(group["step"]) else int(group["step"].item())
            lr = float(group["lr"])
            if self.master_weights:
                _mt.adam(g_l, masters, m_l, v_l, lr, beta1, beta2, group["eps"], step, self.adam_w_mode,
                         int(group["bias_correction"]), group["weight_decay"])
                for p, m in zip(p_l, masters):
                    p.copy_(m)
                continue
            _mt.adam(g_l, p_l, m_l, v_l, lr, beta1, beta2, group["eps"], step, self.adam_w_mode,
                     int(group["bias_correction"]), group["weight_decay"], fused=self._fused)
        return loss
