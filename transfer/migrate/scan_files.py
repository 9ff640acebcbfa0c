"""``transfer scan`` over files and directories, and its text / JSON / CSV output.

CSV columns begin as msFmkTransplt's reports do (File, Start Line, End Line,
API, Status, Message) so existing spreadsheets take them; Column follows, and
with no --device one status column per profile.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from typing import Any, Dict, List, NamedTuple, Optional

from .. import support
from . import scan, source
from . import progress as progress_

CSV_COLUMNS = ["File", "Start Line", "End Line", "API", "Status", "Message", "Column"]
# The worst class first: a finding's Status over several profiles is its worst.
_SEVERITY = {support.UNSUPPORTED: 3, support.PLACEHOLDER: 2, support.NOOP: 1, support.TRANSLATED: 0}


class ScanResult(NamedTuple):
    profiles: List[str]
    files: List[str]  # scanned
    failed: List[Dict[str, str]]  # {"file", "error"}
    findings: List[scan.Finding]

    def status(self, finding: scan.Finding) -> Dict[str, support.Support]:
        return scan.statuses(finding.api, self.profiles)

    def unsupported(self) -> int:
        return sum(1 for f in self.findings
                   if any(s.cls == support.UNSUPPORTED for s in self.status(f).values()))

    def counts(self) -> Dict[str, Dict[str, int]]:
        out = {p: Counter() for p in self.profiles}
        for f in self.findings:
            for p, s in self.status(f).items():
                out[p][s.cls] += 1
        return {p: {c: out[p][c] for c in support.CLASSES} for p in self.profiles}


def _scan_one(path: str):
    """(path, findings, error) of one file: read, parsed and scanned once, in a worker."""
    try:
        text, _ = source.read(path)
        if source.is_cuda_source(path):
            return path, [scan.cuda_source_finding(path, text)], None
        return path, scan.scan_source(text, path), None
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        return path, None, f"{type(exc).__name__}: {exc}"


def run(paths: List[str], profiles: List[str], jobs: Optional[int] = None, progress: bool = True) -> ScanResult:
    """Scan every Python (and .cu/.cuh) file under `paths` in `jobs` worker processes (default: one per
    core); files that fail to read or parse are listed, not fatal."""
    files, failed, findings = [], [], []
    paths_ = [path for _, path in source.files(paths)]
    for path, found, error in progress_.run_all(_scan_one, paths_, "transfer scan", jobs, progress):
        if error is not None:
            failed.append({"file": path, "error": error})
            continue
        files.append(path)
        findings.extend(found)
    return ScanResult(list(profiles), files, failed, findings)


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
    """Several targets in one short phrase: ``translated``, or ``translated (npu, sdaa, gcu), placeholder (cpu)``."""
    by_class: Dict[str, List[str]] = {}
    for profile, entry in status.items():
        by_class.setdefault(entry.cls, []).append(profile)
    if len(by_class) == 1:
        return next(iter(by_class))
    return ", ".join(f"{cls} ({', '.join(profiles)})" for cls, profiles in by_class.items())


def summary(result: ScanResult) -> str:
    per_profile = "; ".join(f"{p}: " + ", ".join(f"{n} {c}" for c, n in counts.items() if n)
                            for p, counts in result.counts().items())
    return (f"scanned {len(result.files)} file(s), {len(result.failed)} skipped (unparsable), "
            f"{len(result.findings)} CUDA-facing use(s)" + (f" [{per_profile}]" if result.findings else ""))


def as_json(result: ScanResult) -> str:
    data: Dict[str, Any] = {
        "profiles": result.profiles,
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
