"""TorchScript sees torch's own builtins, and scripted code runs on the target.

``torch/jit/_builtins.py`` maps builtin ops by object identity (``id(fn) ->
"aten::zeros"``) in a table built during ``import torch``. A replaced factory
is a Python closure the table does not know, so TorchScript tried to compile it
from source and failed: ``import torch.distributed.optim`` (whose scripted
optimizers call tensor factories) and any ``@torch.jit.script`` function
calling one broke under transfer. This area runs last: for every replacement
whose original is in the table it adds the replacement under the original's
op, and on uninstall removes exactly the keys it added.

A scripted function's ``device="cuda"`` is compiled into a ``Device``
constant of its graph, out of reach of the Python replacements. `torch.jit.script`
is wrapped so that, right after compiling and before the first call, every
CUDA ``Device`` constant in the new graphs (the result's own, its methods',
and the functions it compiled along the way) names the target device instead.
Not rewritten: ``x.cuda()`` inside TorchScript (the ``aten::cuda`` op) and
models loaded with ``torch.jit.load``; they fail as on a machine without CUDA.
"""

from __future__ import annotations

import functools

import torch


def apply(ctx) -> None:
    if ctx.registry.enabled("torchscript.builtins"):
        _register_builtins(ctx)
    _retarget_scripted_code(ctx)


def _register_builtins(ctx) -> None:
    import torch.jit._builtins as builtins

    table = builtins._get_builtin_table()  # built during `import torch`; a no-op lookup then
    added = {}
    for record in ctx.registry.records():
        op = table.get(id(record.original))
        if op is not None and id(record.replacement) not in table:
            # The registry keeps `replacement` alive, so its id cannot be reused meanwhile.
            table[id(record.replacement)] = op
            added[id(record.replacement)] = op

    def undo() -> None:
        for key, op in added.items():
            if table.get(key) == op:
                del table[key]

    ctx.registry.on_revert("torchscript.builtins", undo)


def _retarget_scripted_code(ctx) -> None:
    import torch.jit._script as script_module
    import torch.jit._state as jit_state

    translate = ctx.target.translator("torch.jit.script(Device constant)")

    def retarget_graph(graph) -> None:
        for node in graph.findAllNodes("prim::Constant"):
            if node.hasAttribute("value") and node.kindOf("value") == "s" \
                    and node.output().type().kind() == "DeviceObjType":
                value = node.s("value")
                new = translate(value)
                if new is not value and str(new) != value:
                    node.s_("value", str(new))

    def compiled_names():
        return {f.qualified_name for f in jit_state._python_cu.get_functions()}

    def retarget(result, before) -> None:
        graphs = []
        if isinstance(result, torch.jit.ScriptFunction):
            graphs.append(result.graph)
        elif isinstance(result, torch.jit.ScriptModule):
            for module in result.modules():
                c = getattr(module, "_c", None)
                if c is not None:
                    graphs.extend(c._get_method(name).graph for name in c._method_names())
        for function in jit_state._python_cu.get_functions():  # helpers compiled along the way
            if function.qualified_name not in before:
                graphs.append(function.graph)
        for graph in graphs:
            retarget_graph(graph)

    for owner in (torch.jit, script_module):
        original = getattr(owner, "script")

        # A plain function, not a wrapt wrapper: torch.jit.script resolves names in the
        # frame `_frames_up` above its caller, so this layer adds exactly one frame.
        @functools.wraps(original)
        def script(obj, optimize=None, _frames_up=0, _rcb=None, example_inputs=None, *,
                   _original=original):
            before = compiled_names()
            result = _original(obj, optimize, _frames_up + 1, _rcb, example_inputs)
            retarget(result, before)
            return result

        suffix = "" if owner is torch.jit else "._script"
        ctx.registry.replace("torchscript.script" + suffix, owner, "script", script)
