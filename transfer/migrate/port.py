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
  expression in one, or a local variable / parameter default / ``--device``
  option default whose every use is one (`flow`): its comparisons with
  ``"cuda"`` are rewritten with it, so its tests keep their meaning.
Consistency (checked here, `_settle`): a conditional expression's test and
  branches, an import and its uses, a device variable's values and
  comparisons are rewritten together or not at all; a ``torch.cuda.is_available()``
  test is rewritten only when nothing it guards is left for a person (else the
  CUDA branch would start running natively, half-ported).
Torch-native (`native`, rows of ``rewrites.NATIVE_REWRITES``): apex's FusedAdam,
  FusedSGD, SyncBatchNorm, convert_syncbn_model and DistributedDataParallel
  calls -> their torch spellings where the arguments show they compute the
  same, an apex import and its uses together; FusedLayerNorm / FusedRMSNorm
  with ``--unsafe`` (autocast is not visible where they are built).
Unsafe (``--unsafe``): device and backend strings anywhere, and ``== "cuda"``
  -> ``in ("cuda", "<dev>")`` (``"nccl"`` likewise).
On tccl (sdaa) a ``set_device`` statement just after ``init_process_group`` in
the same block moves before it when nothing in between assigns what it reads.
"""

from __future__ import annotations

import ast
import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from .. import support
from ..profiles import PROFILES
from . import flow, names, native, rewrites, scan

_BACKEND_CALLS = ("init_process_group", "new_group")
_AVAILABILITY = frozenset({"torch.cuda.is_available", "torch.cuda.device_count", "torch.cuda.is_initialized"})
_LITERAL = re.compile(r"^([rRuU]?)('''|\"\"\"|'|\")(.*)\2$", re.DOTALL)


class Change(NamedTuple):
    """One row of change_list.csv."""

    file: str
    start_line: int
    end_line: int
    operation: str  # INSERT / MODIFY / DELETE / UNSUPPORTED
    message: str
    api: str = ""  # UNSUPPORTED rows: what is left (unsupported_api.csv's API column); not in change_list.csv


class Ported(NamedTuple):
    text: str
    changes: List[Change]
    unsafe_skipped: int  # rewrites --unsafe would make


class _Text:
    """Character offsets of `ast` positions (columns are UTF-8 byte offsets)."""

    def __init__(self, text: str):
        self.text = text
        self.starts = [0]
        self.lines = []
        for match in re.finditer(r"\r\n|\r|\n", text):
            self.lines.append(text[self.starts[-1]:match.end()])
            self.starts.append(match.end())
        self.lines.append(text[self.starts[-1]:])

    def offset(self, line: int, col: int) -> int:
        source = self.lines[line - 1]
        if source.isascii():
            return self.starts[line - 1] + col
        return self.starts[line - 1] + len(source.encode("utf-8")[:col].decode("utf-8", "ignore"))

    def span(self, node: ast.AST) -> Tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]


Edit = Tuple[int, int, str]  # (start, end, replacement) in characters


class _Cand:
    """One finding's rewrite: its edits, or why it is left."""

    __slots__ = ("finding", "edits", "message", "enabled", "why", "unsafe_edits", "unsafe_message")

    def __init__(self, finding: scan.Finding, edits: Sequence[Edit] = (), message: str = "", why: str = "",
                 unsafe_edits: Sequence[Edit] = (), unsafe_message: str = ""):
        self.finding = finding
        self.edits = list(edits)
        self.message = message
        self.enabled = bool(edits) and not why
        self.why = why
        self.unsafe_edits = list(unsafe_edits)
        self.unsafe_message = unsafe_message

    def disable(self, why: str) -> bool:
        if not self.enabled:
            return False
        self.enabled, self.why = False, why
        return True


def _key(node: ast.AST, api: str) -> Tuple[int, int, str]:
    return node.lineno, node.col_offset + 1, api


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _parent(node: ast.AST) -> Optional[ast.AST]:
    return getattr(node, "_parent", None)


def _inside(finding: scan.Finding, node: ast.AST) -> bool:
    start = (node.lineno, node.col_offset + 1)
    end = (node.end_lineno, node.end_col_offset + 1)
    return start <= (finding.line, finding.col) < end


class _Porter:
    def __init__(self, tree: ast.Module, text: str, path: str, profile: str, unsafe: bool,
                 findings: List[scan.Finding], imports: names.Imports):
        self.tree, self.src, self.path, self.unsafe = tree, _Text(text), path, unsafe
        self.profile = PROFILES[profile]
        self.dev = self.profile.device_type
        self.imports = imports
        self.findings = findings
        self.by_key: Dict[Tuple[int, int, str], List[scan.Finding]] = {}
        self.by_pos: Dict[Tuple[int, int], List[scan.Finding]] = {}
        for f in findings:
            self.by_key.setdefault((f.line, f.col, f.api), []).append(f)
            self.by_pos.setdefault((f.line, f.col), []).append(f)
        self.cands: Dict[int, _Cand] = {}  # id(finding) -> its candidate
        self.notes: Dict[int, str] = {}  # id(finding) -> why it is left (explicit)
        self.groups: List[Tuple[List[_Cand], str]] = []  # all or none
        self.guards: List[Tuple[List[_Cand], List[ast.AST]]] = []  # availability tests and what they guard
        self.roots: Dict[int, Tuple[int, str]] = {}  # id(cand) -> the line and reason that disabled its group
        self.extra: List[Edit] = []  # edits that belong to no finding (imports, moves)
        self.extra_changes: List[Change] = []
        self.torch_names = set(imports.locals_for("torch"))
        self.flow = flow.Flow(tree, imports)

    # ---------------------------------------------------------------- bookkeeping
    def finding(self, node: ast.AST, api: str) -> Optional[scan.Finding]:
        """The scan finding of `api` at `node` not yet claimed."""
        for f in self.by_key.get(_key(node, api), ()):
            if id(f) not in self.cands and id(f) not in self.notes:
                return f
        return None

    def cand(self, node: ast.AST, api: str, edits: Sequence[Edit] = (), message: str = "", why: str = "",
             unsafe_edits: Sequence[Edit] = (), unsafe_message: str = "", expect: Sequence[str] = ()) -> Optional[_Cand]:
        """Claim `node`'s finding of `api` with its rewrite; `expect`: the text each edit replaces (checked: Python
        3.8 gives nodes inside f-strings wrong columns, and a rewrite at the wrong place must not happen)."""
        f = self.finding(node, api)
        if f is None:
            return None
        if any(self.src.text[e[0]:e[1]] != want for e, want in zip(edits, expect)):
            edits, why = (), (why or f"{api}: where this Python's parser puts it is not where it is written "
                                      "(inside an f-string on Python 3.8): rewrite it by hand")
        c = _Cand(f, edits, message, why, unsafe_edits, unsafe_message)
        if self.unsafe and not c.enabled and c.unsafe_edits:
            c.edits, c.message, c.enabled, c.why = c.unsafe_edits, c.unsafe_message, True, ""
        self.cands[id(f)] = c
        return c

    def note(self, node: ast.AST, api: str, why: str) -> None:
        f = self.finding(node, api)
        if f is not None:
            self.notes[id(f)] = why

    def literal_edit(self, node: ast.AST, new_value: str) -> Optional[Edit]:
        """Replace a one-piece string literal's value, keeping its prefix and quotes."""
        start, end = self.src.span(node)
        match = _LITERAL.match(self.src.text[start:end])
        if not match or isinstance(node, ast.Constant) and match.group(3) != node.value:
            return None  # implicit concatenation, escapes: not ours to rewrite
        return start, end, f"{match.group(1)}{match.group(2)}{new_value}{match.group(2)}"

    def token_edit(self, node: ast.Attribute, new: str) -> Edit:
        """Replace the attribute name that ends `node` (``x.cuda`` -> ``x.<new>``)."""
        end = self.src.offset(node.end_lineno, node.end_col_offset)
        return end - len(node.attr), end, new

    def after_paren(self, call: ast.Call) -> int:
        """The offset just past the call's opening parenthesis."""
        at = self.src.offset(call.func.end_lineno, call.func.end_col_offset)
        return self.src.text.index("(", at) + 1

    def first_arg_edit(self, call: ast.Call, text: str) -> Edit:
        at = self.after_paren(call)
        return at, at, text + (", " if call.args or call.keywords else "")

    # ---------------------------------------------------------------- the walk
    def run(self) -> Ported:
        self.visit_imports()
        native.visit(self)  # apex imports and their uses, to torch-native spellings (rewrites.NATIVE_REWRITES)
        for node in self.tree._nodes:
            if isinstance(node, ast.Attribute):
                self.visit_attribute(node)
            elif isinstance(node, ast.Call):
                self.visit_call(node)
            elif isinstance(node, (ast.Constant, ast.JoinedStr)):
                self.visit_string(node)
            elif isinstance(node, ast.Name):
                self.visit_name(node)
        self.visit_variables()  # first: it replaces the candidates of the comparisons it rewrites
        self.visit_conditionals()
        self._settle()
        if self.profile.set_device_before_init and "init_process_group" in self.src.text:
            self.move_set_device()
        return self.finish()

    # ---------------------------------------------------------------- torch.cuda.X through torch
    def visit_attribute(self, node: ast.Attribute) -> None:
        qualified = self.imports.qualified(node)
        if qualified is None:
            if node.attr == "is_cuda":
                self.cand(node, "Tensor.is_cuda", [self.token_edit(node, f"is_{self.dev}")],
                          f".is_cuda -> .is_{self.dev}", expect=["is_cuda"])
            return
        api = names.api_of(qualified)
        if api == "torch.nn.DataParallel":
            self.note_dataparallel(node)
            return
        if api is None or not api.startswith("torch.cuda.") or self.finding(node, api) is None:
            return
        inner = node
        while isinstance(inner.value, ast.Attribute):
            inner = inner.value
        root = inner.value
        if not (isinstance(root, ast.Name) and root.id in self.torch_names and inner.attr == "cuda"):
            return  # through an alias: visit_imports decides
        parent = _parent(node)
        if api in ("torch.cuda.amp.autocast", "torch.cuda.amp.GradScaler"):
            if isinstance(parent, ast.Call) and parent.func is node and node.attr in ("autocast", "GradScaler"):
                name = root.id
                new = f"{name}.autocast" if node.attr == "autocast" else f"{name}.amp.GradScaler"
                start, end = self.src.span(node)
                self.cand(node, api, [(start, end, new), self.first_arg_edit(parent, f'"{self.dev}"')],
                          f"torch.cuda.amp.{node.attr}(...) -> {new.replace(name, 'torch', 1)}(\"{self.dev}\", ...)",
                          expect=[f"{name}.cuda.amp.{node.attr}", ""])
            else:
                self.cand(node, api, why=f"{api} used other than as a call: use torch.amp with '{self.dev}' by hand")
            return
        cname = qualified.split(".")[2]
        verdict = support.lookup(self.profile.name, api)
        if verdict.to == "unchanged":
            return  # torch's own (torch.cuda.OutOfMemoryError): runs as it is
        home = f"torch.{self.dev}."
        if verdict.to.startswith(home) and (verdict.cls == support.TRANSLATED or verdict.to == home + cname):
            new = verdict.to[len(home):]
            cuda_start = self.src.offset(inner.end_lineno, inner.end_col_offset) - 4
            if new == cname:
                edits = [(cuda_start, cuda_start + 4, self.dev)]
                expect = ["cuda"]
            else:
                member = inner if inner is node else self._member(node, inner)
                end = self.src.offset(member.end_lineno, member.end_col_offset)
                if self.src.text[cuda_start:end] != f"cuda.{cname}":
                    self.cand(node, api, why=f"torch.cuda.{cname} is torch.{self.dev}.{new}: rewrite it by hand")
                    return
                edits = [(cuda_start, end, f"{self.dev}.{new}")]
                expect = [f"cuda.{cname}"]
            self.cand(node, api, edits, f"torch.cuda.{cname} -> torch.{self.dev}.{new}", expect=expect)
        elif verdict.cls == support.UNSUPPORTED:
            self.cand(node, api, why=f"torch.cuda.{cname}: {verdict.cls} on {self.profile.name}: {verdict.reason}")
        else:  # transfer answers it at run time; the ported code runs without transfer, where torch.cuda fails
            self.cand(node, api, why=f"torch.cuda.{cname} is kept and fails without transfer (no CUDA device on "
                                     f"{self.dev}): {support.native_spelling(self.profile.name, api)}")

    @staticmethod
    def _member(node: ast.Attribute, inner: ast.Attribute) -> ast.Attribute:
        """The ``torch.cuda.X`` attribute inside a longer chain."""
        while node.value is not inner:
            node = node.value
        return node

    # ---------------------------------------------------------------- calls
    def visit_call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "cuda" and self.imports.qualified(func) is None:
            self.port_cuda_method(node)
        elif self.imports.qualified(func) == "torch.distributed.is_nccl_available" and not node.args \
                and not node.keywords and isinstance(func, ast.Attribute):
            start, end = self.src.span(node)
            head = self.src.text[start:self.src.offset(func.end_lineno, func.end_col_offset) - len(func.attr)]
            self.cand(func, "torch.distributed.is_nccl_available",
                      [(start, end, f'{head}is_backend_available("{self.profile.backend}")')],
                      f"is_nccl_available() -> is_backend_available(\"{self.profile.backend}\")",
                      expect=[f"{head}is_nccl_available()"])

    def port_cuda_method(self, call: ast.Call) -> None:
        func = call.func
        api = next((a for a in scan.CUDA_METHOD_ROWS if self.finding(func, a) is not None), None)
        if api is None:
            return
        if call.args and isinstance(call.args[0], ast.Starred) or any(k.arg is None for k in call.keywords) \
                or len(call.args) > 1:
            self.cand(func, api, why=".cuda(...) with these arguments: rewrite it as .to(...) by hand")
            return
        device = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device"), None)
        if device is None or isinstance(device, ast.Constant) and isinstance(device.value, int):
            method = self.dev
        elif self.flow.is_device_object(device):
            method = "to"  # torch_npu's Module.npu takes an index only; .to takes a device or an index
        else:
            method = self.dev
        self.cand(func, api, [self.token_edit(func, method)], expect=["cuda"], message=
                  f".cuda(...) -> .{method}(...)" + (" (a device, not an index)" if method == "to" else ""))

    # ---------------------------------------------------------------- aliases of torch.cuda
    def visit_imports(self) -> None:
        uses: Dict[str, List[ast.Name]] = {}
        for node in self.tree._nodes:
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
                uses.setdefault(node.id, []).append(node)
        statements: Dict[int, List[names.Binding]] = {}
        for b in self.imports.bindings:
            if (b.qualified == "torch.cuda" or b.qualified.startswith("torch.cuda.")) \
                    and self.imports.table.get(b.local) == b.qualified:
                statements.setdefault(id(b.statement), []).append(b)
        self.alias_imports: List[ast.stmt] = []
        for bindings in statements.values():
            self.port_alias_import(bindings, uses)

    def port_alias_import(self, bindings: List[names.Binding], uses: Dict[str, List[ast.Name]]) -> None:
        statement = bindings[0].statement
        cands: List[_Cand] = []
        problems: List[str] = []
        segment_start, segment_end = self.src.span(statement)
        segment = self.src.text[segment_start:segment_end]
        for b in bindings:
            module_alias = b.qualified in ("torch.cuda", "torch.cuda.amp")
            for use in uses.get(b.local, ()):
                parent = _parent(use)
                if module_alias:
                    if not isinstance(parent, ast.Attribute):
                        problems.append(f"`{b.local}` used as a value (line {use.lineno})")
                        continue
                    qualified = f"{b.qualified}.{parent.attr}"
                    api = names.api_of(qualified) or qualified
                    target: ast.AST = parent
                    while isinstance(_parent(target), ast.Attribute) and self.finding(target, api) is None:
                        target = _parent(target)
                else:
                    qualified, api, target = b.qualified, names.api_of(b.qualified) or b.qualified, use
                if qualified in ("torch.cuda.amp.autocast", "torch.cuda.amp.GradScaler"):
                    call = _parent(target)
                    if not (isinstance(call, ast.Call) and call.func is target):
                        problems.append(f"{qualified} used other than as a call (line {use.lineno})")
                        continue
                    c = _Cand(self.finding(target, api) or scan.Finding(self.path, use.lineno, use.lineno, 0, api, ""),
                              [self.first_arg_edit(call, f'"{self.dev}"')], f"{qualified}(...) -> torch.amp"
                              f".{qualified.rsplit('.', 1)[1]}(\"{self.dev}\", ...)")
                elif b.qualified.startswith("torch.cuda.amp") or b.qualified == "torch.cuda.amp":
                    problems.append(f"{qualified} (line {use.lineno}) has no torch.amp spelling here")
                    continue
                else:
                    cname = qualified.split(".")[2]
                    verdict = support.lookup(self.profile.name, f"torch.cuda.{cname}")
                    if verdict.to != f"torch.{self.dev}.{cname}" or cname == "amp":
                        problems.append(f"torch.cuda.{cname} (line {use.lineno}): {verdict.cls} on "
                                        f"{self.profile.name}")
                        c = None
                    else:
                        c = _Cand(self.finding(target, api) or scan.Finding(self.path, use.lineno, use.lineno, 0,
                                                                             api, ""), [], "")
                        c.enabled = True
                if c is not None:
                    cands.append(c)
        text, problem = self._alias_import_text(statement, segment, bindings)
        if problem:
            problems.append(problem)
        why = ""
        if problems:
            why = (f"aliased by `{segment.splitlines()[0].strip()}` (line {statement.lineno}), which is kept: "
                   + "; ".join(dict.fromkeys(problems)))
        for c in cands:
            f = c.finding
            if id(f) in self.cands or id(f) in self.notes or f.col == 0:
                continue
            c.message = c.message or f"{f.api} (through an alias: the import now names torch.{self.dev})"
            if why:
                c.enabled, c.why, c.edits = False, why, []
            self.cands[id(f)] = c
        if not why and cands:
            self.alias_imports.append(statement)
            edit = (segment_start, segment_end, text)
            host = next(c for c in self.cands.values() if c in cands)
            host.edits.append(edit)
            host.enabled = True
            self.groups.append(([c for c in cands if id(c.finding) in self.cands], "the import and its uses"))
        elif why:
            for b in bindings:  # uses through this import that produced no candidate (values, unknown names)
                for use in uses.get(b.local, ()):
                    for node in (use, _parent(use)):
                        for f in self.by_key.get(_key(node, names.api_of(self.imports.qualified(node) or "") or ""), ()):
                            if id(f) not in self.cands:
                                self.notes[id(f)] = why

    def _alias_import_text(self, statement: ast.stmt, segment: str, bindings: List[names.Binding]):
        """The import rewritten for the vendor, or (segment, why not)."""
        dev = self.dev
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

    def visit_name(self, node: ast.Name) -> None:
        if node.id in ("DataParallel",) and self.imports.table.get(node.id, "").endswith("DataParallel"):
            self.note_dataparallel(node)

    def note_dataparallel(self, node: ast.AST) -> None:
        self.note(node, "torch.nn.DataParallel",
                  f"torch.nn.DataParallel: torch's scatter/gather are CUDA-only C++, so it fails on {self.dev} "
                  f"devices: use DistributedDataParallel (run_distributed_{self.dev}.sh), or model.to(\"{self.dev}\") "
                  "for one device")

    # ---------------------------------------------------------------- strings
    def visit_string(self, node: ast.AST) -> None:
        if scan.is_device_string(node):
            api = self._string_api(node)
            if api is None:
                return
            if api.startswith("compare"):
                self.compare_cand(node, api, "cuda", self.dev)
            else:
                self.string_cand(node, api, "device")
        elif scan.is_nccl_string(node) and getattr(node, "value", "").strip().lower() == "nccl":
            if flow.position(node, self.imports) == "compare":
                self.compare_cand(node, "compare 'nccl'", "nccl", self.profile.backend)
            else:
                self.string_cand(node, "backend='nccl'", "backend")

    def compare_cand(self, node: ast.AST, api: str, value: str, new: str) -> None:
        """A comparison with "cuda"/"nccl" left for a person; with --unsafe, ``a in ("cuda", "<dev>")``."""
        compare = _parent(node)
        why = support.lookup(self.profile.name, api).reason
        if isinstance(compare, ast.Compare) and len(compare.ops) == 1 and isinstance(node, ast.Constant) \
                and node.value == value and isinstance(compare.ops[0], (ast.Eq, ast.NotEq)) \
                and compare.comparators[0] is node:
            start, end = self.src.span(compare)
            op = "in" if isinstance(compare.ops[0], ast.Eq) else "not in"
            edit = (start, end, f"{self.src.segment(compare.left)} {op} ({self.src.segment(node)}, \"{new}\")")
            self.cand(node, api, why=why, unsafe_edits=[edit],
                      unsafe_message=f"== {value!r} -> in ({value!r}, {new!r}) [unsafe]")
        else:
            self.cand(node, api, why=why)

    def _string_api(self, node: ast.AST) -> Optional[str]:
        for f in self.by_pos.get((node.lineno, node.col_offset + 1), ()):
            if f.api.startswith("compare") or "cuda" in f.api:
                return f.api
        return None

    def string_cand(self, node: ast.AST, api: str, kind: str) -> None:
        edit = self.literal_or_fstring_edit(node, self.new_string(node, kind))
        old = self.src.segment(node)
        position = flow.position(node, self.imports)
        safe = position == kind
        message = f"{old} -> {edit[2] if edit else '?'}"
        if edit is None:
            self.cand(node, api, why=f"{old}: a string port does not rewrite (concatenated or escaped)")
        elif safe:
            self.cand(node, api, [edit], message)
        else:
            self.cand(node, api, why=f"{old} outside a {kind} argument: not rewritten (--unsafe does)",
                      unsafe_edits=[edit], unsafe_message=message + " [unsafe]")

    def new_string(self, node: ast.AST, kind: str) -> Optional[str]:
        if kind == "backend":
            return self.profile.backend
        if isinstance(node, ast.Constant):
            return self.dev + node.value[4:]
        return None  # f-strings: literal_or_fstring_edit

    def literal_or_fstring_edit(self, node: ast.AST, value: Optional[str]) -> Optional[Edit]:
        if isinstance(node, ast.Constant):
            return None if value is None else self.literal_edit(node, value)
        start, end = self.src.span(node)
        match = re.match(r"[fF][rR]?|[rR][fF]", self.src.text[start:end])
        at = start + (match.end() if match else 0)
        quote = re.match(r"'''|\"\"\"|'|\"", self.src.text[at:end])
        if not match or not quote or not self.src.text.startswith("cuda", at + quote.end()):
            return None
        at += quote.end()
        return at, at + 4, self.dev

    # ---------------------------------------------------------------- conditionals
    def visit_conditionals(self) -> None:
        for node in self.tree._nodes:
            if isinstance(node, ast.IfExp):
                atoms = self.cands_in([node.test])
                branches = self.cands_in([node.body, node.orelse], strings_only=True)
                if atoms and branches:
                    self.groups.append((atoms + branches, "a conditional expression's test and its values"))
                self.add_guard(node.test, [node.body, node.orelse])
            elif isinstance(node, (ast.If, ast.While)):
                self.add_guard(node.test, list(node.body) + list(node.orelse))
            elif isinstance(node, ast.BoolOp):
                for i, value in enumerate(node.values[:-1]):
                    self.add_guard(value, node.values[i + 1:])

    def add_guard(self, test: ast.AST, region: List[ast.AST]) -> None:
        atoms = [c for c in self.cands_in([test]) if c.finding.api in _AVAILABILITY]
        if atoms:
            self.guards.append((atoms, region))

    def cands_in(self, nodes: List[ast.AST], strings_only: bool = False) -> List[_Cand]:
        found = []
        for c in self.cands.values():
            if strings_only and not (c.finding.api.startswith("device=") or c.finding.api.startswith("torch.device")
                                     or c.finding.api == "backend='nccl'"):
                continue
            if any(_inside(c.finding, n) for n in nodes):
                found.append(c)
        return found

    # ---------------------------------------------------------------- device variables
    def visit_variables(self) -> None:
        variables = self.flow.variables(self.dev, self.profile.backend)
        by_key = {var.key: var for var in variables}
        members_of: Dict[Tuple[int, str], List[_Cand]] = {}
        for var in variables:
            members_of[var.key] = self.variable_cands(var)
        for var in variables:  # a variable passed to a parameter of this file: all or none with it
            for link in var.links:
                other = by_key.get(link)
                if other is None or other.blocked or not members_of[link]:
                    why = (f"`{var.name}` is passed to the parameter `{other.name}`, which is kept: {other.blocked}"
                           if other is not None and other.blocked else
                           f"`{var.name}` is passed to a parameter without a CUDA default: port does not follow it")
                    for c in members_of[var.key]:
                        c.enabled, c.why = False, why
                elif members_of[var.key] and members_of[link]:
                    self.groups.append((members_of[var.key] + members_of[link],
                                        f"`{var.name}` and the parameter `{other.name}` it is passed to"))

    def variable_cands(self, var) -> List[_Cand]:
        """The candidates of one variable's literals and comparisons (a group), or none when it is blocked."""
        literals = [self.cands.get(id(f)) for f in self._findings_at(var.literals)]
        literals = [c for c in literals if c is not None]
        if var.blocked:  # literals in a device argument of their own (torch.device("cuda" ...)) stay rewritten
            for c in literals:
                if not c.enabled:
                    c.why = var.blocked
            return []
        compares = []
        for node, new in var.compares:
            f = next(iter(self._findings_at([node])), None)
            if f is None:
                continue
            edit = self.literal_edit(node, new) if isinstance(node, ast.Constant) else None
            c = _Cand(f, [edit] if edit else [], f"{self.src.segment(node)} -> '{new}' (compared with a ported "
                                                  f"device variable)")
            if edit is None:
                c.why = "a comparison port does not rewrite"
            self.cands[id(f)] = c
            compares.append(c)
        members = literals + compares
        if not any(c.finding.api != "backend='nccl'" or var.kind == "backend" for c in literals):
            return []
        for c in literals:
            if not c.enabled and c.unsafe_edits and not self.unsafe:
                c.edits, c.message, c.enabled, c.why = c.unsafe_edits, \
                    c.unsafe_message.replace(" [unsafe]", f" (`{var.name}` reaches only device arguments)"), True, ""
                c.unsafe_edits = []
        self.groups.append((members, f"`{var.name}`'s values and comparisons"))
        return members

    def _findings_at(self, nodes) -> List[scan.Finding]:
        out = []
        for node in nodes:
            for f in self.by_pos.get((node.lineno, node.col_offset + 1), ()):
                if "cuda" in f.api or "nccl" in f.api:
                    out.append(f)
                    break
        return out

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
            rewrite = rewrites.native_rewrite(f.api)
            hint = f"; torch-native: {rewrite.to}, equal when: {rewrite.when}" if rewrite is not None else ""
            hint += f"; {rewrites.NO_NATIVE_REWRITE[f.api]}" if f.api in rewrites.NO_NATIVE_REWRITE else ""
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

    def _settle(self) -> None:
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
            for atoms, region in self.guards:
                if not any(c.enabled for c in atoms):
                    continue
                left = next((f for f in self.findings if any(_inside(f, n) for n in region)
                             and self.disposition_left(f)), None)
                if left is not None:
                    why = (f"kept as CUDA's test (False natively, so the fallback runs): it guards {left.api} at "
                           f"line {left.line}, which is left for a person")
                    for c in atoms:
                        changed |= c.disable(why)

    # ---------------------------------------------------------------- set_device before init (tccl)
    def move_set_device(self) -> None:
        for block in self._blocks(self.tree):
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
            called = [self.src.segment(c.func) for c in ast.walk(call) if isinstance(c, ast.Call) and c is not call]
            init_call = next(c for c in ast.walk(block[init]) if isinstance(c, ast.Call)
                             and _callee(c) == "init_process_group")
            own_lines = block[later].lineno > block[later - 1].end_lineno and (
                later + 1 == len(block) or block[later + 1].lineno > block[later].end_lineno) and \
                self.src.text[self.src.starts[block[init].lineno - 1]:self.src.offset(
                    block[init].lineno, block[init].col_offset)].strip() == ""
            if read & assigned or any("distributed" in n or "get_rank" in n or n.startswith("dist.") for n in called) \
                    or not own_lines:
                self.note(init_call.func, "torch.distributed.init_process_group",
                          f"{self.profile.backend} needs the device set before init_process_group: call "
                          f"torch.{self.dev}.set_device(local_rank) before it")
                continue
            start = self.src.starts[block[later].lineno - 1]
            end = self.src.starts[block[later].end_lineno] if block[later].end_lineno < len(self.src.starts) \
                else len(self.src.text)
            inner = []
            for c in self.cands.values():
                if c.enabled and all(start <= e[0] and e[1] <= end for e in c.edits):
                    inner.extend(c.edits)
                    c.edits = []
            moved = _apply(self.src.text[start:end], [(s - start, e - start, t) for s, e, t in inner])
            at = self.src.starts[block[init].lineno - 1]
            self.extra += [(start, end, ""), (at, at, moved)]
            self.extra_changes.append(Change(self.path, block[later].lineno, block[later].end_lineno, "MODIFY",
                                             f"torch.{self.dev}.set_device moved before init_process_group "
                                             f"({self.profile.backend} needs the device set first)"))

    @staticmethod
    def _blocks(tree: ast.AST):
        for node in tree._nodes:
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    yield block

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
        text = _apply(self.src.text, edits)
        if edits and not self.unsafe:  # the check in port itself: nothing it wrote is half-ported
            for line, segment in half_ported(text, self.dev):
                changes.append(Change(self.path, line, line, "UNSUPPORTED", "half-ported by transfer port (a bug: "
                                      f"please report it): `{segment}` names both CUDA and {self.dev}", "port"))
        if any(c.operation == "MODIFY" for c in changes) and self.profile.package and not self.has_vendor_import():
            text, line = self.insert_vendor_import(text, edits)
            changes.append(Change(self.path, line, line, "INSERT", f"import {self.profile.package}"))
        changes.sort(key=lambda c: (c.start_line, c.operation))
        return Ported(text, changes, unsafe_skipped)

    def _resolve_overlaps(self) -> None:
        """An edit that encloses another finding's edit (an unsafe comparison around a rewritten call) gives way."""
        spans = sorted(((e[0], e[1], c) for c in self.cands.values() if c.enabled for e in c.edits),
                       key=lambda t: (t[0], -t[1]))
        for (s1, e1, c1), (s2, e2, c2) in zip(spans, spans[1:]):
            if s2 < e1 and c1 is not c2:
                c1.enabled, c1.why = False, c1.why or f"encloses another rewrite (line {c2.finding.line}): by hand"

    def has_vendor_import(self) -> bool:
        package = self.profile.package
        return any(b.qualified == package or b.qualified.startswith(package + ".") for b in self.imports.bindings)

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
    `_settle` rules out. `port_source` runs it on what it wrote (safe mode)."""
    tree = ast.parse(text)

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

    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.IfExp):
            test, rest = sides([node.test]), sides([node.body, node.orelse])
        elif isinstance(node, ast.BoolOp):
            test, rest = sides(node.values[:1]), sides(node.values[1:])
        elif isinstance(node, ast.Compare):
            test, rest = sides([node.left]), sides(node.comparators)
            test, rest = test | rest, set()
            if len(test) == 2:
                bad.append((node.lineno, ast.get_source_segment(text, node) or ""))
            continue
        else:
            continue
        if test and rest and test != rest:
            bad.append((node.lineno, ast.get_source_segment(text, node) or ""))
    return bad


def _apply(text: str, edits: List[Edit]) -> str:
    """`text` with `edits` made (non-overlapping; insertions at one point keep their order)."""
    ordered = sorted(enumerate(edits), key=lambda item: (item[1][0], item[1][1], item[0]))
    out, at = [], 0
    for _, (start, end, new) in ordered:
        if start < at:
            raise AssertionError(f"overlapping rewrites at offset {start}")  # a bug in port, never in the input
        out.append(text[at:start])
        out.append(new)
        at = end
    out.append(text[at:])
    return "".join(out)


def _calls(statement: ast.AST, name: str) -> bool:
    return any(isinstance(c, ast.Call) and _callee(c) == name for c in ast.walk(statement))


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
              findings: List[scan.Finding], imports: names.Imports) -> Ported:
    """Port an already parsed and scanned source (`tree.run` parses each file once)."""
    return _Porter(tree, text, path, profile, unsafe, findings, imports).run()


def check_profile(profile: str) -> None:
    if profile not in PROFILES:
        raise ValueError(f"unknown device {profile!r}; choose one of {', '.join(PROFILES)}")
    if PROFILES[profile].is_cpu:
        raise ValueError("port writes vendor code (npu, sdaa, gcu); for the CPU, run the script unchanged "
                         "under transfer: TRANSFER_DEVICE=cpu python script.py")


def port_source(text: str, profile: str, path: str = "<string>", unsafe: bool = False) -> Ported:
    """The ported source and its change list. Raises SyntaxError if it does not parse."""
    check_profile(profile)
    if not names.might_have_findings(text):  # nothing CUDA-facing: a syntax check, and the text as it is
        scan.check_syntax(text, path)
        return Ported(text, [], 0)
    tree = scan.parse(text, path)
    imports = names.Imports(tree)
    return port_tree(tree, text, profile, path, unsafe, scan.scan_tree(tree, text, path, imports), imports)
