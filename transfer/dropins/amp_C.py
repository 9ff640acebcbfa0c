"""amp_C, apex's multi-tensor extension module, provided by transfer.

Loaded under the public name ``amp_C`` where apex's CUDA kernels cannot run
(see transfer/dropins/__init__.py). Same signatures as apex's
``csrc/amp_C_frontend.cpp``: ``op(chunk_size, noop_flag, tensor_lists, *args)``,
called directly or through ``apex.multi_tensor_apply.multi_tensor_applier``.
``chunk_size`` only tiled the CUDA launch and is ignored. ``noop_flag`` (an
int tensor of one element) is set to 1 when an input the kernel checks is not
finite (scale, axpby, the l2norms), never reset; sgd skips its update when it
is set; adam and lamb ignore it, as apex's kernels do. The math is in
transfer/dropins/_multi_tensor.py (float32, as the kernels compute).
"""

from transfer.dropins._missing import missing
from typing import List, Optional

import torch as _torch

from transfer.dropins import _multi_tensor as _mt

_PROVIDED = ("multi_tensor_scale", "multi_tensor_axpby", "multi_tensor_l2norm", "multi_tensor_l2norm_mp",
             "multi_tensor_unscale_l2norm", "multi_tensor_adam", "multi_tensor_sgd", "multi_tensor_lamb",
             "multi_tensor_lamb_mp", "multi_tensor_novograd", "update_scale_hysteresis")


def multi_tensor_scale(chunk_size: int, noop_flag, tensor_lists, scale: float) -> None:
    """tensor_lists = [inputs, outputs]: out = in * scale; noop_flag = 1 if an input is inf/nan."""
    _mt.check_lists(tensor_lists, 2, "multi_tensor_scale")
    _mt.scale(list(tensor_lists[0]), list(tensor_lists[1]), float(scale), noop_flag)


def multi_tensor_axpby(chunk_size: int, noop_flag, tensor_lists, a: float, b: float, arg_to_check: int) -> None:
    """tensor_lists = [x, y, out]: out = a*x + b*y; checks x (0), y (1) or both (-1) for inf/nan."""
    _mt.check_lists(tensor_lists, 3, "multi_tensor_axpby")
    _mt.axpby(tensor_lists[0], tensor_lists[1], tensor_lists[2], float(a), float(b), int(arg_to_check), noop_flag)


def multi_tensor_l2norm(chunk_size: int, noop_flag, tensor_lists, per_tensor_python: Optional[bool] = None):
    """tensor_lists = [tensors]: (total L2 norm [1], per-tensor norms [n] or [0]), float32."""
    _mt.check_lists(tensor_lists, 1, "multi_tensor_l2norm")
    return _mt.l2norm(list(tensor_lists[0]), bool(per_tensor_python), noop_flag)


multi_tensor_l2norm_mp = multi_tensor_l2norm  # apex's mixed-precision variant computes the same norms


def multi_tensor_unscale_l2norm(chunk_size: int, noop_flag, tensor_lists, inv_scale,
                                per_tensor_python: Optional[bool] = None):
    """The L2 norms of tensors * inv_scale (a float tensor of one element); the tensors are not changed."""
    _mt.check_lists(tensor_lists, 1, "multi_tensor_unscale_l2norm")
    factor = inv_scale.reshape(()).to(_torch.float32)
    scaled = [t.to(_torch.float32) * factor for t in tensor_lists[0]]
    return _mt.l2norm(scaled, bool(per_tensor_python), noop_flag)


def multi_tensor_adam(chunk_size: int, noop_flag, tensor_lists, lr: float, beta1: float, beta2: float,
                      epsilon: float, step: int, mode: int, bias_correction: int, weight_decay: float) -> None:
    """tensor_lists = [grads, params, exp_avgs, exp_avg_sqs]: one Adam step (mode 1: AdamW, 0: L2)."""
    _mt.check_lists(tensor_lists, 4, "multi_tensor_adam")
    g, p, m, v = (list(t) for t in tensor_lists)
    with _torch.no_grad():  # a kernel writes memory: Parameters themselves may be passed (DeepSpeed's bf16 lists)
        _mt.adam(g, p, m, v, float(lr), float(beta1), float(beta2), float(epsilon), int(step), int(mode),
                 int(bias_correction), float(weight_decay))


def multi_tensor_sgd(chunk_size: int, noop_flag, tensor_lists, wd: float, momentum: float, dampening: float,
                     lr: float, nesterov: bool, first_run: bool, wd_after_momentum: bool, scale: float) -> None:
    """tensor_lists = [grads, params, momentums(, fp16 model params)]: one SGD step; skipped if noop_flag is set."""
    depth = len(tensor_lists)
    if depth not in (3, 4):
        raise RuntimeError(f"multi_tensor_sgd: tensor_lists.size() != depth (expected 3 or 4 lists, got {depth})")
    _mt.check_lists(tensor_lists, depth, "multi_tensor_sgd")
    if depth == 4 and any(t.dtype != _torch.float16 for t in tensor_lists[3]):
        raise RuntimeError("multi_tensor_sgd: Additional output tensors should always be fp16.")
    if noop_flag is not None and bool(noop_flag.reshape(-1)[0]):
        return
    g, p, m = (list(t) for t in tensor_lists[:3])
    _mt.sgd(g, p, m, float(wd), float(momentum), float(dampening), float(lr), bool(nesterov), bool(first_run),
            bool(wd_after_momentum), float(scale), list(tensor_lists[3]) if depth == 4 else None)


def multi_tensor_lamb(chunk_size: int, noop_flag, tensor_lists, lr: float, beta1: float, beta2: float,
                      epsilon: float, step: int, bias_correction: int, weight_decay: float, grad_averaging: int,
                      mode: int, global_grad_norm, max_grad_norm: float, use_nvlamb_python: Optional[bool] = None):
    """tensor_lists = [grads, params, exp_avgs, exp_avg_sqs]: one LAMB step (the grads receive the updates)."""
    _mt.check_lists(tensor_lists, 4, "multi_tensor_lamb")
    g, p, m, v = (list(t) for t in tensor_lists)
    _mt.lamb(g, p, m, v, float(lr), float(beta1), float(beta2), float(epsilon), int(step), int(bias_correction),
             float(weight_decay), int(grad_averaging), int(mode), global_grad_norm, float(max_grad_norm),
             bool(use_nvlamb_python))


def multi_tensor_lamb_mp(chunk_size: int, noop_flag, tensor_lists, lr, beta1: float, beta2: float, epsilon: float,
                         step, bias_correction: int, weight_decay: float, grad_averaging: int, mode: int,
                         global_grad_norm, max_grad_norm, use_nvlamb_python: Optional[bool], found_inf, inv_scale):
    """tensor_lists = [grads, params, exp_avgs, exp_avg_sqs(, reduced-precision model params)]: one LAMB step
    of FusedMixedPrecisionLamb (lr, step, max_grad_norm: one-element tensors; grads read times inv_scale;
    nothing written where noop_flag is set, as the kernel returns early; with five lists the float32
    params are masters and the fifth list receives their new values)."""
    if len(tensor_lists) not in (4, 5):
        raise RuntimeError("multi_tensor_lamb_mp: tensor_lists.size() != depth (expected 4 or 5 lists, "
                           f"got {len(tensor_lists)})")
    g, p, m, v = (list(t) for t in tensor_lists[:4])
    _mt.lamb(g, p, m, v, lr, float(beta1), float(beta2), float(epsilon), step, int(bias_correction),
             float(weight_decay), int(grad_averaging), int(mode), global_grad_norm, max_grad_norm,
             bool(use_nvlamb_python), inv_scale=inv_scale, skip=noop_flag,
             model_out=list(tensor_lists[4]) if len(tensor_lists) == 5 else None)


def multi_tensor_novograd(chunk_size: int, noop_flag, tensor_lists, grad_norms, lr: float, beta1: float,
                          beta2: float, epsilon: float, step: int, bias_correction: int, weight_decay: float,
                          grad_averaging: int, moment_mode: int, norm_type: int) -> None:
    """tensor_lists = [grads, params, exp_avgs]: one NovoGrad step; grad_norms (float32, one per tensor)
    blends in the new per-tensor gradient norms in place first."""
    _mt.check_lists(tensor_lists, 3, "multi_tensor_novograd")
    g, p, m = (list(t) for t in tensor_lists)
    _mt.novograd(g, p, m, grad_norms, float(lr), float(beta1), float(beta2), float(epsilon), int(step),
                 int(bias_correction), float(weight_decay), int(grad_averaging), int(moment_mode), int(norm_type))


def update_scale_hysteresis(current_scale, growth_tracker, hysteresis_tracker, found_inf, growth_factor: float,
                            backoff_factor: float, growth_interval: int, hysteresis: int):
    """apex's csrc/update_scale_hysteresis.cu (Megatron's loss scaler), on one-element tensors, in place:
    an overflow first spends the hysteresis (growth tracker reset); once spent the scale backs off; a
    clean step grows the tracker and the scale every `growth_interval` steps (not to inf) and refills
    the hysteresis. Returns current_scale."""
    found = float(found_inf.reshape(()).item()) > 0
    if found:
        hysteresis_tracker.sub_(1)
        if int(hysteresis_tracker.reshape(()).item()) > 0:
            growth_tracker.zero_()
            return current_scale
        current_scale.mul_(backoff_factor)
        growth_tracker.zero_()
        return current_scale
    successful = int(growth_tracker.reshape(()).item()) + 1
    if successful == growth_interval:
        grown = current_scale * growth_factor
        if bool(_torch.isfinite(grown).all()):
            current_scale.copy_(grown)
        growth_tracker.zero_()
    else:
        growth_tracker.fill_(successful)
    hysteresis_tracker.fill_(hysteresis)
    return current_scale


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise missing('amp_C', name, _PROVIDED, 'apex')
