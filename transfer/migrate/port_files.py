"""``transfer port`` over files and directory trees: where results go, and the summary.

Modes: out of tree (`out`, the default: ``<out>/<path relative to its SRC
root>``), `diff` (a unified diff on stdout, ``a/`` and ``b/`` prefixed, for
``patch -p1``), `in_place`. Unparsable files are reported and skipped (copied
unchanged out of tree); ``.cu``/``.cuh`` files are copied unchanged and named in
unsupported_api.csv. Worker processes (`progress.pool_map`, one per core by
default) each read, parse, port and write whole files.

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
from typing import Dict, List, NamedTuple, Optional, TextIO, Tuple

from .. import support
from . import launch, port, scan, source
from . import progress as progress_

CHANGE_COLUMNS = ["File", "Start Line", "End Line", "Operation", "Message"]
LEFT_CAP = 40  # lines of what is left for a person printed under the summary; the CSV holds the rest
GROUP_PLACES = 4  # places shown on the line of a reason shared by several uses
UNSUPPORTED_COLUMNS = ["File", "Start Line", "End Line", "API", "Message"]


class Outcome(NamedTuple):
    transformed: List[str]
    skipped: List[str]  # nothing to change
    failed: List[str]
    changes: List[port.Change]
    unsafe_skipped: int
    unsupported: List[list]  # rows of unsupported_api.csv
    launcher: Optional[str]  # the launch script written, if any
    reports: Optional[str] = None  # the folder of unsupported_api.csv (None with --diff: nothing written)

    def summary(self) -> str:
        text = (f"Transformed {len(self.transformed)} / Skipped {len(self.skipped)} / "
                f"Failed {len(self.failed)} file(s); {sum(c.operation != 'UNSUPPORTED' for c in self.changes)} "
                f"change(s), {len(self.unsupported)} left for a person")
        if self.unsafe_skipped:
            text += f"; {self.unsafe_skipped} more with --unsafe"
        return text

    def left(self, cap: int = LEFT_CAP) -> List[str]:
        """What is left for a person, for the terminal (port prints it under its summary, --diff too): one
        line per use, ``file:line: API: why and what to write instead`` (the rows of unsupported_api.csv);
        uses left for one same reason grouped on one line with their places; past `cap` lines, a pointer to
        the CSV that holds them all."""
        groups: Dict[Tuple[str, str], List[str]] = {}
        for file, start, _, api, message in self.unsupported:
            groups.setdefault((api, message), []).append(f"{file}:{start}")
        lines = []
        for (api, message), places in groups.items():
            what = message if message.startswith(api) else f"{api}: {message}"
            if len(places) == 1:
                lines.append(f"{places[0]}: {what}")
            else:
                shown = ", ".join(places[:GROUP_PLACES]) + (", ..." if len(places) > GROUP_PLACES else "")
                lines.append(f"{len(places)} places ({shown}): {what}")
        if len(lines) > cap:
            where = os.path.join(self.reports, "unsupported_api.csv") if self.reports is not None else \
                "unsupported_api.csv (written without --diff)"
            lines = lines[:cap] + [f"... and {len(lines) - cap} more; every one, with its line and why: {where}"]
        return lines


class _Task(NamedTuple):
    root: str
    path: str
    profile: str
    unsafe: bool
    destination: Optional[str]  # out of tree: where the result goes
    in_place: bool
    diff: bool
    keep_text: bool  # the entry script: its ported text comes back


class _Result(NamedTuple):
    path: str
    status: str  # "transformed" / "skipped" / "failed"
    changes: List[port.Change]
    unsafe_skipped: int
    error: str
    diff: str
    text: Optional[str]


def _port_one(task: _Task) -> _Result:
    """Read, parse, scan and port one file, and write it: the whole job of one worker per file."""
    path = task.path
    if source.is_cuda_source(path):  # CUDA C++: copied as it is, and named as a blocker
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                finding = scan.cuda_source_finding(path, fh.read())
        except OSError as exc:
            return _Result(path, "failed", [], 0, f"{path}: skipped, could not be read: {exc}", "", None)
        if task.destination:
            _copy(path, task.destination)
        reason = support.lookup(task.profile, finding.api).reason
        row = port.Change(path, finding.line, finding.end_line, "UNSUPPORTED", reason, finding.api)
        return _Result(path, "skipped", [row], 0, "", "", None)
    try:
        text, encoding = source.read(path)
        result = port.port_source(text, task.profile, path, task.unsafe)
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        if task.destination:
            _copy(path, task.destination)
        return _Result(path, "failed", [], 0, f"{path}: skipped, could not be parsed: {str(exc).splitlines()[0]}",
                       "", None)
    changed = result.text != text
    diff = ""
    if task.diff:
        if changed:
            name = os.path.relpath(path).replace(os.sep, "/")
            diff = "".join(difflib.unified_diff(text.splitlines(True), result.text.splitlines(True),
                                                f"a/{name}", f"b/{name}"))
    elif task.in_place:
        if changed:
            _write(path, result.text, encoding)
    elif task.destination:
        _write(task.destination, result.text, encoding)
    return _Result(path, "transformed" if changed else "skipped", result.changes, result.unsafe_skipped, "", diff,
                   result.text if task.keep_text else None)


def run(paths: List[str], profile: str, out: Optional[str] = None, diff: Optional[TextIO] = None,
        in_place: bool = False, unsafe: bool = False, errors: Optional[TextIO] = None,
        main: Optional[str] = None, jobs: Optional[int] = None, progress: bool = True) -> Outcome:
    """Port every Python file under `paths`; exactly one of out / diff / in_place.

    `main`, one of those files, is the entry script the launch script starts
    (not with `diff`, which writes nothing). `jobs` worker processes (default:
    one per core) each port whole files. .cu/.cuh files are copied out of tree
    unchanged and named in unsupported_api.csv. Raises FileNotFoundError for a
    path that does not exist and ValueError for a `main` that is not ported.
    """
    port.check_profile(profile)
    files = list(source.files(paths))
    entry = None
    if main is not None:
        if diff is not None:
            raise ValueError("--main writes a launch script; --diff writes nothing: drop one of them")
        entry = next(((root, path) for root, path in files if os.path.abspath(path) == os.path.abspath(main)
                      and not source.is_cuda_source(path)), None)
        if entry is None:
            raise ValueError(f"--main {main}: not among the files being ported; give a .py file under SRC")
    folder = out or os.getcwd()  # where the reports and the launch script go (not with diff)
    tasks = [_Task(root, path, profile, unsafe, os.path.join(out, os.path.relpath(path, root)) if out else None,
                   in_place, diff is not None, entry is not None and path == entry[1]) for root, path in files]
    transformed, skipped, failed, changes, unsupported = [], [], [], [], []
    unsafe_skipped = 0
    log: List[str] = []
    main_ported = None  # (where the entry script now is, its ported text)
    for task, result in zip(tasks, progress_.run_all(_port_one, tasks, "transfer port", jobs, progress)):
        if result.status == "failed":
            failed.append(result.path)
            log.append(result.error)
            if errors is not None:
                errors.write(result.error + "\n")
            continue
        (transformed if result.status == "transformed" else skipped).append(result.path)
        changes.extend(result.changes)
        unsupported.extend(sorted(([c.file, c.start_line, c.end_line, c.api, c.message] for c in result.changes
                                   if c.operation == "UNSUPPORTED"), key=lambda r: r[1]))
        unsafe_skipped += result.unsafe_skipped
        if diff is not None and result.diff:
            diff.write(result.diff)
        if result.text is not None:
            main_ported = (task.destination or result.path, result.text)
    skipped = [p for p in skipped if not source.is_cuda_source(p)]
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
    outcome = Outcome(transformed, skipped, failed, changes, unsafe_skipped, unsupported, launcher,
                      None if diff is not None else folder)
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
