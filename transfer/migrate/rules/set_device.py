"""Rule (tccl, sdaa): a ``set_device`` just after ``init_process_group`` moves before it.

In the same block, when nothing in between assigns what the call reads and it
calls nothing distributed; else ``init_process_group`` is named with the fix.
"""

from __future__ import annotations

import ast
from typing import Optional, Set

from ..edits import Change, apply_edits, callee


def after_settle(porter) -> None:
    if not (porter.profile.set_device_before_init and "init_process_group" in porter.src.text):
        return
    for block in _blocks(porter.tree):
        init = next((i for i, s in enumerate(block) if _calls(s, "init_process_group")), None)
        if init is None:
            continue
        if any(_set_device(s) is not None for s in block[:init]):
            continue
        later = next((j for j in range(init + 1, len(block)) if _set_device(block[j]) is not None), None)
        if later is None:
            continue
        call = _set_device(block[later])
        read = {n.id for n in ast.walk(call) if isinstance(n, ast.Name)}
        assigned = set().union(*(_assigned(s) for s in block[init:later]))
        called = [porter.src.segment(c.func) for c in ast.walk(call) if isinstance(c, ast.Call) and c is not call]
        init_call = next(c for c in ast.walk(block[init]) if isinstance(c, ast.Call)
                         and callee(c) == "init_process_group")
        own_lines = block[later].lineno > block[later - 1].end_lineno and (
            later + 1 == len(block) or block[later + 1].lineno > block[later].end_lineno) and \
            porter.src.text[porter.src.starts[block[init].lineno - 1]:porter.src.offset(
                block[init].lineno, block[init].col_offset)].strip() == ""
        if not (read & assigned or any(_distributed(n) for n in called) or not own_lines):
            _move(porter, block[later], before=block[init])
            porter.extra_changes.append(Change(porter.path, block[later].lineno, block[later].end_lineno, "MODIFY",
                                               f"torch.{porter.dev}.set_device moved before init_process_group "
                                               f"({porter.profile.backend} needs the device set first)"))
            continue
        if _init_can_follow(porter, block, init, later):
            _move(porter, block[init], after=block[later])
            porter.extra_changes.append(Change(porter.path, block[init].lineno, block[init].end_lineno, "MODIFY",
                                               f"init_process_group moved after torch.{porter.dev}.set_device "
                                               f"({porter.profile.backend} needs the device set first; nothing "
                                               "between them uses the process group)"))
            continue
        porter.note(init_call.func, "torch.distributed.init_process_group",
                    f"{porter.profile.backend} needs the device set before init_process_group: call "
                    f"torch.{porter.dev}.set_device(local_rank) before it")


def _distributed(called: str) -> bool:
    return "distributed" in called or "get_rank" in called or "get_world_size" in called \
        or called.startswith("dist.") or "barrier" in called or "all_reduce" in called


def _lines(porter, statement: ast.stmt):
    start = porter.src.starts[statement.lineno - 1]
    end = porter.src.starts[statement.end_lineno] if statement.end_lineno < len(porter.src.starts) \
        else len(porter.src.text)
    return start, end


def _own_lines(porter, block, i) -> bool:
    statement = block[i]
    first, _ = _lines(porter, statement)
    return (i == 0 or statement.lineno > block[i - 1].end_lineno) and (
        i + 1 == len(block) or block[i + 1].lineno > statement.end_lineno) and \
        porter.src.text[first:porter.src.offset(statement.lineno, statement.col_offset)].strip() == ""


def _init_can_follow(porter, block, init, later) -> bool:
    """``init_process_group`` may move down to just after the ``set_device`` at `later`: both on lines of their
    own, nothing in between (set_device included) calls anything distributed, and nothing in between assigns
    what the init statement reads."""
    if not (_own_lines(porter, block, init) and _own_lines(porter, block, later)):
        return False
    between = block[init + 1:later + 1]
    called = [porter.src.segment(c.func) for s in between for c in ast.walk(s) if isinstance(c, ast.Call)]
    if any(_distributed(n) for n in called):
        return False
    read = {n.id for n in ast.walk(block[init]) if isinstance(n, ast.Name)}
    return not read & set().union(*(_assigned(s) for s in between))


def _move(porter, statement: ast.stmt, before: ast.stmt = None, after: ast.stmt = None) -> None:
    """Move `statement`'s lines (with the rewrites inside them) before or after another statement's lines."""
    start, end = _lines(porter, statement)
    inner = []
    for c in porter.cands.values():
        if c.enabled and all(start <= e[0] and e[1] <= end for e in c.edits):
            inner.extend(c.edits)
            c.edits = []
    moved = apply_edits(porter.src.text[start:end], [(s - start, e - start, t) for s, e, t in inner])
    at = _lines(porter, before)[0] if before is not None else _lines(porter, after)[1]
    if after is not None and not porter.src.text[:at].endswith(("\n", "\r")):
        moved = "\n" + moved.rstrip("\r\n")
    porter.extra += [(start, end, ""), (at, at, moved)]


def _blocks(tree: ast.AST):
    for node in tree._nodes:
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block



def _calls(statement: ast.AST, name: str) -> bool:
    return any(isinstance(c, ast.Call) and callee(c) == name for c in ast.walk(statement))


def _set_device(statement: ast.stmt) -> Optional[ast.Call]:
    """The call of a statement that is exactly ``torch.<x>.set_device(...)``."""
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
        return None
    func = statement.value.func
    if isinstance(func, ast.Attribute) and func.attr == "set_device" and isinstance(func.value, ast.Attribute) \
            and isinstance(func.value.value, ast.Name) and func.value.value.id == "torch":
        return statement.value
    return None


def _assigned(statement: ast.AST) -> Set[str]:
    """Names a statement may bind (over-approximated)."""
    bound = set()
    for node in ast.walk(statement):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
    return bound
