"""Rule: device strings and ``"nccl"`` in their positions; comparisons with them.

A device string (``"cuda"``, ``"cuda:1"``, ``f"cuda:{rank}"``, ``"cuda:{}".format(i)``)
in a device position (`flow.position`) -> the vendor's; ``"nccl"`` in a backend
position -> the vendor's backend. Elsewhere, and a comparison with ``"cuda"`` /
``"nccl"``, it is left for a person (unless `variables` rewrites it with the
variable it is compared with); ``--unsafe`` rewrites the string anywhere and
``x == "cuda"`` as ``x in ("cuda", "<dev>")``.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from ... import support
from .. import flow, scan
from ..edits import Edit, parent_of

_GET_BACKEND = frozenset({"torch.distributed.get_backend", "torch.distributed.distributed_c10d.get_backend"})


def visit_string(porter, node: ast.AST) -> None:
    if scan.is_device_string(node):
        api = _string_api(porter, node)
        if api is None:
            return
        if api.startswith("compare"):
            compare_cand(porter, node, api, "cuda", porter.dev)
        else:
            string_cand(porter, node, api, "device")
    elif scan.is_nccl_string(node) and getattr(node, "value", "").strip().lower() == "nccl":
        if flow.position(node, porter.imports) == "compare":
            compare_cand(porter, node, "compare 'nccl'", "nccl", porter.profile.backend)
        else:
            string_cand(porter, node, "backend='nccl'", "backend")


def compare_cand(porter, node: ast.AST, api: str, value: str, new: str) -> None:
    """A comparison with "cuda"/"nccl": rewritten with the target's name where the other side is a device the
    ported program makes (``x.device.type``, ``str(x.device)``); else left for a person, with where the value
    comes from (`variables` rewrites those of a ported variable); with --unsafe, ``a in ("cuda", "<dev>")``."""
    compare = holder = parent_of(node)
    if isinstance(compare, (ast.Tuple, ast.List, ast.Set)):
        compare = parent_of(compare)
    why = support.lookup(porter.profile.name, api).reason
    if api == "compare 'cuda'" and isinstance(compare, ast.Compare) and len(compare.ops) == 1 \
            and isinstance(node, ast.Constant):
        other = compare.comparators[0] if holder is compare.left or node is compare.left else compare.left
        if _device_read(porter, other):
            edit = porter.src.literal_edit(node, porter.dev + node.value[4:])
            if edit is not None:
                porter.cand(node, api, [edit], f"{porter.src.segment(node)} -> {edit[2]} (compared with a device "
                                               "of the ported program)")
                return
        origin = porter.flow.origin(other, porter.dev, porter.profile.backend)
        if origin:
            why = f"{origin}; where it holds a device of the ported program, compare with '{porter.dev}'"
    elif api == "compare 'nccl'" and isinstance(compare, ast.Compare) and len(compare.ops) == 1 \
            and isinstance(node, ast.Constant) and node.value.strip().lower() == "nccl":
        other = compare.comparators[0] if holder is compare.left or node is compare.left else compare.left
        if isinstance(other, ast.Call) and porter.imports.qualified(other.func) in _GET_BACKEND:
            edit = porter.src.literal_edit(node, porter.profile.backend)
            if edit is not None:  # the ported program's process groups are the target's backend
                porter.cand(node, api, [edit], f"{porter.src.segment(node)} -> {edit[2]} (compared with the "
                                               "backend of the ported program's process group)")
                return
        origin = porter.flow.origin(other, porter.dev, porter.profile.backend)
        if origin:
            why = f"{origin}; where it holds the ported program's backend, compare with '{porter.profile.backend}'"
    if isinstance(compare, ast.Compare) and len(compare.ops) == 1 and isinstance(node, ast.Constant) \
            and node.value == value and isinstance(compare.ops[0], (ast.Eq, ast.NotEq)) \
            and compare.comparators[0] is node:
        start, end = porter.src.span(compare)
        op = "in" if isinstance(compare.ops[0], ast.Eq) else "not in"
        edit = (start, end, f"{porter.src.segment(compare.left)} {op} ({porter.src.segment(node)}, \"{new}\")")
        porter.cand(node, api, why=why, unsafe_edits=[edit],
                    unsafe_message=f"== {value!r} -> in ({value!r}, {new!r}) [unsafe]")
    else:
        porter.cand(node, api, why=why)


def _device_read(porter, expr: ast.AST) -> bool:
    """``x.device.type``, ``x.device``, ``str(x.device)``: a device the ported program made (the target's)."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "str" \
            and len(expr.args) == 1 and not expr.keywords:
        return porter.flow.is_device_read(expr.args[0], object_too=True)  # str() of a torch.device
    return porter.flow.is_device_read(expr)


def _string_api(porter, node: ast.AST) -> Optional[str]:
    for f in porter.by_pos.get((node.lineno, node.col_offset + 1), ()):
        if f.api.startswith("compare") or "cuda" in f.api:
            return f.api
    return None


def string_cand(porter, node: ast.AST, api: str, kind: str) -> None:
    edit = literal_or_fstring_edit(porter, node, new_string(porter, node, kind))
    old = porter.src.segment(node)
    position = flow.position(node, porter.imports)
    safe = position == kind
    message = f"{old} -> {edit[2] if edit else '?'}"
    if edit is None:
        porter.cand(node, api, why=f"{old}: a string port does not rewrite (concatenated or escaped)")
    elif safe:
        porter.cand(node, api, [edit], message)
    else:
        porter.cand(node, api, why=f"{old} outside a {kind} argument: not rewritten (--unsafe does)",
                    unsafe_edits=[edit], unsafe_message=message + " [unsafe]")


def new_string(porter, node: ast.AST, kind: str) -> Optional[str]:
    if kind == "backend":
        return porter.profile.backend
    if isinstance(node, ast.Constant):
        return porter.dev + node.value[4:]
    return None  # f-strings: literal_or_fstring_edit


def literal_or_fstring_edit(porter, node: ast.AST, value: Optional[str]) -> Optional[Edit]:
    if isinstance(node, ast.Constant):
        return None if value is None else porter.src.literal_edit(node, value)
    start, end = porter.src.span(node)
    match = re.match(r"[fF][rR]?|[rR][fF]", porter.src.text[start:end])
    at = start + (match.end() if match else 0)
    quote = re.match(r"'''|\"\"\"|'|\"", porter.src.text[at:end])
    if not match or not quote or not porter.src.text.startswith("cuda", at + quote.end()):
        return None
    at += quote.end()
    return at, at + 4, porter.dev


#: The walk's handlers (`port.Porter.run`), by node type.
NODES = {ast.Constant: visit_string, ast.JoinedStr: visit_string}
