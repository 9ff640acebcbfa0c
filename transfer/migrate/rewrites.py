"""The torch-native rewrites `transfer port` writes instead of third-party calls, and why other rows have none.

One source for `transfer port` (`migrate/native.py`) and the docs (`migrate/docs.py`);
each key is a row of the support table (`transfer.support`). Plain data: importing
this module imports neither torch nor any patch.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional, Tuple


class Rewrite(NamedTuple):
    """A torch-native spelling `transfer port` writes instead of a third-party call (`transfer/migrate/native.py`).

    The call is bound to the original's signature (`params`); every argument is
    then passed on under its own name (`passed`; the first `positional` keep
    their position, which torch's signature shares), dropped (`dropped`: any
    value, they tune speed or memory only), or must be absent or the literal in
    `required` (then dropped: the rewrite computes the same only there). `variants`
    maps the value of the `switch` parameter (absent: `switch_default`) to the
    callable written (after ``torch.``) and the arguments written where the
    original's default differs from torch's. `when`: what the source cannot show
    and the rewrite assumes; `unsafe`: why it may compute differently (then it is
    written only under ``transfer port --unsafe``).
    """

    to: str  # the replacement, in words (docs, messages)
    when: str  # the runtime conditions under which it computes the same
    note: str = ""
    params: Tuple[str, ...] = ()
    positional: int = 0
    passed: Tuple[str, ...] = ()
    required: Mapping[str, Any] = {}
    dropped: Tuple[str, ...] = ()
    variants: Mapping[Any, Tuple[str, Mapping[str, str]]] = {}
    switch: str = ""
    switch_default: Any = None
    unsafe: str = ""
    conflicts: Tuple[str, ...] = ()  # "apex.amp": the file uses that package; ".attr": the file reads that attribute


_ADAM_PARAMS = ("params", "lr", "bias_correction", "betas", "eps", "adam_w_mode", "weight_decay", "amsgrad",
                "set_grad_none", "capturable", "master_weights")
_AUTOCAST = ("under autocast apex casts input and parameters to the autocast dtype and answers in it; torch's "
             "{} answers differently there, and whether this module runs under autocast is not visible where it "
             "is built")

#: The torch-native rewrites of rows of the support table (one source for `transfer port` and the docs).
NATIVE_REWRITES: Mapping[str, Rewrite] = {
    "apex.optimizers.FusedAdam": Rewrite(
        "torch.optim.AdamW(params, lr, betas=, eps=, weight_decay=) with apex's weight_decay default 0.0 written "
        "(torch's is 0.01); adam_w_mode=False: torch.optim.Adam (L2 added to the gradient, as apex's mode 0)",
        "float32 parameters that get a gradient at every step (apex counts steps per group, torch per parameter)",
        "torch chooses its foreach kernels; fused=True is faster where the vendor has torch's fused Adam kernel",
        params=_ADAM_PARAMS, positional=2, passed=("params", "lr", "betas", "eps", "weight_decay"),
        required={"bias_correction": True, "amsgrad": False, "capturable": False, "master_weights": False},
        dropped=("set_grad_none",),  # apex's zero_grad() sets None either way on torch >= 2.0, as torch's does
        variants={True: ("optim.AdamW", {"weight_decay": "0.0"}), False: ("optim.Adam", {})},
        switch="adam_w_mode", switch_default=True, conflicts=("apex.amp",)),
    "apex.optimizers.FusedSGD": Rewrite(
        "torch.optim.SGD(params, lr, momentum, dampening, weight_decay, nesterov)",
        "float32 parameters (weight decay before momentum, first momentum = the gradient: torch's rule too)",
        params=("params", "lr", "momentum", "dampening", "weight_decay", "nesterov", "wd_after_momentum",
                "materialize_master_grads", "set_grad_none"),
        positional=6, passed=("params", "lr", "momentum", "dampening", "weight_decay", "nesterov"),
        required={"wd_after_momentum": False}, dropped=("materialize_master_grads", "set_grad_none"),
        variants={None: ("optim.SGD", {})}, conflicts=("apex.amp",)),
    "apex.normalization.FusedLayerNorm": Rewrite(
        "torch.nn.LayerNorm(normalized_shape, eps, elementwise_affine)", "outside autocast", "memory_efficient dropped",
        params=("normalized_shape", "eps", "elementwise_affine", "memory_efficient"), positional=3,
        passed=("normalized_shape", "eps", "elementwise_affine"), dropped=("memory_efficient",),
        variants={None: ("nn.LayerNorm", {})}, unsafe=_AUTOCAST.format("torch.nn.LayerNorm (float32)")),
    "apex.normalization.FusedRMSNorm": Rewrite(
        "torch.nn.RMSNorm(normalized_shape, eps, elementwise_affine) with apex's eps 1e-5 written (torch's default "
        "is finfo(dtype).eps)", "outside autocast; torch >= 2.4 (torch.nn.RMSNorm)", "memory_efficient dropped",
        params=("normalized_shape", "eps", "elementwise_affine", "memory_efficient"), positional=3,
        passed=("normalized_shape", "eps", "elementwise_affine"), dropped=("memory_efficient",),
        variants={None: ("nn.RMSNorm", {"eps": "1e-5"})},
        unsafe=_AUTOCAST.format("torch.nn.RMSNorm") + "; torch.nn.RMSNorm needs torch >= 2.4 where the port runs"),
    "apex.parallel.convert_syncbn_model": Rewrite(
        "torch.nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)",
        "the model's BatchNorm parameters trainable and no one holding them yet (apex makes new parameters, torch "
        "moves the same ones)",
        params=("module", "process_group", "channel_last"), positional=2, passed=("module", "process_group"),
        required={"channel_last": False}, variants={None: ("nn.SyncBatchNorm.convert_sync_batchnorm", {})}),
    "apex.parallel.SyncBatchNorm": Rewrite(
        "torch.nn.SyncBatchNorm(num_features, eps, momentum, affine, track_running_stats, process_group)",
        "forward(input) (apex's forward(input, z) raises TypeError on torch's)",
        params=("num_features", "eps", "momentum", "affine", "track_running_stats", "process_group", "channel_last",
                "fuse_relu"), positional=6,
        passed=("num_features", "eps", "momentum", "affine", "track_running_stats", "process_group"),
        required={"channel_last": False, "fuse_relu": False}, variants={None: ("nn.SyncBatchNorm", {})}),
    "apex.parallel.DistributedDataParallel": Rewrite(
        "torch.nn.parallel.DistributedDataParallel(module, broadcast_buffers=False)",
        "every parameter that requires a gradient gets one (torch's DDP raises otherwise; "
        "find_unused_parameters=True by hand)",
        "apex broadcasts the parameters at construction, never the buffers, and averages the gradients: torch's DDP "
        "with broadcast_buffers=False (deprecated on torch >= 2.13, with the same meaning)",
        params=("module", "message_size", "delay_allreduce", "shared_param", "allreduce_trigger_params",
                "retain_allreduce_buffers", "allreduce_always_fp32", "num_allreduce_streams",
                "allreduce_communicators", "gradient_average", "gradient_predivide_factor",
                "gradient_average_split_factor", "prof"), positional=1, passed=("module",),
        required={"shared_param": None, "retain_allreduce_buffers": False, "allreduce_always_fp32": False,
                  "gradient_average": True, "gradient_predivide_factor": 1.0, "gradient_average_split_factor": None},
        dropped=("message_size", "delay_allreduce", "allreduce_trigger_params", "num_allreduce_streams",
                 "allreduce_communicators", "prof"),
        variants={None: ("nn.parallel.DistributedDataParallel", {"broadcast_buffers": "False"})},
        conflicts=("apex.amp", ".disable_allreduce", ".enable_allreduce")),  # amp O2/O3: half gradients, which
    # apex all-reduces then divides, torch divides first
}

_FA_WHY = ("not rewritten: scaled_dot_product_attention takes [B, H, S, D] (flash_attn [B, S, H, D]) and aligns "
           "causal masks top-left where flash_attn aligns them bottom-right: equal only when seqlen_q == seqlen_k, "
           "which the source does not show (decoding with a KV cache differs); window_size, softcap, alibi_slopes "
           "have no SDPA argument")

#: Why a third-party row has no torch-native rewrite (port names the use with this).
NO_NATIVE_REWRITE: Mapping[str, str] = {
    **{f"flash_attn.{name}": _FA_WHY for name in (
        "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "flash_attn_varlen_func",
        "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache")},
    "xformers.ops.memory_efficient_attention": (
        "not rewritten: [B, M, H, K] inputs and xformers' attn_bias classes (LowerTriangularMask aligns top-left, "
        "...FromBottomRight bottom-right, BlockDiagonalMask packs sequences) have no one SDPA spelling"),
    "apex.optimizers.FusedLAMB": "not rewritten: torch has no LAMB optimizer",
    "apex.normalization.MixedFusedLayerNorm": (
        "not rewritten: it answers in the parameters' dtype; torch.nn.LayerNorm answers in the input's"),
    "apex.normalization.MixedFusedRMSNorm": (
        "not rewritten: it answers in the parameters' dtype; torch.nn.RMSNorm answers in the input's"),
    "apex.amp.initialize": (
        "not rewritten: apex.amp's opt levels cast the model and wrap the optimizers; port it by hand to "
        "torch.autocast and torch.amp.GradScaler"),
    "apex.amp.scale_loss": "not rewritten: use torch.amp.GradScaler's scale(loss).backward() and step(optimizer)",
}


def native_rewrite(api: str) -> Optional[Rewrite]:
    """The torch-native rewrite of a row, or None."""
    return NATIVE_REWRITES.get(api)
