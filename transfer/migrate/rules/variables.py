"""Rule: device (and backend) variables, rewritten with their comparisons (`flow.Flow.variables`).

A local variable, parameter default or ``--device`` option default whose every
use is a device argument is a device position: its CUDA values are rewritten
(even where `strings` alone would not) together with its comparisons with
``"cuda"``, so its tests keep their meaning; one group, all or none. A variable
passed to a parameter of this file's functions goes with that parameter.
"""

from __future__ import annotations

import ast
from typing import Dict, List, Tuple

from .. import scan
from ..edits import Candidate


def after_walk(porter) -> None:
    if not porter.has_string_findings():
        return
    variables = porter.flow.variables(porter.dev, porter.profile.backend)
    by_key = {var.key: var for var in variables}
    members_of: Dict[Tuple[int, str], List[Candidate]] = {}
    for var in variables:
        members_of[var.key] = variable_cands(porter, var)
    for var in variables:  # a variable passed to a parameter of this file: all or none with it
        for link in var.links:
            other = by_key.get(link)
            if other is None or other.blocked:
                why = (f"`{var.name}` is passed to the parameter `{other.name}`, which is kept: {other.blocked}"
                       if other is not None and other.blocked else
                       f"`{var.name}` is passed to a parameter without a CUDA default: port does not follow it")
                for c in members_of[var.key]:
                    c.enabled, c.why = False, why
            elif members_of[var.key] and members_of[link]:
                porter.groups.append((members_of[var.key] + members_of[link],
                                      f"`{var.name}` and the parameter `{other.name}` it is passed to"))
    for var in variables:  # a variable whose values are read from another: all or none with it
        for dep in var.deps:
            other = by_key.get(dep)
            if other is None or other.key == var.key:
                continue  # a value with no CUDA spelling of its own (an option defaulting to "", a device read)
            if other.blocked:
                for c in members_of[var.key]:
                    c.disable(f"`{var.name}` takes its value from `{other.name}`, which is kept: {other.blocked}")
            elif members_of[var.key] and members_of[dep]:
                porter.groups.append((members_of[var.key] + members_of[dep],
                                      f"`{var.name}` and `{other.name}`, whose value it takes"))


def variable_cands(porter, var) -> List[Candidate]:
    """The candidates of one variable's literals and comparisons (a group), or none when it is blocked."""
    literals = [porter.cands.get(id(f)) for f in _findings_at(porter, var.literals)]
    literals = [c for c in literals if c is not None]
    if var.blocked:  # literals in a device argument of their own (torch.device("cuda" ...)) stay rewritten
        for c in literals:
            if not c.enabled:
                c.why = var.blocked
        return []
    compares = []
    for node, new in var.compares:
        f = next(iter(_findings_at(porter, [node])), None)
        if f is None:
            continue
        edit = porter.src.literal_edit(node, new) if isinstance(node, ast.Constant) else None
        c = Candidate(f, [edit] if edit else [], f"{porter.src.segment(node)} -> '{new}' (compared with a ported "
                                              f"device variable)")
        if edit is None:
            c.why = "a comparison port does not rewrite"
        porter.cands[id(f)] = c
        compares.append(c)
    members = literals + compares
    if not any(c.finding.api != "backend='nccl'" or var.kind == "backend" for c in literals) \
            and not (var.kind == "device" and compares):
        return []
    for c in literals:
        if not c.enabled and c.unsafe_edits and not porter.unsafe:
            c.edits, c.message, c.enabled, c.why = c.unsafe_edits, \
                c.unsafe_message.replace(" [unsafe]", f" (`{var.name}` reaches only {var.kind} arguments)"), True, ""
            c.unsafe_edits = []
    porter.groups.append((members, f"`{var.name}`'s values and comparisons"))
    return members


def _findings_at(porter, nodes) -> List[scan.Finding]:
    out = []
    for node in nodes:
        for f in porter.by_pos.get((node.lineno, node.col_offset + 1), ()):
            if "cuda" in f.api or "nccl" in f.api:
                out.append(f)
                break
    return out
