"""Rule: ``torch.cuda.X`` spelled through ``torch`` -> ``torch.<dev>.X``; ``x.is_cuda`` -> ``x.is_<dev>``.

``torch.cuda.X`` becomes the table's ``to`` where the vendor has X (a renamed
member too: ``torch.cuda.X`` -> ``torch.<dev>.Y``); ``torch.cuda.amp.autocast(...)``
-> ``torch.autocast("<dev>", ...)`` and ``torch.cuda.amp.GradScaler(...)`` ->
``torch.amp.GradScaler("<dev>", ...)``. What the vendor lacks, or transfer only
answers at run time, is left for a person with the table's reason and the
native spelling (`support.native_spelling`). ``torch.nn.DataParallel`` and its
functional form ``torch.nn.parallel.data_parallel`` are named (torch's scatter/gather
are CUDA-only). Uses through an alias of torch.cuda
are `aliases`'s.
"""

from __future__ import annotations

import ast

from ... import support
from .. import names
from ..edits import parent_of


def visit_attribute(porter, node: ast.Attribute) -> None:
    qualified = porter.imports.qualified(node)
    if qualified is None:
        if node.attr == "is_cuda":
            porter.cand(node, "Tensor.is_cuda", [porter.src.token_edit(node, f"is_{porter.dev}")],
                        f".is_cuda -> .is_{porter.dev}", expect=["is_cuda"])
        return
    api = names.api_of(qualified)
    if api in names.DATA_PARALLEL:
        note_dataparallel(porter, node, api)
        return
    if api is None or not api.startswith("torch.cuda.") or porter.finding(node, api) is None:
        return
    inner = node
    while isinstance(inner.value, ast.Attribute):
        inner = inner.value
    root = inner.value
    if not (isinstance(root, ast.Name) and root.id in porter.torch_names and inner.attr == "cuda"):
        return  # through an alias: visit_imports decides
    parent = parent_of(node)
    if api in ("torch.cuda.amp.autocast", "torch.cuda.amp.GradScaler"):
        if isinstance(parent, ast.Call) and parent.func is node and node.attr in ("autocast", "GradScaler"):
            name = root.id
            new = f"{name}.autocast" if node.attr == "autocast" else f"{name}.amp.GradScaler"
            start, end = porter.src.span(node)
            porter.cand(node, api, [(start, end, new), porter.src.first_arg_edit(parent, f'"{porter.dev}"')],
                        f"torch.cuda.amp.{node.attr}(...) -> {new.replace(name, 'torch', 1)}(\"{porter.dev}\", ...)",
                        expect=[f"{name}.cuda.amp.{node.attr}", ""])
        else:
            porter.cand(node, api, why=f"{api} used other than as a call: use torch.amp with '{porter.dev}' by hand")
        return
    cname = qualified.split(".")[2]
    verdict = support.lookup(porter.profile.name, api)
    if verdict.to == "unchanged":
        return  # torch's own (torch.cuda.OutOfMemoryError): runs as it is
    home = f"torch.{porter.dev}."
    if verdict.to.startswith(home) and (verdict.cls == support.TRANSLATED or verdict.to == home + cname):
        new = verdict.to[len(home):]
        cuda_start = porter.src.offset(inner.end_lineno, inner.end_col_offset) - 4
        if new == cname:
            edits = [(cuda_start, cuda_start + 4, porter.dev)]
            expect = ["cuda"]
        else:
            member = inner if inner is node else _member(node, inner)
            end = porter.src.offset(member.end_lineno, member.end_col_offset)
            if porter.src.text[cuda_start:end] != f"cuda.{cname}":
                porter.cand(node, api, why=f"torch.cuda.{cname} is torch.{porter.dev}.{new}: rewrite it by hand")
                return
            edits = [(cuda_start, end, f"{porter.dev}.{new}")]
            expect = [f"cuda.{cname}"]
        porter.cand(node, api, edits, f"torch.cuda.{cname} -> torch.{porter.dev}.{new}", expect=expect)
    elif verdict.cls == support.UNSUPPORTED:
        porter.cand(node, api, why=f"torch.cuda.{cname}: {verdict.cls} on {porter.profile.name}: {verdict.reason}")
    else:  # transfer answers it at run time; the ported code runs without transfer, where torch.cuda fails
        porter.cand(node, api, why=f"torch.cuda.{cname} is kept and fails without transfer (no CUDA device on "
                                 f"{porter.dev}): {support.native_spelling(porter.profile.name, api)}")


def _member(node: ast.Attribute, inner: ast.Attribute) -> ast.Attribute:
    """The ``torch.cuda.X`` attribute inside a longer chain."""
    while node.value is not inner:
        node = node.value
    return node


def visit_name(porter, node: ast.Name) -> None:
    qualified = porter.imports.table.get(node.id)
    api = names.api_of(qualified) if qualified else None
    if api in names.DATA_PARALLEL and node.id == api.rsplit(".", 1)[1]:
        note_dataparallel(porter, node, api)


def note_dataparallel(porter, node: ast.AST, api: str) -> None:
    porter.note(node, api,
                f"{api}: torch's scatter/gather are CUDA-only C++, so it fails on {porter.dev} "
                f"devices: use DistributedDataParallel (run_distributed_{porter.dev}.sh), or "
                f"model.to(\"{porter.dev}\") for one device")


#: The walk's handlers (`port.Porter.run`), by node type.
NODES = {ast.Attribute: visit_attribute, ast.Name: visit_name}
