"""The accuracy mode's report: a JSON-lines file per rank, one summary line at exit, a per-module picture.

Lines of the file (``kind``): ``start`` (mode, rank, torch, device), ``finding`` (the first divergence or
non-finite value: op, site, module, phase, step, rank, metrics), ``note`` (what was not checked, GradScaler
overflows), ``modules`` (error per module along the network in the first divergent step), ``end``
(operations checked, steps, the summary line).

``python -m transfer.compare FILE...`` merges the files of a job's ranks and names the first rank and
operation to diverge (the lowest step; in it a rank's own operation before a collective, whose wrong
output came from another rank; then the earliest operation).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Optional

from .options import rank, rank_path


EAGER = "torch.compile regions ran eagerly (the mode checks each operation; without it they run compiled)"


def _short_site(site: str) -> str:
    path, _, line = site.rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else site


def describe(finding: Dict[str, Any]) -> str:
    """``aten::gelu at model.py:87 in transformer.h.0.mlp, forward, step 3, rank 0: max abs err ...``"""
    where = (f"{finding['op']} at {_short_site(finding['site'])} in {finding['module'] or '(no module)'}, "
             f"{finding['phase']}, step {finding['step']}, rank {finding.get('rank', 0)}")
    metrics = finding.get("metrics") or {}
    parts = []
    for key, label in (("max_abs_err", "max abs err"), ("max_rel_err", "max rel err"), ("cosine", "cosine"),
                       ("ulp", "ulp"), ("reference_error", "CPU's own error"), ("nonfinite", "non-finite values"),
                       ("differs", "differs in")):
        if key in metrics and metrics[key] is not None:
            value = metrics[key]
            parts.append(f"{label} {value:.3g}" if isinstance(value, float) else f"{label} {value}")
    return where + (": " + ", ".join(parts) if parts else "")


class Report:
    """Findings of one rank, written as they come; the summary at `close`."""

    def __init__(self, settings, device: str):
        self.settings = settings
        self.path = os.path.abspath(rank_path(settings.report))
        self.rank = rank()
        self.finding: Optional[Dict[str, Any]] = None
        self.notes: List[str] = []
        self.quiet: List[str] = []
        self.checked = 0
        self.eager = False  # a torch.compile'd module ran eagerly
        self.closed = False
        # Opened at the first line after an operation was checked: a process that runs none (torchrun's
        # agent, which imports torch too) writes no file and prints nothing, so it never overwrites a rank's.
        self.fh = None
        self.waiting: List[Dict[str, Any]] = []
        import torch

        self.write({"kind": "start", "mode": settings.mode, "rank": self.rank, "torch": torch.__version__,
                    "device": device, "pid": os.getpid()})

    def write(self, record: Dict[str, Any]) -> None:
        if self.closed:
            return
        if self.fh is None:
            if not self.checked and record.get("kind") != "finding":
                self.waiting.append(record)
                return
            self.fh = open(self.path, "w")
            for line in self.waiting:
                self.fh.write(json.dumps(line, default=str) + "\n")
            self.waiting = []
        self.fh.write(json.dumps(record, default=str) + "\n")
        self.fh.flush()

    def found(self, op, metrics: Dict[str, Any], what: str = "divergence") -> None:
        if self.finding is not None:
            return
        self.finding = dict(op.where(), rank=self.rank, what=what, metrics=metrics)
        self.write(dict(self.finding, kind="finding"))

    def note(self, text: str, summary: bool = True, **data) -> None:
        """Something the user should know (what was not checked); `summary`: also in the summary line."""
        if text not in self.notes and text not in self.quiet:
            (self.notes if summary else self.quiet).append(text)
            self.write(dict(data, kind="note", text=text))

    def ran_eagerly(self) -> None:
        """A torch.compile'd module ran (eagerly, the mode having disabled dynamo): said in the summary."""
        self.eager = True
        self.write({"kind": "note", "text": EAGER})

    def modules(self, step: int, rows: List[Dict[str, Any]], unit: str) -> None:
        """Error per module along the network in the first divergent step: a line, and the picture."""
        self.write({"kind": "modules", "step": step, "unit": unit, "rows": rows})
        picture(rows, os.path.splitext(self.path)[0], step, unit)

    def summary(self) -> str:
        mode = self.settings.mode
        if self.finding is not None:
            head = "first non-finite value" if self.finding["what"] == "nonfinite" else "first divergence"
            text = f"transfer compare ({mode}): {head}: {describe(self.finding)}"
        elif mode == "record":
            text = f"transfer compare (record): {self.checked} operations recorded, rank {self.rank}"
        else:
            text = f"transfer compare ({mode}): no divergence in {self.checked} operations checked, rank {self.rank}"
        extra = "".join(f"; {n}" for n in ([EAGER] if self.eager else []) + self.notes[:3])
        return f"{text}{extra}; report: {self.path}"

    def close(self, steps: int) -> Optional[str]:
        """Write the end line and return the summary; None (no file, nothing to say) when the process ran
        no operation."""
        if self.closed:
            return None
        line = self.summary()
        self.write({"kind": "end", "checked": self.checked, "steps": steps, "summary": line})
        self.closed = True
        if self.fh is None:
            return None
        self.fh.close()
        return line


def picture(rows: List[Dict[str, Any]], stem: str, step: int, unit: str) -> str:
    """Error per module (rows in network order: module, phase, error) as ``stem.png`` (matplotlib) or a
    text table ``stem.txt``; returns the file written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # not installed (or no usable backend): the table
        plt = None
    if plt is not None:
        path = stem + ".png"
        labels = [f"{r['module'] or '(no module)'} [{r['phase'][0]}]" for r in rows]
        values = [max(float(r["error"]), 1e-12) for r in rows]
        fig, ax = plt.subplots(figsize=(8, max(2.5, 0.28 * len(rows) + 1)))
        colours = ["tab:red" if v > 1 else "tab:blue" for v in values]
        ax.barh(range(len(rows)), values, color=colours)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xlabel(unit)
        ax.set_title(f"step {step}: error per module (red: over the threshold)")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path
    path = stem + ".txt"
    width = max([len(r["module"] or "(no module)") for r in rows] + [6])
    with open(path, "w") as fh:
        fh.write(f"step {step}: {unit} per module (> 1: over the threshold)\n")
        for r in rows:
            bar = "#" * min(40, max(0, int(10 + 4 * _log10(float(r["error"])))))
            fh.write(f"{(r['module'] or '(no module)'):<{width}}  {r['phase']:<8}  {float(r['error']):9.3g}  {bar}\n")
    return path


def _log10(x: float) -> float:
    import math

    return math.log10(x) if x > 0 else -10.0


def merge(paths: List[str]) -> str:
    """The first rank and operation to diverge over the report files of a job's ranks."""
    found = []
    for path in paths:
        with open(path) as fh:
            for line in fh:
                record = json.loads(line)
                if record.get("kind") == "finding":
                    found.append(record)
    if not found:
        return f"transfer compare: no divergence on any of {len(paths)} rank(s)"
    # the lowest step; in it, a rank's own operation before a collective (a collective's output that is
    # wrong on a rank whose inputs were right got it from another rank); then the earliest operation
    first = min(found, key=lambda f: (f["step"], f["op"].startswith(("c10d", "_c10d")), f["index"], f["rank"]))
    others = sorted({f["rank"] for f in found} - {first["rank"]})
    also = f" (also diverged: rank {', '.join(map(str, others))})" if others else ""
    return f"transfer compare: first divergence: {describe(first)}{also}"


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m transfer.compare REPORT.jsonl [REPORT.jsonl ...]  (one file per rank)",
              file=sys.stderr)
        return 2
    print(merge(argv))
    return 0
