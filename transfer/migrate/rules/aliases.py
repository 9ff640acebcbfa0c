"""Rule: aliases of torch.cuda (``import torch.cuda as tc``, ``from torch import cuda``,
``from torch.cuda import X``, ``from torch.cuda.amp import autocast``): the import is rewritten
for the vendor when every use through it is translated, else the import and all its uses are kept
and named together (a group: all or none).
"""

from __future__ import annotations

import ast
import re
from typing import Dict, List

from ... import support
from .. import names, scan
from ..edits import Candidate, key, parent_of


def before_walk(porter) -> None:
    uses: Dict[str, List[ast.Name]] = {}
    for node in porter.tree._nodes:
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
            uses.setdefault(node.id, []).append(node)
    statements: Dict[int, List[names.Binding]] = {}
    for b in porter.imports.bindings:
        if (b.qualified == "torch.cuda" or b.qualified.startswith("torch.cuda.")) \
                and porter.imports.table.get(b.local) == b.qualified:
            statements.setdefault(id(b.statement), []).append(b)
    for bindings in statements.values():
        port_alias_import(porter, bindings, uses)


def port_alias_import(porter, bindings: List[names.Binding], uses: Dict[str, List[ast.Name]]) -> None:
    statement = bindings[0].statement
    cands: List[Candidate] = []
    problems: List[str] = []
    segment_start, segment_end = porter.src.span(statement)
    segment = porter.src.text[segment_start:segment_end]
    for b in bindings:
        module_alias = b.qualified in ("torch.cuda", "torch.cuda.amp")
        for use in uses.get(b.local, ()):
            parent = parent_of(use)
            if module_alias:
                if not isinstance(parent, ast.Attribute):
                    problems.append(f"`{b.local}` used as a value (line {use.lineno})")
                    continue
                qualified = f"{b.qualified}.{parent.attr}"
                api = names.api_of(qualified) or qualified
                target: ast.AST = parent
                while isinstance(parent_of(target), ast.Attribute) and porter.finding(target, api) is None:
                    target = parent_of(target)
            else:
                qualified, api, target = b.qualified, names.api_of(b.qualified) or b.qualified, use
            if qualified in ("torch.cuda.amp.autocast", "torch.cuda.amp.GradScaler"):
                call = parent_of(target)
                if not (isinstance(call, ast.Call) and call.func is target):
                    problems.append(f"{qualified} used other than as a call (line {use.lineno})")
                    continue
                found = porter.finding(target, api) or scan.Finding(porter.path, use.lineno, use.lineno, 0, api, "")
                c = Candidate(found, [porter.src.first_arg_edit(call, f'"{porter.dev}"')], f"{qualified}(...) -> "
                              f"torch.amp.{qualified.rsplit('.', 1)[1]}(\"{porter.dev}\", ...)")
            elif b.qualified.startswith("torch.cuda.amp") or b.qualified == "torch.cuda.amp":
                problems.append(f"{qualified} (line {use.lineno}) has no torch.amp spelling here")
                continue
            else:
                cname = qualified.split(".")[2]
                verdict = support.lookup(porter.profile.name, f"torch.cuda.{cname}")
                if verdict.to != f"torch.{porter.dev}.{cname}" or cname == "amp":
                    problems.append(f"torch.cuda.{cname} (line {use.lineno}): {verdict.cls} on "
                                    f"{porter.profile.name}")
                    c = None
                else:
                    c = Candidate(porter.finding(target, api) or scan.Finding(porter.path, use.lineno, use.lineno, 0,
                                                                         api, ""), [], "")
                    c.enabled = True
            if c is not None:
                cands.append(c)
    text, problem = _alias_import_text(porter, statement, segment, bindings)
    if problem:
        problems.append(problem)
    why = ""
    if problems:
        why = (f"aliased by `{segment.splitlines()[0].strip()}` (line {statement.lineno}), which is kept: "
               + "; ".join(dict.fromkeys(problems)))
    for c in cands:
        f = c.finding
        if id(f) in porter.cands or id(f) in porter.notes or f.col == 0:
            continue
        c.message = c.message or f"{f.api} (through an alias: the import now names torch.{porter.dev})"
        if why:
            c.enabled, c.why, c.edits = False, why, []
        porter.cands[id(f)] = c
    if not why and cands:
        porter.alias_imports.append(statement)
        edit = (segment_start, segment_end, text)
        host = next(c for c in porter.cands.values() if c in cands)
        host.edits.append(edit)
        host.enabled = True
        porter.groups.append(([c for c in cands if id(c.finding) in porter.cands], "the import and its uses"))
    elif why:
        for b in bindings:  # uses through this import that produced no candidate (values, unknown names)
            for use in uses.get(b.local, ()):
                for node in (use, parent_of(use)):
                    for f in porter.by_key.get(key(node, names.api_of(porter.imports.qualified(node) or "") or ""), ()):
                        if id(f) not in porter.cands:
                            porter.notes[id(f)] = why


def _alias_import_text(porter, statement: ast.stmt, segment: str, bindings: List[names.Binding]):
    """The import rewritten for the vendor, or (segment, why not)."""
    dev = porter.dev
    if isinstance(statement, ast.Import):
        new = segment
        for b in bindings:
            if b.qualified != "torch.cuda" or not b.alias.asname:
                return segment, f"`import {b.qualified}` binds a module port does not rename"
            new, n = re.subn(r"\btorch(\s*)\.(\s*)cuda(?=\s+as\s+" + re.escape(b.alias.asname) + r"\b)",
                             rf"torch\1.\2{dev}", new, count=1)
            if not n:
                return segment, "an import spelled in a way port does not read"
        return new, ""
    module = statement.module or ""
    head = re.match(r"from\s+" + r"\s*\.\s*".join(map(re.escape, module.split("."))) + r"\s+import\b", segment)
    if head is None:
        return segment, "an import spelled in a way port does not read"
    rest = segment[head.end():]
    if module == "torch":  # from torch import cuda [as c]
        for b in bindings:
            pattern = r"\bcuda\b(?!\s+as\b)" if not b.alias.asname else r"\bcuda(?=\s+as\s+" + \
                re.escape(b.alias.asname) + r"\b)"
            rest, n = re.subn(pattern, f"{dev} as cuda" if not b.alias.asname else dev, rest, count=1)
            if not n:
                return segment, "an import spelled in a way port does not read"
        return segment[:head.end()] + rest, ""
    if module == "torch.cuda.amp":
        new_module = "torch.amp"
    elif module == "torch.cuda":
        amp = [b for b in bindings if b.qualified == "torch.cuda.amp"]
        if amp and len(amp) != len(statement.names):
            return segment, "`from torch.cuda import amp, ...` mixes amp with other names"
        new_module = "torch" if amp else f"torch.{dev}"
    else:
        return segment, f"`from {module} import ...` has no vendor spelling"
    return f"from {new_module} import" + rest, ""
