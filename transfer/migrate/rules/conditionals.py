"""Rule (consistency): a conditional expression's test and values go together; availability
tests guard what they select.

``"cuda" if torch.cuda.is_available() else "cpu"``: the test and the branches
are one group (all or none, `port.Porter.settle`). A ``torch.cuda.is_available()``
(``device_count``, ``is_initialized``, ``x.is_cuda``) test, or a comparison with ``"cuda"``
(``device.type == "cuda"``), is rewritten only when nothing it guards is left for
a person (for a comparison: nothing that fails natively, comparisons left aside),
else the CUDA branch would start running natively, half-ported. The other way
round, what a test that is left selects stays CUDA's with it
(``torch.cuda.get_rng_state() if op[2] == "cuda" else ...``, ``x == "cuda" and
torch.cuda.X()``), and so does a device string passed to a call that is left
(``torch.cuda.get_device_capability("cuda:1")``) (`port.Porter.ties`).
"""

from __future__ import annotations

import ast
from typing import List

from ..edits import Candidate, inside

# ``x.is_cuda`` too: DCGAN's ``if input.is_cuda and self.ngpu > 1: nn.parallel.data_parallel(...)``
_AVAILABILITY = frozenset({"torch.cuda.is_available", "torch.cuda.device_count", "torch.cuda.is_initialized",
                           "Tensor.is_cuda"})


def after_walk(porter) -> None:
    for node in porter.tree._nodes:
        if isinstance(node, ast.IfExp):
            atoms = cands_in(porter, [node.test])
            branches = cands_in(porter, [node.body, node.orelse], strings_only=True)
            if atoms and branches:
                porter.groups.append((atoms + branches, "a conditional expression's test and its values"))
            add_guard(porter, node.test, [node.body, node.orelse])
            tie(porter, cands_in(porter, [node.test, node.body, node.orelse]), node.test,
                "the test of its conditional expression")
        elif isinstance(node, (ast.If, ast.While)):
            add_guard(porter, node.test, list(node.body) + list(node.orelse))
        elif isinstance(node, ast.BoolOp):
            for i, value in enumerate(node.values[:-1]):
                add_guard(porter, value, node.values[i + 1:])
            tie(porter, cands_in(porter, node.values), node.values[0], "the first operand of its `and`/`or`")
        elif isinstance(node, ast.Call) and porter.by_pos.get((node.func.lineno, node.func.col_offset + 1)):
            arguments = list(node.args) + [k.value for k in node.keywords]
            tie(porter, cands_in(porter, arguments, strings_only=True), node.func, "the call it is passed to")


def tie(porter, members: List[Candidate], anchor: ast.AST, what: str) -> None:
    if members:
        porter.ties.append((members, anchor, what))


def add_guard(porter, test: ast.AST, region: List[ast.AST]) -> None:
    found = cands_in(porter, [test])
    atoms = [c for c in found if c.finding.api in _AVAILABILITY]
    if atoms:
        porter.guards.append((atoms, region, False))
    compares = [c for c in found if c.finding.api == "compare 'cuda'"]
    if compares:  # a comparison kept guards what fails natively (not another comparison, which only computes)
        porter.guards.append((compares, region, True))


def cands_in(porter, nodes: List[ast.AST], strings_only: bool = False) -> List[Candidate]:
    found = []
    for c in porter.cands.values():
        if strings_only and not (c.finding.api.startswith("device=") or c.finding.api.startswith("torch.device")
                                 or c.finding.api == "backend='nccl'"):
            continue
        if any(inside(c.finding, n) for n in nodes):
            found.append(c)
    return found
