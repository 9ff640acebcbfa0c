"""``transfer scan`` over files and directories, and its text / JSON / CSV output.

CSV columns begin as msFmkTransplt's reports do (File, Start Line, End Line,
API, Status, Message) so existing spreadsheets take them; Column follows, and
with no --device one status column per profile.
"""

from __future__ import annotations

import csv
import functools
import io
import json
from collections import Counter
from typing import Any, Dict, List, NamedTuple, Optional

from .. import opsupport, support
from . import scan, source
from . import progress as progress_

CSV_COLUMNS = ["File", "Start Line", "End Line", "API", "Status", "Message", "Column"]
# The worst class first: a finding's Status over several profiles is its worst.
_SEVERITY = {support.UNSUPPORTED: 5, support.FLOAT32: 4, support.PLACEHOLDER: 3, support.CPU_FALLBACK: 2,
             support.NOOP: 1, support.TRANSLATED: 0}


class ScanResult(NamedTuple):
    profiles: List[str]
    files: List[str]  # scanned
    failed: List[Dict[str, str]]  # {"file", "error"}
    findings: List[scan.Finding]
    ops: Optional[opsupport.ScanNames] = None  # --device X: the operator data judged (its version)

    def status(self, finding: scan.Finding) -> Dict[str, support.Support]:
        return scan.statuses(finding.api, self.profiles, self.ops.version if self.ops else None)

    def unsupported(self) -> int:
        return sum(1 for f in self.findings
                   if any(s.cls == support.UNSUPPORTED for s in self.status(f).values()))

    def counts(self) -> Dict[str, Dict[str, int]]:
        out = {p: Counter() for p in self.profiles}
        for f in self.findings:
            for p, s in self.status(f).items():
                out[p][s.cls] += 1
        return {p: {c: out[p][c] for c in support.CLASSES} for p in self.profiles}


def _scan_one(path: str, ops: Optional[opsupport.ScanNames] = None):
    """(path, findings, error) of one file: read, parsed and scanned once, in a worker."""
    try:
        text, _ = source.read(path)
        if source.is_cuda_source(path):
            return path, [scan.cuda_source_finding(path, text)], None
        return path, scan.scan_source(text, path, ops=ops), None
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        return path, None, f"{type(exc).__name__}: {exc}"


def installed_torch() -> Optional[str]:
    """The installed torch's version, read from its metadata (torch is not imported), or None."""
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python 3.7
        return None
    try:
        return metadata.version("torch")
    except Exception:  # not installed, or broken metadata
        return None


def run(paths: List[str], profiles: List[str], jobs: Optional[int] = None, progress: bool = True,
        torch_version: Optional[str] = None) -> ScanResult:
    """Scan every Python (and .cu/.cuh) file under `paths` in `jobs` worker processes (default: one per
    core); files that fail to read or parse are listed, not fatal. With one profile, also the torch APIs
    its plug-in runs on the CPU or in float32 (`opsupport.scan_names`), judged for `torch_version`
    (default: the installed torch's, else the newest version the data has)."""
    files, failed, findings = [], [], []
    paths_ = [path for _, path in source.files(paths)]
    ops = opsupport.scan_names(profiles[0], torch_version or installed_torch()) if len(profiles) == 1 else None
    work = functools.partial(_scan_one, ops=ops) if ops is not None else _scan_one
    for path, found, error in progress_.run_all(work, paths_, "transfer scan", jobs, progress):
        if error is not None:
            failed.append({"file": path, "error": error})
            continue
        files.append(path)
        findings.extend(found)
    return ScanResult(list(profiles), files, failed, findings, ops)


def _describe(s: support.Support) -> str:
    return s.cls + (f" -> {s.to}" if s.to else "")


def as_text(result: ScanResult) -> str:
    lines = []
    for f in result.findings:
        st = result.status(f)
        if len(st) == 1:
            (s,) = st.values()
            lines.append(f"{f.file}:{f.line}:{f.col}: {f.api}: {_describe(s)}" + (f" ({s.reason})" if s.reason else ""))
        else:
            lines.append(f"{f.file}:{f.line}:{f.col}: {f.api}: {_classes(st)}")
    for fail in result.failed:
        lines.append(f"{fail['file']}: skipped, could not be read: {fail['error']}")
    lines.append(summary(result))
    if len(result.profiles) > 1 and result.findings:
        lines.append("what each becomes, and why: transfer scan --device TARGET (or --format csv)")
    return "\n".join(lines) + "\n"


def _classes(status: Dict[str, support.Support]) -> str:
    """Several targets in one short phrase: ``translated``, or ``placeholder (cpu), translated (the other 7)``: the
    class of most targets last, counted, so the line stays short however many targets there are."""
    by_class: Dict[str, List[str]] = {}
    for profile, entry in status.items():
        by_class.setdefault(entry.cls, []).append(profile)
    if len(by_class) == 1:
        return next(iter(by_class))
    *fewer, (most, others) = sorted(by_class.items(), key=lambda item: len(item[1]))  # stable: table order in ties
    return ", ".join([f"{cls} ({', '.join(profiles)})" for cls, profiles in fewer]
                     + [f"{most} (the other {len(others)})" if len(others) > 2 else f"{most} ({', '.join(others)})"])


def summary(result: ScanResult) -> str:
    per_profile = "; ".join(f"{p}: " + ", ".join(f"{n} {c}" for c, n in counts.items() if n)
                            for p, counts in result.counts().items())
    ops = result.ops
    judged = ""
    if ops is not None and ops.version:
        cov = opsupport.coverage(ops.profile, ops.version)
        judged = (f"; torch APIs judged for {cov.describe()} (transfer/data: {len(cov.apis)} APIs its plug-in runs "
                  f"on the CPU)")
    return (f"scanned {len(result.files)} file(s), {len(result.failed)} skipped (unparsable), "
            f"{len(result.findings)} CUDA-facing use(s)" + (f" [{per_profile}]" if result.findings else "") + judged)


def as_json(result: ScanResult) -> str:
    data: Dict[str, Any] = {
        "profiles": result.profiles,
        "operators": ({"profile": result.ops.profile, "version": result.ops.version} if result.ops else None),
        "files": result.files,
        "failed": result.failed,
        "findings": [dict(f._asdict(), status={p: s._asdict() for p, s in result.status(f).items()})
                     for f in result.findings],
        "summary": {"files": len(result.files), "failed": len(result.failed), "findings": len(result.findings),
                    "by_class": result.counts()},
    }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def as_csv(result: ScanResult) -> str:
    out = io.StringIO()
    several = len(result.profiles) > 1
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS + (result.profiles if several else []))
    for f in result.findings:
        st = result.status(f)
        worst = max(st.values(), key=lambda s: _SEVERITY[s.cls])
        message = "; ".join(f"{p}: {_describe(s)}: {s.reason}" for p, s in st.items()) if several \
            else (f"{_describe(worst)}: {worst.reason}")
        row = [f.file, f.line, f.end_line, f.api, worst.cls, message, f.col]
        writer.writerow(row + ([_describe(s) for s in st.values()] if several else []))
    for fail in result.failed:
        writer.writerow([fail["file"], "", "", "", "skipped", fail["error"], ""] + ([""] * len(result.profiles)
                                                                                     if several else []))
    return out.getvalue()


FORMATS = {"text": as_text, "json": as_json, "csv": as_csv}
