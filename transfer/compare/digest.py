"""Two-run diff: per-operation digests recorded in one run (``record:FILE``) and compared in another
(``against:FILE``).

A digest is the operation's first output's shape, dtype and stride, two statistics (sum and L2 norm,
accumulated in the output's dtype, float32 for fp16/bf16: two passes over the output) and four sampled values (flat positions 0, n/3,
2n/3, n-1): one JSON line of about 250 bytes per operation, never a whole tensor. The statistics are computed
on the output's device and read once per step, like the non-finite flags. Operations are aligned by key,
not by position: (step, phase, operation, the user's line as ``file.py:LINE``, module, occurrence of that
key in the step), so a record made on one machine (a CUDA machine, with or without the rehearsal
``--plan``) matches a run on another, where the launch adds or drops an operation (a ``.to()`` that is a
no-op on one device and a copy on the other).

A statistic differs when ``|a - b| > rtol * scale`` (scale: the record's norm times sqrt(n) for the sum,
its norm for the norm, its root mean square for the samples; rtol 1e-4 fp32, 2e-3 fp16, 1e-2 bf16). The first operation
of the run (in the order it ran) whose digest differs, or whose shape or dtype does, is the finding: the
operations before it agreed, so its inputs did.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple

import torch

from .nonfinite import floats
from .settings import rank_path
from .shadow import _DTYPE, _eligible

VERSION = 1


def _short(site: str) -> str:
    path, _, line = site.rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else site


def _first_output(out) -> Optional[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return out if out.layout == torch.strided else None
    if isinstance(out, (tuple, list)):
        for item in out:
            found = _first_output(item)
            if found is not None:
                return found
    return None


def _stats(t: torch.Tensor) -> torch.Tensor:
    n = t.numel()
    flat = t.detach().reshape(-1)
    if not t.is_floating_point():
        flat = flat.to(torch.float64)
    picks = flat[torch.tensor([0, n // 3, (2 * n) // 3, n - 1], device=flat.device)].to(torch.float64)
    wide = torch.float32 if flat.dtype in (torch.float16, torch.bfloat16) else flat.dtype
    return torch.cat([torch.stack([flat.sum(dtype=wide), torch.linalg.vector_norm(flat, dtype=wide)]).to(
        torch.float64), picks])


class Digests:
    def __init__(self, report, settings):
        self.report, self.settings = report, settings
        self.session = None
        self.recording = settings.mode == "record"
        self.pending: List[Tuple[Dict[str, Any], Optional[torch.Tensor], Any]] = []
        self.seen: Dict[tuple, int] = defaultdict(int)
        self.why: Dict[Any, Optional[str]] = {}
        self.bytes = 0
        self.ops = 0
        self.record: Dict[tuple, Dict[str, Any]] = {}
        self.unmatched = 0
        self.rows: Dict[tuple, float] = {}
        if self.recording:
            self.out = open(rank_path(settings.path), "w")
            self._write({"record": VERSION, "torch": torch.__version__})
        else:
            self.out = None
            with open(rank_path(settings.path)) as fh:
                for line in fh:
                    entry = json.loads(line)
                    if "k" in entry:
                        self.record[tuple(entry["k"])] = entry

    def _write(self, entry: Dict[str, Any]) -> None:
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        self.bytes += len(line)
        self.out.write(line)

    def before(self, func, args, kwargs, op):
        return None

    def after(self, func, args, kwargs, out, op, state):
        why = self.why.get(func, 0)
        if why == 0:
            why = self.why[func] = _eligible(func)
        if why is not None and why != "random":
            return
        t = _first_output(out)
        if t is None and func._schema.is_mutable and args:
            t = _first_output(args[0])
        if t is None:
            return
        base = (op.step, op.phase, op.short, _short(op.site), op.module)
        self.seen[base] += 1
        entry = {"k": [*base, self.seen[base]], "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                 "stride": list(t.stride())}
        stats = _stats(t) if t.numel() and t.dtype != torch.complex64 and not t.is_complex() else None
        self.pending.append((entry, stats, op))
        self.report.checked += 1

    def end_step(self, step: int) -> None:
        pending, self.pending = self.pending, []
        self.seen.clear()
        if not pending:
            return
        stats = [s for _, s, _ in pending if s is not None]
        values = iter(torch.stack(stats).tolist() if stats and len({s.device for s in stats}) == 1
                      else [s.tolist() for s in stats])
        for entry, s, op in pending:
            if s is not None:
                entry["v"] = next(values)
            if self.recording:
                self._write(entry)
                self.ops += 1
            else:
                self._compare(entry, op)
        if self.recording:
            self.out.flush()
        elif self.report.finding is not None and self.rows:
            first = self.report.finding["step"]
            if first == step:
                rows = [{"module": m, "phase": p, "error": e} for (m, p), e in self.rows.items()]
                self.report.modules(step, rows, "difference / allowed difference")
                if self.session is not None:
                    self.session.stopped = True
                    self.session.checking = False
        self.rows = {}

    def _compare(self, entry: Dict[str, Any], op) -> None:
        ref = self.record.get(tuple(entry["k"]))
        if ref is None:
            self.unmatched += 1
            return
        metrics: Dict[str, Any] = {}
        score = 0.0
        if ref["shape"] != entry["shape"] or ref["dtype"] != entry["dtype"]:
            metrics = {"differs": f"shape/dtype {entry['shape']} {entry['dtype']}, recorded "
                                  f"{ref['shape']} {ref['dtype']}"}
            score = 1e6
        elif "v" in ref and "v" in entry:
            a, b = entry["v"], ref["v"]
            short = {"float32": "fp32", "float64": "fp64", "bfloat16": "bf16", "float16": "fp16"}.get(entry["dtype"])
            rtol = self.settings.threshold("rtol", op.short, short or "fp32") if short else 0.0
            n = 1
            for size in ref["shape"]:
                n *= size
            rms = b[1] / max(n, 1) ** 0.5 if b[1] == b[1] else float("inf")
            scales = [b[1] * max(n, 1) ** 0.5, b[1]] + [rms] * (len(b) - 2)
            worst = 0.0
            for x, y, sc in zip(a, b, scales):
                if x != x and y != y:
                    continue
                if (x != x) != (y != y) or (abs(x) == float("inf") or abs(y) == float("inf")) and x != y:
                    worst = float("inf")
                    continue
                allowed = rtol * sc if sc > 0 else 0.0
                diff = abs(x - y)
                if diff > allowed:
                    worst = max(worst, diff / allowed if allowed > 0 else float("inf"))
                elif allowed > 0:
                    worst = max(worst, diff / allowed)
            score = worst
            if worst > 1:
                metrics = {"max_rel_err": max(abs(x - y) / max(abs(y), 1e-300) for x, y in zip(a, b)
                                              if x == x and y == y) if a else None,
                           "differs": "statistics (sum, norm, samples)",
                           "recorded_sum": b[0], "sum": a[0]}
        key = (op.module, op.phase)
        self.rows[key] = max(self.rows.get(key, 0.0), min(score, 1e6))
        if score > 1 and self.report.finding is None:
            self.report.found(op, metrics)

    def finish(self) -> None:
        if self.recording and self.out is not None:
            self.out.close()
            per_op = self.bytes / max(self.ops, 1)
            self.report.note(f"recorded {self.ops} operations, {per_op:.0f} bytes per operation",
                             bytes=self.bytes, ops=self.ops)
        elif self.unmatched:
            self.report.note(f"{self.unmatched} operations had no counterpart in the record", count=self.unmatched)
