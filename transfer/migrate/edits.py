"""The edit machinery every rule of ``transfer port`` shares (`port`, `rules`).

A rewrite is a list of `Edit`s, ``(start, end, replacement)`` in characters of
the source text; `SourceText` turns `ast` positions (UTF-8 byte columns) into
those offsets and builds the common edits (a literal's value, an attribute's
last name, an argument put first). A `Candidate` is one scan finding's
rewrite, or why it is left for a person; `apply_edits` makes a list of
non-overlapping edits. `Change` is one row of change_list.csv. The AST helpers
read the ``_parent`` links `scan.scan_tree` sets.

Nothing here decides what to rewrite: the rules do, and `port.Porter` settles
them. Plain `ast` and text; never imports torch.
"""

from __future__ import annotations

import ast
import re
from typing import List, NamedTuple, Optional, Sequence, Tuple

from . import scan

Edit = Tuple[int, int, str]  # (start, end, replacement) in characters
_LITERAL = re.compile(r"^([rRuU]?)('''|\"\"\"|'|\")(.*)\2$", re.DOTALL)


class Change(NamedTuple):
    """One row of change_list.csv."""

    file: str
    start_line: int
    end_line: int
    operation: str  # INSERT / MODIFY / DELETE / UNSUPPORTED
    message: str
    api: str = ""  # UNSUPPORTED rows: what is left (unsupported_api.csv's API column); not in change_list.csv


class SourceText:
    """Character offsets of `ast` positions (columns are UTF-8 byte offsets), and the edits built on them."""

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

    def literal_edit(self, node: ast.AST, new_value: str) -> Optional[Edit]:
        """Replace a one-piece string literal's value, keeping its prefix and quotes."""
        start, end = self.span(node)
        match = _LITERAL.match(self.text[start:end])
        if not match or isinstance(node, ast.Constant) and match.group(3) != node.value:
            return None  # implicit concatenation, escapes: not ours to rewrite
        return start, end, f"{match.group(1)}{match.group(2)}{new_value}{match.group(2)}"

    def token_edit(self, node: ast.Attribute, new: str) -> Edit:
        """Replace the attribute name that ends `node` (``x.cuda`` -> ``x.<new>``)."""
        end = self.offset(node.end_lineno, node.end_col_offset)
        return end - len(node.attr), end, new

    def after_paren(self, call: ast.Call) -> int:
        """The offset just past the call's opening parenthesis."""
        at = self.offset(call.func.end_lineno, call.func.end_col_offset)
        return self.text.index("(", at) + 1

    def first_arg_edit(self, call: ast.Call, text: str) -> Edit:
        at = self.after_paren(call)
        return at, at, text + (", " if call.args or call.keywords else "")


class Candidate:
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


def apply_edits(text: str, edits: List[Edit]) -> str:
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


def key(node: ast.AST, api: str) -> Tuple[int, int, str]:
    """The (line, 1-based column, API) under which scan reports `api` at `node`."""
    return node.lineno, node.col_offset + 1, api


def callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def parent_of(node: ast.AST) -> Optional[ast.AST]:
    return getattr(node, "_parent", None)


def inside(finding: scan.Finding, node: ast.AST) -> bool:
    start = (node.lineno, node.col_offset + 1)
    end = (node.end_lineno, node.end_col_offset + 1)
    return start <= (finding.line, finding.col) < end
