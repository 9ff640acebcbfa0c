"""``transfer port``: rewrite CUDA spellings to a vendor's own, decided on scan's findings.

One parse (`scan.parse`, Python's `ast`), one resolver (`names`), one list of
findings (`scan.scan_tree`): every finding scan reports gets exactly one
disposition here, so what scan calls translated is what port rewrites, and a
second run over a ported tree leaves exactly what the first run left.

* rewritten (a MODIFY row): the finding's spelling is replaced in the source
  text, token by token at the positions `ast` gives; comments and formatting
  everywhere else are kept byte for byte;
* left for a person (an UNSUPPORTED row, and a line of unsupported_api.csv):
  port could not rewrite it safely, or the table classes it unsupported, or it
  is a third-party CUDA-only package (the ported code runs without transfer);
* kept: the table says it runs as it is (DDP, cudnn flags, init_process_group
  with a vendor backend, ...): no row.

Safe rewrites (always):
  ``torch.cuda.X`` -> ``torch.<dev>.X`` where the vendor has X (the table's
  ``to``; aliases too: ``import torch.cuda as tc``, ``from torch import cuda``,
  ``from torch.cuda import X`` rewrite the import when every use is
  translated); ``torch.cuda.amp.autocast(...)`` -> ``torch.autocast("<dev>",
  ...)``, ``GradScaler(...)`` -> ``torch.amp.GradScaler("<dev>", ...)`` (also
  through ``from torch.cuda.amp import ...`` / ``from torch.cuda import amp``);
  ``x.cuda(...)`` -> ``x.<dev>(...)`` (torch generates ``Tensor.<dev>`` /
  ``Module.<dev>`` with ``.cuda()``'s signature for every PrivateUse1 plug-in),
  but ``x.cuda(<a device>)`` (``w.device``, a device variable) -> ``x.to(...)``
  because torch_npu's ``Module.npu`` takes an index only; ``x.is_cuda`` ->
  ``x.is_<dev>``; ``dist.is_nccl_available()`` ->
  ``dist.is_backend_available("<backend>")``; device strings in a device
  position, ``"nccl"`` in a backend position; the vendor import, once.
  A *device position* is a device argument (``.to()``, ``device=``,
  ``map_location=``, ``torch.device()``, ...), a branch of a conditional
  expression in one, or a local variable / parameter / ``--device`` option
  default that holds only devices (`flow`: literals, f-strings, other such
  variables, options, a parameter's values at every call in view): its
  comparisons with ``"cuda"`` (``==``, ``in``, substrings) are rewritten with
  it, so its tests keep their meaning. Comparisons of ``x.device.type``,
  ``device.type``, ``str(x.device)`` with ``"cuda"`` and of ``get_backend()``
  with ``"nccl"`` take the target's names (every device and process group of a
  ported program is the target's); where a compared value comes from outside
  (a config, a parameter whose callers are elsewhere), the line is left and
  the reason says where the value comes from. ``try: import <CUDA-only
  package> except ImportError: <plain torch>`` becomes the fallback.
Consistency (checked here, `Porter.settle`): a conditional expression's test and
  branches, an import and its uses, a device variable's values and
  comparisons are rewritten together or not at all; a ``torch.cuda.is_available()``
  test is rewritten only when nothing it guards is left for a person (else the
  CUDA branch would start running natively, half-ported).
Torch-native (`rules.native`, rows of ``rewrites.NATIVE_REWRITES``): apex's FusedAdam,
  FusedSGD, SyncBatchNorm, convert_syncbn_model and DistributedDataParallel
  calls -> their torch spellings where the arguments show they compute the
  same, an apex import and its uses together; FusedLayerNorm / FusedRMSNorm
  with ``--unsafe`` (autocast is not visible where they are built).
Unsafe (``--unsafe``): device and backend strings anywhere, and ``== "cuda"``
  -> ``in ("cuda", "<dev>")`` (``"nccl"`` likewise).
On tccl (sdaa) a ``set_device`` statement just after ``init_process_group`` in
the same block moves before it when nothing in between assigns what it reads,
or else the ``init_process_group`` moves down after it when nothing in between
uses the process group.

Each rewrite is a rule module of `rules` (its docstring says what it rewrites
and when); the edit machinery they share is `edits`. `Porter` holds one file's
findings and the rules' candidates, settles the groups and writes the text;
`port_files` runs it over trees and writes the reports.
"""

from __future__ import annotations

import ast
import bisect
import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from .. import support
from ..profiles import PROFILES
from . import flow, names, scan
from .rules import ALL as RULES, native as native_rule
from .edits import Candidate, Change, Edit, SourceText, apply_edits, inside, key

__all__ = ["Change", "Ported", "Porter", "check_profile", "half_ported", "port_source", "port_tree"]


class Ported(NamedTuple):
    text: str
    changes: List[Change]
    unsafe_skipped: int  # rewrites --unsafe would make


class Porter:
    """One file being ported: scan's findings, the rules' candidates for them, and what settles them."""

    def __init__(self, tree: ast.Module, text: str, path: str, profile: str, unsafe: bool,
                 findings: List[scan.Finding], imports: names.Imports):
        self.tree, self.src, self.path, self.unsafe = tree, SourceText(text), path, unsafe
        self.profile = PROFILES[profile]
        self.dev = self.profile.device_type
        self.imports = imports
        self.findings = findings
        self.by_key: Dict[Tuple[int, int, str], List[scan.Finding]] = {}
        self.by_pos: Dict[Tuple[int, int], List[scan.Finding]] = {}
        for f in findings:
            self.by_key.setdefault((f.line, f.col, f.api), []).append(f)
            self.by_pos.setdefault((f.line, f.col), []).append(f)
        self.cands: Dict[int, Candidate] = {}  # id(finding) -> its candidate
        self.notes: Dict[int, str] = {}  # id(finding) -> why it is left (explicit)
        self.groups: List[Tuple[List[Candidate], str]] = []  # all or none
        self.guards: List[Tuple[List[Candidate], List[ast.AST], bool]] = []  # tests, what they guard, failing only
        self.ties: List[Tuple[List[Candidate], ast.AST, str]] = []  # rewrites kept when a use in the node is left
        self.roots: Dict[int, Tuple[int, str]] = {}  # id(cand) -> the line and reason that disabled its group
        self.extra: List[Edit] = []  # edits that belong to no finding (imports, moves)
        self.extra_changes: List[Change] = []
        self.torch_names = set(imports.locals_for("torch"))
        self._flow: Optional[flow.Flow] = None
        self.alias_imports: List[ast.stmt] = []  # torch.cuda alias imports rewritten (`rules.aliases`)

    @property
    def flow(self) -> flow.Flow:
        """The module's data flow (`flow.Flow`), built when a rule first asks: most files never need it."""
        if self._flow is None:
            self._flow = flow.Flow(self.tree, self.imports)
        return self._flow

    def has_string_findings(self) -> bool:
        """Whether scan found a device or backend string (a literal, an f-string, a comparison with one): without
        one, no variable has a CUDA value or comparison to port."""
        return any(n.__class__ in (ast.Constant, ast.JoinedStr) and (n.lineno, n.col_offset + 1) in self.by_pos
                   for n in self.tree._nodes)

    # ---------------------------------------------------------------- bookkeeping
    def finding(self, node: ast.AST, api: str) -> Optional[scan.Finding]:
        """The scan finding of `api` at `node` not yet claimed."""
        for f in self.by_key.get(key(node, api), ()):
            if id(f) not in self.cands and id(f) not in self.notes:
                return f
        return None

    def cand(self, node: ast.AST, api: str, edits: Sequence[Edit] = (), message: str = "", why: str = "",
             unsafe_edits: Sequence[Edit] = (), unsafe_message: str = "", expect: Sequence[str] = ()) -> Optional[Candidate]:
        """Claim `node`'s finding of `api` with its rewrite; `expect`: the text each edit replaces (checked: Python
        3.8 gives nodes inside f-strings wrong columns, and a rewrite at the wrong place must not happen)."""
        f = self.finding(node, api)
        if f is None:
            return None
        if any(self.src.text[e[0]:e[1]] != want for e, want in zip(edits, expect)):
            edits, why = (), (why or f"{api}: where this Python's parser puts it is not where it is written "
                                      "(inside an f-string on Python 3.8): rewrite it by hand")
        c = Candidate(f, edits, message, why, unsafe_edits, unsafe_message)
        if self.unsafe and not c.enabled and c.unsafe_edits:
            c.edits, c.message, c.enabled, c.why = c.unsafe_edits, c.unsafe_message, True, ""
        self.cands[id(f)] = c
        return c

    def note(self, node: ast.AST, api: str, why: str) -> None:
        f = self.finding(node, api)
        if f is not None:
            self.notes[id(f)] = why

    # ---------------------------------------------------------------- the rules
    def run(self, rules: Sequence = RULES) -> Ported:
        """Apply `rules` (phases in the order `rules` describes), settle, and write."""
        for rule in rules:
            if hasattr(rule, "before_walk"):
                rule.before_walk(self)
        handlers: Dict[type, list] = {}
        for rule in rules:
            for kind, handler in getattr(rule, "NODES", {}).items():
                handlers.setdefault(kind, []).append(handler)
        for node in self.tree._nodes:
            for handler in handlers.get(node.__class__, ()):
                handler(self, node)
        for rule in rules:
            if hasattr(rule, "after_walk"):
                rule.after_walk(self)
        self.settle()
        for rule in rules:
            if hasattr(rule, "after_settle"):
                rule.after_settle(self)
        return self.finish()

    # ---------------------------------------------------------------- consistency
    def disposition_left(self, f: scan.Finding) -> bool:
        c = self.cands.get(id(f))
        if c is not None:
            return not c.enabled
        if id(f) in self.notes:
            return True
        return self.left_by_table(f) is not None

    def left_by_table(self, f: scan.Finding) -> Optional[str]:
        if f.api == "apex" or f.api in support.THIRDPARTY_ROWS:
            verdict = support.lookup(self.profile.name, f.api)
            hint = native_rule.table_hint(f.api)
            if verdict.cls == support.UNSUPPORTED:
                return verdict.reason + hint
            return (f"{f.api}: under transfer, {verdict.cls} ({verdict.to or verdict.reason}); the ported code runs "
                    f"without transfer: use the vendor's equivalent, or keep running the original with transfer-run"
                    + hint)
        if f.api.startswith("compare"):
            return None if f.api in ("compare 'cuda'", "compare 'nccl'") and False else \
                support.lookup(self.profile.name, f.api).reason
        try:
            verdict = support.lookup(self.profile.name, f.api)
        except KeyError:
            return None
        return verdict.reason if verdict.cls == support.UNSUPPORTED else None

    def settle(self) -> None:
        """Disable rewrites until every group is all-or-none and no availability test guards a leftover."""
        changed = True
        while changed:
            changed = False
            for members, what in self.groups:
                off = next((c for c in members if not c.enabled), None)
                if off is not None and any(c.enabled for c in members):
                    line, root = self.roots.get(id(off), (off.finding.line, off.why or "not rewritten"))
                    why = f"kept with {what}, because of line {line}: {root}"
                    for c in members:
                        if c.disable(why):
                            self.roots[id(c)] = (line, root)
                            changed = True
            for atoms, region, failing_only in self.guards:
                if not any(c.enabled for c in atoms):
                    continue
                left = next((f for f in self.findings if any(inside(f, n) for n in region)
                             and self.disposition_left(f)
                             and not (failing_only and f.api.startswith("compare"))), None)
                if left is not None:
                    why = (f"kept as CUDA's test (False natively, so the fallback runs): it guards {left.api} at "
                           f"line {left.line}, which is left for a person")
                    for c in atoms:
                        changed |= c.disable(why)
            for members, anchor, what in self.ties:
                if not any(c.enabled for c in members):
                    continue
                left = next((f for f in self.findings if inside(f, anchor) and self.disposition_left(f)), None)
                if left is not None:
                    why = f"kept CUDA's with {what}: {left.api} there (line {left.line}) is left for a person"
                    for c in members:
                        changed |= c.disable(why)

    # ---------------------------------------------------------------- output
    def finish(self) -> Ported:
        self._resolve_overlaps()
        edits = list(self.extra)
        changes = list(self.extra_changes)
        unsafe_skipped = 0
        for f in self.findings:
            c = self.cands.get(id(f))
            if c is not None and c.enabled:
                edits.extend(c.edits)
                changes.append(Change(self.path, f.line, f.end_line, "MODIFY", c.message))
                continue
            if c is not None and not self.unsafe and c.unsafe_edits:
                unsafe_skipped += 1
            why = c.why if c is not None else self.notes.get(id(f)) or self.left_by_table(f)
            if why:
                changes.append(Change(self.path, f.line, f.end_line, "UNSUPPORTED", why, f.api))
        text = apply_edits(self.src.text, edits)
        if edits and not self.unsafe:  # the check in port itself: nothing it wrote is half-ported
            for line, segment in self.half_ported_edits(edits, text):
                changes.append(Change(self.path, line, line, "UNSUPPORTED", "half-ported by transfer port (a bug: "
                                      f"please report it): `{segment}` names both CUDA and {self.dev}", "port"))
        if any(c.operation == "MODIFY" for c in changes) and self.profile.package and not self.has_vendor_import():
            text, line = self.insert_vendor_import(text, edits)
            changes.append(Change(self.path, line, line, "INSERT", f"import {self.profile.package}"))
        changes.sort(key=lambda c: (c.start_line, c.operation))
        return Ported(text, changes, unsafe_skipped)

    def half_ported_edits(self, edits: List[Edit], text: str) -> List[Tuple[int, str]]:
        """`half_ported` over what port wrote: each conditional of the source that holds an edit, read again
        with its edits made (a conditional without one is the author's). Reading those few expressions is a
        fraction of parsing the whole ported file again, which is what happens where one cannot be read alone
        (an edit across its edge, or positions this Python's parser gives wrong: f-strings on 3.8)."""
        ordered = sorted(edits, key=lambda x: (x[0], x[1]))  # non-overlapping: sorted by their ends too
        firsts = [s for s, _, _ in ordered]
        bad = []
        for node in self.tree._nodes:
            if not isinstance(node, _CONDITIONALS):
                continue
            start, end = self.src.span(node)
            i, j = bisect.bisect_left(firsts, start), bisect.bisect_left(firsts, end)
            if i and ordered[i - 1][1] > start or j > i and ordered[j - 1][1] > end:
                return half_ported(text, self.dev)  # an edit across its edge
            inner = ordered[i:j]
            if not inner:
                continue
            written = apply_edits(self.src.text[start:end], [(s - start, e - start, new) for s, e, new in inner])
            try:
                again = ast.parse("(" + written + "\n)", mode="eval").body
            except SyntaxError:
                return half_ported(text, self.dev)
            if type(again) is not type(node):
                return half_ported(text, self.dev)
            if _mixed(again, self.dev):
                before = [x for x in edits if x[1] <= start]
                line = node.lineno + sum(new.count("\n") - self.src.text[s:e].count("\n") for s, e, new in before)
                bad.append((line, written))
        return sorted(bad)

    def _resolve_overlaps(self) -> None:
        """An edit that encloses another finding's edit (an unsafe comparison around a rewritten call) gives way."""
        spans = sorted(((e[0], e[1], c) for c in self.cands.values() if c.enabled for e in c.edits),
                       key=lambda t: (t[0], -t[1]))
        for (s1, e1, c1), (s2, e2, c2) in zip(spans, spans[1:]):
            if s2 < e1 and c1 is not c2:
                c1.enabled, c1.why = False, c1.why or f"encloses another rewrite (line {c2.finding.line}): by hand"

    def has_vendor_import(self) -> bool:
        package = self.profile.package
        return package is None or any(b.qualified == package or b.qualified.startswith(package + ".") for b in self.imports.bindings)

    def insert_vendor_import(self, text: str, edits: List[Edit]) -> Tuple[str, int]:
        """`text` with ``import <package>`` after the first top-level torch import (before it, when that
        import is a rewritten alias of torch.cuda, which needs the package first); its line number."""
        body = self.tree.body
        first = next((s for s in body if isinstance(s, (ast.Import, ast.ImportFrom)) and _imports_torch(s)), None)
        if first is not None and first in self.alias_imports:
            at = self.src.starts[first.lineno - 1]
        elif first is not None:
            at = self.src.starts[first.end_lineno] if first.end_lineno < len(self.src.starts) else len(self.src.text)
        else:
            i = 0
            while i < len(body) and _is_preamble(body[i]):
                i += 1
            at = self.src.starts[body[i].lineno - 1] if i < len(body) else len(self.src.text)
        shift = sum(len(t) - (e - s) for s, e, t in edits if e <= at)
        at += shift
        line = f"import {self.profile.package}  # registers torch.{self.dev}\n"
        if at and text[at - 1:at] not in ("\n", "\r"):
            line = "\n" + line
        return text[:at] + line + text[at:], text.count("\n", 0, at) + 1 + (line.startswith("\n"))


def half_ported(text: str, dev: str) -> List[Tuple[int, str]]:
    """(line, source) of each conditional in `text` whose test asks about one device (``torch.cuda.X`` or a
    "cuda" string, or ``torch.<dev>.X`` / a "<dev>" string) while its values or branches name the other: what
    `Porter.settle` rules out. `port_source` runs it on what it wrote (safe mode)."""
    return [(node.lineno, ast.get_source_segment(text, node) or "") for node in ast.walk(ast.parse(text))
            if isinstance(node, _CONDITIONALS) and _mixed(node, dev)]


_CONDITIONALS = (ast.IfExp, ast.BoolOp, ast.Compare)


def _mixed(node: ast.AST, dev: str) -> bool:
    """A conditional (`_CONDITIONALS`) whose test asks about one device while its values name the other (a
    comparison: whose two sides name both)."""

    def sides(nodes) -> Set[str]:
        found = set()
        for node in nodes:
            for n in ast.walk(node):
                if isinstance(n, ast.Attribute) and n.attr in ("cuda", dev) and isinstance(n.value, ast.Name) \
                        and n.value.id == "torch":
                    found.add(n.attr)
                elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.split(":")[0] in ("cuda", dev) \
                        and re.fullmatch(r"[a-z]+(:\d+)?", n.value):
                    found.add(n.value.split(":")[0])
        return found

    if isinstance(node, ast.IfExp):
        test, rest = sides([node.test]), sides([node.body, node.orelse])
    elif isinstance(node, ast.BoolOp):
        test, rest = sides(node.values[:1]), sides(node.values[1:])
    else:
        return len(sides([node.left]) | sides(node.comparators)) == 2
    return bool(test and rest and test != rest)


def _imports_torch(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Import):
        return any(a.name.split(".")[0] == "torch" for a in statement.names)
    return isinstance(statement, ast.ImportFrom) and (statement.module or "").split(".")[0] == "torch" \
        and not statement.level


def _is_preamble(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
            and isinstance(statement.value.value, str):
        return True
    return isinstance(statement, ast.ImportFrom) and statement.module == "__future__"


def port_tree(tree: ast.Module, text: str, profile: str, path: str, unsafe: bool,
              findings: List[scan.Finding], imports: names.Imports, rules: Sequence = RULES) -> Ported:
    """Port an already parsed and scanned source with `rules` (default: every rule)."""
    return Porter(tree, text, path, profile, unsafe, findings, imports).run(rules)


def check_profile(profile: str) -> None:
    if profile not in PROFILES:
        raise ValueError(f"unknown device {profile!r}; choose one of {', '.join(PROFILES)}")
    if PROFILES[profile].is_cpu:
        vendors = ", ".join(p for p in PROFILES if not PROFILES[p].is_cpu)
        raise ValueError(f"port writes vendor code ({vendors}); for the CPU, run the script unchanged "
                         "under transfer: TRANSFER_DEVICE=cpu python script.py")


def port_source(text: str, profile: str, path: str = "<string>", unsafe: bool = False,
                rules: Sequence = RULES) -> Ported:
    """The ported source and its change list (`rules`: a subset of `rules.ALL` to test one rule alone).
    Raises SyntaxError if it does not parse."""
    check_profile(profile)
    if not names.might_have_findings(text):  # nothing CUDA-facing: a syntax check, and the text as it is
        scan.check_syntax(text, path)
        return Ported(text, [], 0)
    tree = scan.parse(text, path)
    imports = names.Imports(tree)
    return port_tree(tree, text, profile, path, unsafe, scan.scan_tree(tree, text, path, imports), imports,
                     rules)
