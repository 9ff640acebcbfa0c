"""Rule: ``try: <import a CUDA-only package> except ImportError: <plain torch>`` -> the fallback.

On the target the CUDA-only package (apex, flash_attn, xformers, bitsandbytes,
triton, ...: `support.THIRDPARTY_MODULES`) is not installed, so the original
takes the fallback branch there anyway; the port writes that branch in place
of the whole statement, and the uses of what the ``try`` bound are the
fallback's (no longer CUDA-facing). Written when:

* the ``try`` body starts with an import of such a package (what follows it
  there is the import's success path, which natively never runs);
* one handler, of ``ImportError`` / ``ModuleNotFoundError`` (alone or in a
  tuple), without ``as e`` read in its body; no ``finally``;
* the handler's body is plain torch (every finding in it is rewritten by
  another rule) and binds every name the ``try`` body binds that the file
  reads elsewhere;
* its lines can be dedented as text (no multi-line string crossing them).

Else nothing changes here and the other rules' reasons stand. One group
(all or none) with the uses it takes over, which `native` may have named.
"""

from __future__ import annotations

import ast
import textwrap
from typing import List, Optional, Set

from ... import support
from ..edits import Candidate, inside

_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})
_PACKAGES = frozenset(support.THIRDPARTY_MODULES) | {"apex", "amp_C"}


def after_walk(porter) -> None:
    for node in porter.tree._nodes:
        if isinstance(node, ast.Try):
            _port(porter, node)


def _package_import(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Import):
        return all(a.name.split(".")[0] in _PACKAGES for a in statement.names)
    return isinstance(statement, ast.ImportFrom) and not statement.level \
        and (statement.module or "").split(".")[0] in _PACKAGES


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return bool(kinds) and all(isinstance(k, ast.Name) and k.id in _IMPORT_ERRORS for k in kinds)


def _bound(statements: List[ast.stmt]) -> Set[str]:
    names = set()
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
    return names


def _fallback_text(porter, node: ast.Try, handler: ast.ExceptHandler) -> Optional[str]:
    """The handler's body, dedented to the ``try``'s column, or None when it cannot be done as text."""
    src = porter.src
    first, last = handler.body[0], handler.body[-1]
    indent = src.lines[node.lineno - 1][:node.col_offset]
    inner = src.lines[first.lineno - 1][:first.col_offset]
    if indent.strip() or inner.strip() or not inner.startswith(indent):
        return None  # the handler's body starts on the except line, or the indentation mixes tabs
    cut = len(inner) - len(indent)
    out = []
    for line in src.lines[first.lineno - 1:last.end_lineno]:
        if line.strip() and not line.startswith(inner):
            return None  # a continuation or a string at another indentation: not ours to move
        out.append(line[cut:] if line.strip() else line)
    text = "".join(out)
    try:
        ast.parse(textwrap.dedent(text))
    except SyntaxError:
        return None
    return text


def _port(porter, node: ast.Try) -> None:
    if not node.body or not _package_import(node.body[0]) or len(node.handlers) != 1 or node.finalbody:
        return
    handler = node.handlers[0]
    if handler.type is None or not _catches_import_error(handler):
        return
    if handler.name and any(isinstance(n, ast.Name) and n.id == handler.name for n in ast.walk(handler)):
        return
    if any(inside(f, s) for f in porter.findings for s in handler.body):
        return  # the fallback is not plain torch
    inner = {id(n) for n in ast.walk(node)}
    taken = _bound(node.body + node.orelse) - _bound(handler.body)
    reads = [n for n in porter.tree._nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
             and id(n) not in inner]
    if any(n.id in taken for n in reads):
        return  # a name only the CUDA path binds is read elsewhere
    text = _fallback_text(porter, node, handler)
    if text is None:
        return
    start = porter.src.starts[node.lineno - 1]
    end = porter.src.starts[node.end_lineno] if node.end_lineno < len(porter.src.starts) else len(porter.src.text)
    first = node.body[0]
    package = (first.names[0].name if isinstance(first, ast.Import) else first.module or "").split(".")[0]
    bound = _bound(node.body)
    uses = {(n.lineno, n.col_offset + 1) for n in reads if n.id in bound}
    members = []
    for f in porter.findings:
        if inside(f, node):
            message = (f"`try: import {package} ... except ImportError:` -> its fallback (plain torch; {package} "
                       f"is CUDA-only, not on {porter.dev})")
        elif (f.line, f.col) in uses:
            message = f"{f.api}: now the fallback's name (the `try` at line {node.lineno} is ported to it)"
        else:
            continue
        c = Candidate(f, [] if members else [(start, end, text)], message)
        c.enabled = True
        porter.cands[id(f)] = c
        porter.notes.pop(id(f), None)
        members.append(c)
    if members:
        porter.groups.append((members, f"the `try` at line {node.lineno}, its fallback and the uses it binds"))
