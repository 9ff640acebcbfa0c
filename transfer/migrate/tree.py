"""``transfer port`` over files and directory trees: where results go, and the summary.

Modes: out of tree (`out`, the default: ``<out>/<path relative to its SRC
root>``), `diff` (a unified diff on stdout, ``a/`` and ``b/`` prefixed, for
``patch -p1``), `in_place`. change_list.csv (File, Start Line, End Line,
Operation, Message) goes to `out` (in place: the current directory).
Unparsable files are reported and skipped (copied unchanged out of tree).
"""

from __future__ import annotations

import csv
import difflib
import os
import shutil
from typing import List, NamedTuple, Optional, TextIO

from . import port, source

CHANGE_COLUMNS = ["File", "Start Line", "End Line", "Operation", "Message"]


class Outcome(NamedTuple):
    transformed: List[str]
    skipped: List[str]  # nothing to change
    failed: List[str]
    changes: List[port.Change]
    unsafe_skipped: int

    def summary(self) -> str:
        text = (f"Transformed {len(self.transformed)} / Skipped {len(self.skipped)} / "
                f"Failed {len(self.failed)} file(s); {sum(c.operation != 'UNSUPPORTED' for c in self.changes)} "
                f"change(s), {sum(c.operation == 'UNSUPPORTED' for c in self.changes)} left for a person")
        if self.unsafe_skipped:
            text += f"; {self.unsafe_skipped} more with --unsafe"
        return text


def run(paths: List[str], profile: str, out: Optional[str] = None, diff: Optional[TextIO] = None,
        in_place: bool = False, unsafe: bool = False, errors: Optional[TextIO] = None) -> Outcome:
    """Port every Python file under `paths`; exactly one of out / diff / in_place."""
    transformed, skipped, failed, changes = [], [], [], []
    unsafe_skipped = 0
    for root, path in source.python_files(paths):
        rel = os.path.relpath(path, root)
        destination = os.path.join(out, rel) if out else None
        try:
            text, encoding = source.read(path)
            result = port.port_source(text, profile, path, unsafe)
        except (SyntaxError, UnicodeDecodeError, ValueError, port.cst.ParserSyntaxError) as exc:
            failed.append(path)
            if errors is not None:
                errors.write(f"{path}: skipped, could not be parsed: {str(exc).splitlines()[0]}\n")
            if destination:
                _copy(path, destination)
            continue
        changes.extend(result.changes)
        unsafe_skipped += result.unsafe_skipped
        changed = result.text != text
        (transformed if changed else skipped).append(path)
        if diff is not None:
            if changed:
                name = os.path.relpath(path).replace(os.sep, "/")
                diff.writelines(difflib.unified_diff(text.splitlines(True), result.text.splitlines(True),
                                                     f"a/{name}", f"b/{name}"))
        elif in_place:
            if changed:
                _write(path, result.text, encoding)
        elif destination:
            _write(destination, result.text, encoding)
    outcome = Outcome(transformed, skipped, failed, changes, unsafe_skipped)
    if diff is None:
        write_change_list(os.path.join(out or os.getcwd(), "change_list.csv"), changes)
    return outcome


def write_change_list(path: str, changes: List[port.Change]) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(CHANGE_COLUMNS)
        for change in changes:
            writer.writerow(list(change))


def _write(path: str, text: str, encoding: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding=encoding, newline="") as fh:
        fh.write(text)


def _copy(path: str, destination: str) -> None:
    os.makedirs(os.path.dirname(destination) or ".", exist_ok=True)
    shutil.copyfile(path, destination)
