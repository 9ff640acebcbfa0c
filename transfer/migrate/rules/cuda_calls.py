"""Rule: ``x.cuda(...)`` -> ``x.<dev>(...)`` (or ``x.to(...)``); ``dist.is_nccl_available()``.

torch generates ``Tensor.<dev>`` / ``Module.<dev>`` with ``.cuda()``'s signature
for every PrivateUse1 plug-in, but ``x.cuda(<a device>)`` (``w.device``, a device
variable) becomes ``x.to(...)`` because torch_npu's ``Module.npu`` takes an
index only. ``torch.distributed.is_nccl_available()`` ->
``is_backend_available("<backend>")``.
"""

from __future__ import annotations

import ast

from .. import scan


def visit_call(porter, node: ast.Call) -> None:
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "cuda" and porter.imports.qualified(func) is None:
        port_cuda_method(porter, node)
    elif porter.imports.qualified(func) == "torch.distributed.is_nccl_available" and not node.args \
            and not node.keywords and isinstance(func, ast.Attribute):
        start, end = porter.src.span(node)
        head = porter.src.text[start:porter.src.offset(func.end_lineno, func.end_col_offset) - len(func.attr)]
        porter.cand(func, "torch.distributed.is_nccl_available",
                    [(start, end, f'{head}is_backend_available("{porter.profile.backend}")')],
                    f"is_nccl_available() -> is_backend_available(\"{porter.profile.backend}\")",
                    expect=[f"{head}is_nccl_available()"])


def port_cuda_method(porter, call: ast.Call) -> None:
    func = call.func
    api = next((a for a in scan.CUDA_METHOD_ROWS if porter.finding(func, a) is not None), None)
    if api is None:
        return
    if call.args and isinstance(call.args[0], ast.Starred) or any(k.arg is None for k in call.keywords) \
            or len(call.args) > 1:
        porter.cand(func, api, why=".cuda(...) with these arguments: rewrite it as .to(...) by hand")
        return
    device = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device"), None)
    if device is None or isinstance(device, ast.Constant) and isinstance(device.value, int):
        method = porter.dev
    elif porter.flow.is_device_object(device):
        method = "to"  # torch_npu's Module.npu takes an index only; .to takes a device or an index
    else:
        method = porter.dev
    porter.cand(func, api, [porter.src.token_edit(func, method)], expect=["cuda"], message=
                f".cuda(...) -> .{method}(...)" + (" (a device, not an index)" if method == "to" else ""))


#: The walk's handlers (`port.Porter.run`), by node type.
NODES = {ast.Call: visit_call}
