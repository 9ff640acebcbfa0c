"""``transfer port`` over files and directory trees: where results go, and the summary.

Modes: out of tree (`out`, the default: ``<out>/<path relative to its SRC
root>``), `diff` (a unified diff on stdout, ``a/`` and ``b/`` prefixed, for
``patch -p1``), `in_place`. Unparsable files are reported and skipped (copied
unchanged out of tree).

Besides the sources, out of tree and in place write the report msFmkTransplt
users know, to `out` (in place: the current directory):

* ``change_list.csv``: File, Start Line, End Line, Operation, Message; one row
  per rewrite (INSERT / MODIFY) and per use left for a person (UNSUPPORTED).
  Lines are the original file's, but for the INSERT of the vendor import,
  whose line is the one it has in the ported file;
* ``unsupported_api.csv``: File, Start Line, End Line, API, Message; every use
  the ported code still leaves for a person: the change list's UNSUPPORTED
  rows, and any use the support table classes unsupported on the target;
* ``port.log``: the per-file warnings and the closing summary;
* with `main` (the entry script), ``run_distributed_<device>.sh`` (`launch`).
"""

from __future__ import annotations

import csv
import difflib
import os
import shutil
from typing import List, NamedTuple, Optional, TextIO

from .. import support
from . import launch, port, scan, source

CHANGE_COLUMNS = ["File", "Start Line", "End Line", "Operation", "Message"]
UNSUPPORTED_COLUMNS = ["File", "Start Line", "End Line", "API", "Message"]


class Outcome(NamedTuple):
    transformed: List[str]
    skipped: List[str]  # nothing to change
    failed: List[str]
    changes: List[port.Change]
    unsafe_skipped: int
    unsupported: List[list]  # rows of unsupported_api.csv
    launcher: Optional[str]  # the launch script written, if any

    def summary(self) -> str:
        text = (f"Transformed {len(self.transformed)} / Skipped {len(self.skipped)} / "
                f"Failed {len(self.failed)} file(s); {sum(c.operation != 'UNSUPPORTED' for c in self.changes)} "
                f"change(s), {len(self.unsupported)} left for a person")
        if self.unsafe_skipped:
            text += f"; {self.unsafe_skipped} more with --unsafe"
        return text


def run(paths: List[str], profile: str, out: Optional[str] = None, diff: Optional[TextIO] = None,
        in_place: bool = False, unsafe: bool = False, errors: Optional[TextIO] = None,
        main: Optional[str] = None) -> Outcome:
    """Port every Python file under `paths`; exactly one of out / diff / in_place.

    `main`, one of those files, is the entry script the launch script starts
    (not with `diff`, which writes nothing). Raises FileNotFoundError for a
    path that does not exist and ValueError for a `main` that is not ported.
    """
    files = list(source.python_files(paths))
    entry = None
    if main is not None:
        if diff is not None:
            raise ValueError("--main writes a launch script; --diff writes nothing: drop one of them")
        entry = next(((root, path) for root, path in files if os.path.abspath(path) == os.path.abspath(main)), None)
        if entry is None:
            raise ValueError(f"--main {main}: not among the files being ported; give a .py file under SRC")
    folder = out or os.getcwd()  # where the reports and the launch script go (not with diff)
    transformed, skipped, failed, changes, unsupported = [], [], [], [], []
    unsafe_skipped = 0
    log: List[str] = []
    main_ported = None  # (where the entry script now is, its ported text)
    for root, path in files:
        rel = os.path.relpath(path, root)
        destination = os.path.join(out, rel) if out else None
        try:
            text, encoding = source.read(path)
            result = port.port_source(text, profile, path, unsafe)
        except (SyntaxError, UnicodeDecodeError, ValueError, port.cst.ParserSyntaxError) as exc:
            failed.append(path)
            log.append(f"{path}: skipped, could not be parsed: {str(exc).splitlines()[0]}")
            if errors is not None:
                errors.write(log[-1] + "\n")
            if destination:
                _copy(path, destination)
            continue
        changes.extend(result.changes)
        left = [[c.file, c.start_line, c.end_line, c.api, c.message] for c in result.changes
                if c.operation == "UNSUPPORTED"]
        touched = {c.start_line for c in result.changes}
        for finding in scan.scan_source(text, path):  # what the table says no target can do, if the port missed it
            verdict = support.lookup(profile, finding.api)
            if verdict.cls == support.UNSUPPORTED and finding.line not in touched:
                left.append([path, finding.line, finding.end_line, finding.api, verdict.reason])
        unsupported.extend(sorted(left, key=lambda r: r[1]))
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
        if entry is not None and path == entry[1]:
            main_ported = (destination or path, result.text)
    launcher = None
    if entry is not None and main_ported is None:
        log.append(f"{main}: no launch script, the entry script could not be parsed")
        if errors is not None:
            errors.write(log[-1] + "\n")
    elif main_ported is not None:
        where, text = main_ported
        launcher = os.path.join(folder, launch.script_name(profile))
        main_rel = os.path.relpath(where, folder).replace(os.sep, "/")
        _write(launcher, launch.render(profile, main_rel, text), "utf-8")
        os.chmod(launcher, 0o755)
    outcome = Outcome(transformed, skipped, failed, changes, unsafe_skipped, unsupported, launcher)
    if diff is None:
        write_csv(os.path.join(folder, "change_list.csv"), CHANGE_COLUMNS, [list(c)[:5] for c in changes])
        write_csv(os.path.join(folder, "unsupported_api.csv"), UNSUPPORTED_COLUMNS, unsupported)
        _write(os.path.join(folder, "port.log"), "\n".join(log + [outcome.summary()]) + "\n", "utf-8")
    return outcome


def write_csv(path: str, columns: List[str], rows: List[list]) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        writer.writerows(rows)


def _write(path: str, text: str, encoding: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding=encoding, newline="") as fh:
        fh.write(text)


def _copy(path: str, destination: str) -> None:
    os.makedirs(os.path.dirname(destination) or ".", exist_ok=True)
    shutil.copyfile(path, destination)
