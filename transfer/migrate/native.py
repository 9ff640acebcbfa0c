"""``transfer port``'s torch-native rewrites of third-party calls (`rewrites.NATIVE_REWRITES`).

An apex import and every use of what it binds are ported together or not at
all, the discipline port keeps for ``torch.cuda`` aliases
(`port._Porter.port_alias_import`, and `port._Porter._settle` over the group):
the uses become their torch spellings and the import goes (or becomes
``import torch`` where the file has none), or nothing changes and every one of
them is named, with why, in unsupported_api.csv.

A use is rewritten when it is a call of a row of NATIVE_REWRITES whose
arguments bind to the original's signature, every argument is passed on,
dropped (speed or memory only) or a literal with the value under which the
torch spelling computes the same, and the file shows no conflicting use (the
row's ``conflicts``: ``apex.amp`` wrapping the optimizers, apex DDP's own
methods). Rows marked unsafe (the norms: autocast is not visible where a
module is built) are written only with ``--unsafe``. Everything else of
third-party packages is named, with `rewrites.NO_NATIVE_REWRITE`'s reason where
the table has one (flash_attn's attention: SDPA's causal alignment differs
when seqlen_q != seqlen_k).

Plain `ast` and the source text, as the rest of port.
"""

from __future__ import annotations

import ast
import re
from typing import Dict, List, Optional, Sequence, Tuple

from .. import support
from . import names, rewrites

Edit = Tuple[int, int, str]


def _parent(node: ast.AST) -> Optional[ast.AST]:
    return getattr(node, "_parent", None)


def visit(porter) -> None:
    """Give every apex import statement of `porter`'s file and its uses one all-or-none disposition."""
    uses: Dict[str, List[ast.Name]] = {}
    bound: Dict[str, int] = {}  # names bound other than by an import -> first line
    attrs: Dict[str, int] = {}
    for node in porter.tree._nodes:
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                uses.setdefault(node.id, []).append(node)
            else:
                bound.setdefault(node.id, node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.setdefault(node.name, node.lineno)
        elif isinstance(node, ast.arg):
            bound.setdefault(node.arg, getattr(node, "lineno", 0))
        elif isinstance(node, ast.Attribute):
            attrs.setdefault(node.attr, node.lineno)
    statements: Dict[int, List[names.Binding]] = {}
    for b in porter.imports.bindings:
        if b.qualified.split(".")[0] == "apex" and porter.imports.table.get(b.local) == b.qualified:
            statements.setdefault(id(b.statement), []).append(b)
    context = _Context(porter, uses, bound, attrs)
    for bindings in statements.values():
        context.port_statement(bindings)


class _Context:
    def __init__(self, porter, uses, bound, attrs):
        self.porter, self.uses, self.bound, self.attrs = porter, uses, bound, attrs
        self.src = porter.src
        torch_names = porter.torch_names
        self.torch = "torch" if "torch" in torch_names or not torch_names else sorted(torch_names)[0]
        self.need_torch = not torch_names

    def conflict(self, rewrite: rewrites.Rewrite) -> str:
        for c in rewrite.conflicts:
            if c.startswith("."):
                if c[1:] in self.attrs:
                    return f"the file calls `{c}` (line {self.attrs[c[1:]]}), which torch's class does not have"
                continue
            f = next((f for f in self.porter.findings if f.api == c or f.api.startswith(c + ".")), None)
            if f is not None:
                return (f"the file uses {c} (line {f.line}), whose casts and master weights change what this "
                        "computes: port both by hand")
        return ""

    def reported(self, use: ast.Name) -> Tuple[ast.AST, Optional[str]]:
        """The node scan reported for a use (the longest chain with a row) and its API."""
        chain = [use]
        while isinstance(_parent(chain[-1]), ast.Attribute) and _parent(chain[-1]).value is chain[-1]:
            chain.append(_parent(chain[-1]))
        for node in reversed(chain):
            qualified = self.porter.imports.qualified(node)
            api = names.api_of(qualified) if qualified else None
            if api not in (None, "apex", "triton"):
                return node, api
        return chain[-1], None

    def port_statement(self, bindings: List[names.Binding]) -> None:
        porter, src = self.porter, self.src
        statement = bindings[0].statement
        first_line = src.segment(statement).splitlines()[0].strip()
        problems: List[str] = []
        cands = []
        for b in bindings:
            others = [o for o in porter.imports.bindings if o.local == b.local and o.statement is not statement]
            if others or b.local in self.bound:
                line = others[0].statement.lineno if others else self.bound[b.local]
                problems.append(f"`{b.local}` is also bound at line {line} (a fallback?): port it by hand")
            for use in self.uses.get(b.local, ()):
                node, api = self.reported(use)
                if api is None:
                    problems.append(f"`{src.segment(node)}` (line {node.lineno}) has no torch-native spelling")
                    continue
                rewrite = rewrites.native_rewrite(api)
                if rewrite is None:
                    problems.append(f"{api} (line {node.lineno}): "
                                    + rewrites.NO_NATIVE_REWRITE.get(api, "no torch-native spelling"))
                    continue
                call = _parent(node)
                if not (isinstance(call, ast.Call) and call.func is node) or porter.imports.qualified(node) != api:
                    why = f"{api} used other than as a call (line {node.lineno}): port it by hand"
                    c = porter.cand(node, api, why=why)
                    problems.append(why)
                    cands += [c] if c is not None else []
                    continue
                why = self.conflict(rewrite)
                edits, expect, message = ([], [], "") if why else self.call_edits(call, api, rewrite)
                if not edits:
                    why = why or message
                    c = porter.cand(node, api, why=f"{api}: {why}")
                    problems.append(f"{api} (line {node.lineno}): {why}")
                elif rewrite.unsafe:
                    c = porter.cand(node, api, why=f"{api}: not rewritten, {rewrite.unsafe} (--unsafe rewrites it: "
                                    f"{message})", unsafe_edits=edits, unsafe_message=message + " [unsafe]")
                    if not porter.unsafe:
                        problems.append(f"{api} (line {node.lineno}) is rewritten only with --unsafe")
                else:
                    c = porter.cand(node, api, edits, message, expect=expect)
                    if c is not None and not c.enabled:
                        problems.append(c.why)
                cands += [c] if c is not None else []
        if not cands:
            return  # nothing this file spells has a torch-native rewrite: the table's reasons name each use
        edit, problem = self.import_edit(statement, {id(b.alias) for b in bindings})
        if problem:
            problems.append(problem)
        imports = []
        why = ""
        if problems:
            why = (f"`{first_line}` (line {statement.lineno}) and the uses of what it binds are ported together or "
                   "not at all; kept: " + "; ".join(dict.fromkeys(problems)))
        for f in porter.by_pos.get((statement.lineno, statement.col_offset + 1), ()):
            if f.api.startswith("apex") and id(f) not in porter.cands and id(f) not in porter.notes:
                if why:
                    porter.cand(statement, f.api, why=why)
                    continue
                c = porter.cand(statement, f.api, [edit] if not imports else [], message=
                                f"`{first_line}` -> `{edit[2]}`" if edit[2] else f"`{first_line}` removed")
                c.message = c.message + ": its uses now call torch"
                c.enabled = True
                imports.append(c)
        if why:
            for c in cands:
                c.disable(why)
            return
        if not imports:  # scan reports every apex import; should one not be, the edit rides on a use
            cands[0].edits.append(edit)
        porter.groups.append(([c for c in cands + imports if c is not None],
                              "the import and the uses of what it binds"))

    # ---------------------------------------------------------------- the call
    def call_edits(self, call: ast.Call, api: str, rewrite: rewrites.Rewrite) -> Tuple[List[Edit], List[str], str]:
        """(edits, the text each replaces, message), or ([], [], why not)."""
        src = self.src
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return [], [], "*args / **kwargs: port cannot see which arguments it passes"
        if len(call.args) > len(rewrite.params):
            return [], [], f"more positional arguments than {api} takes"
        args: List[Tuple[str, ast.AST, bool]] = [(rewrite.params[i], a, False) for i, a in enumerate(call.args)]
        for k in call.keywords:
            if k.arg not in rewrite.params:
                return [], [], f"`{k.arg}=` is not a parameter of {api}"
            args.append((k.arg, k.value, True))
        given = {name: node for name, node, _ in args}
        key = None
        if rewrite.switch:
            node = given.get(rewrite.switch)
            if node is None:
                key = rewrite.switch_default
            elif isinstance(node, ast.Constant) and isinstance(node.value, (bool, int)):
                key = bool(node.value)
            else:
                return [], [], (f"`{rewrite.switch}={src.segment(node)}` is not a literal: port cannot tell which "
                                "torch class computes the same")
        target, explicit = rewrite.variants[key]
        for name, want in rewrite.required.items():
            node = given.get(name)
            if node is not None and not _literal_is(node, want):
                return [], [], (f"`{name}={src.segment(node)}`: torch.{target} computes the same only with "
                                f"{name}={want!r}")
        # where each argument starts and ends in the text
        spans = []
        at = self.porter.after_paren(call)
        for name, node, keyword in args:
            start, end = src.span(node)
            if keyword:
                match = re.search(r"\b" + re.escape(name) + r"\s*=\s*[(\s]*$", src.text[at:start])
                if match is None:
                    return [], [], "an argument spelled in a way port does not read: port it by hand"
                start = at + match.start()
            spans.append((start, end))
            at = end
        edits: List[Edit] = []
        keep = [name in rewrite.passed for name, _, _ in args]
        in_place = True  # positional arguments keep their place up to the first one dropped or moved
        for i, (name, node, keyword) in enumerate(args):
            if keyword:
                break
            if keep[i] and in_place and i < rewrite.positional:
                continue
            in_place = False
            if keep[i]:
                edits.append((spans[i][0], spans[i][0], f"{name}="))
        i = 0
        while i < len(args):  # runs of dropped arguments, with the separators that go with them
            if keep[i]:
                i += 1
                continue
            j = i
            while j + 1 < len(args) and not keep[j + 1]:
                j += 1
            if j + 1 < len(args):
                edits.append((spans[i][0], spans[j + 1][0], ""))
            elif i > 0:
                edits.append((spans[i - 1][1], spans[j][1], ""))
            else:
                edits.append((spans[0][0], spans[j][1], ""))
            i = j + 1
        for s, e, t in edits:  # a dropped argument must not hold another finding (its rewrite would be lost)
            inner = next((f for f in self.porter.findings if e > s and s <= src.offset(f.line, f.col - 1) < e), None)
            if inner is not None and not t:
                return [], [], f"an argument port would drop holds {inner.api} (line {inner.line}): port it by hand"
        added = [f"{name}={text}" for name, text in explicit.items() if name not in given]
        if added:
            if spans and any(keep):
                edits.append((spans[-1][1], spans[-1][1], ", " + ", ".join(added)))
            else:
                at = self.porter.after_paren(call)
                edits.append((at, at, ", ".join(added)))
        func_start, func_end = src.span(call.func)
        spelled = src.segment(call.func)
        edits.append((func_start, func_end, f"{self.torch}.{target}"))
        expect = [src.text[s:e] for s, e, _ in edits[:-1]] + [_dotted(call.func) or "\0"]
        if spelled != expect[-1]:
            return [], [], "a name spelled in a way port does not read: port it by hand"
        problem = self.check(call, edits, sum(keep) + len(added))
        if problem:
            return [], [], problem
        dropped = [name for (name, _, _), k in zip(args, keep) if not k]
        message = f"{api}(...) -> torch.{target}(...)"
        if added:
            message += f" with {', '.join(added)} (apex's, where torch's default differs)"
        if dropped:
            message += f", {', '.join(dropped)} dropped (" + ("the values under which it computes the same"
                                                             if any(d in rewrite.required or d == rewrite.switch
                                                                    for d in dropped) else "speed or memory only") + ")"
        return edits, expect, message + f"; equal when: {rewrite.when}"

    def check(self, call: ast.Call, edits: Sequence[Edit], count: int) -> str:
        """The rewritten call parses and passes what was meant (else: by hand)."""
        from .port import _apply

        start, end = self.src.span(call)
        text = _apply(self.src.text[start:end], [(s - start, e - start, t) for s, e, t in edits])
        try:
            new = ast.parse("(" + text + ")", mode="eval").body
        except SyntaxError:
            return "its arguments are spelled in a way port does not rewrite: port it by hand"
        names_passed = [k.arg for k in new.keywords] if isinstance(new, ast.Call) else None
        if names_passed is None or len(new.args) + len(names_passed) != count:
            return "its arguments are spelled in a way port does not rewrite: port it by hand"
        return ""

    # ---------------------------------------------------------------- the import
    def import_edit(self, statement: ast.stmt, dropped: set) -> Tuple[Edit, str]:
        """The statement without the apex names (deleted, ``pass``, or ``import torch`` where the file needs it)."""
        src = self.src
        start, end = src.span(statement)
        segment = src.text[start:end]
        none: Edit = (start, start, "")
        if "#" in segment or "\\" in segment:
            return none, f"`{segment.splitlines()[0].strip()}` spans lines port does not rewrite"
        kept = [a for a in statement.names if id(a) not in dropped]
        if kept:
            if self.need_torch:
                return none, "the file does not import torch, and the import keeps other names"
            spelled = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in kept)
            head = "import " if isinstance(statement, ast.Import) else \
                f"from {'.' * statement.level}{statement.module or ''} import "
            return (start, end, head + spelled), ""
        if self.need_torch:
            if statement not in self.porter.tree.body:
                return none, "the file does not import torch at module level"
            return (start, end, "import torch"), ""
        parent = _parent(statement)
        block = next((getattr(parent, f) for f in ("body", "orelse", "finalbody")
                      if statement in getattr(parent, f, ()) or ()), [statement])
        if len(block) == 1:
            return (start, end, "pass"), ""
        line_start = src.starts[statement.lineno - 1]
        line_end = src.starts[statement.end_lineno] if statement.end_lineno < len(src.starts) else len(src.text)
        if src.text[line_start:start].strip() or not re.fullmatch(r"[ \t]*(#[^\r\n]*)?(\r\n|\r|\n)?",
                                                                   src.text[end:line_end]):
            return none, f"`{segment}` shares its line with other code: port it by hand"
        return (line_start, line_end, ""), ""


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([node.id] + parts[::-1])


def _literal_is(node: ast.AST, want) -> bool:
    if not isinstance(node, ast.Constant):
        return False
    if want is None or node.value is None:
        return node.value is want
    if isinstance(want, bool):
        return isinstance(node.value, (bool, int)) and bool(node.value) is want
    return isinstance(node.value, (int, float)) and not isinstance(node.value, bool) and node.value == want
