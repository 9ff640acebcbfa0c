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
from .options import rank_path
from .shadow import _DTYPE, _eligible

VERSION = 1


class _Names(dict):
    def __missing__(self, dtype):
        name = self[dtype] = str(dtype).replace("torch.", "")
        return name


_DTYPE_NAMES = _Names()


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


_PICKS: Dict[tuple, torch.Tensor] = {}  # (numel, device) -> the sampled positions, made once
_LOW = (torch.float16, torch.bfloat16)


def _stats(t: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The digest's statistics of `t`, on its device, unread: sum, norm (float32 at least) and the four
    sampled values (`torch.take`: flat positions without a copy of a strided tensor). Three operations;
    they are gathered and read once per step (`Digests.end_step`)."""
    t = t.detach()
    if not t.is_floating_point():
        t = t.to(torch.float64)
    n = t.numel()
    where = _PICKS.get((n, t.device))
    if where is None:
        if len(_PICKS) > 4096:
            _PICKS.clear()
        where = _PICKS[(n, t.device)] = torch.tensor([0, n // 3, (2 * n) // 3, n - 1], device=t.device)
    wide = torch.float32 if t.dtype in _LOW else t.dtype
    return t.sum(dtype=wide), torch.linalg.vector_norm(t, dtype=wide), torch.take(t, where)


def _read(stats: List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> List[List[float]]:
    """Each op's [sum, norm, 4 samples] as floats: one stack and one read per dtype and device."""
    groups: Dict[tuple, List[int]] = defaultdict(list)
    for i, (total, _, picks) in enumerate(stats):
        groups[(total.dtype, picks.dtype, picks.device)].append(i)
    values: List[List[float]] = [[] for _ in stats]
    for members in groups.values():
        totals = torch.stack([torch.stack([stats[i][0], stats[i][1]]) for i in members]).to(torch.float64)
        picks = torch.stack([stats[i][2] for i in members]).to(torch.float64)
        for i, row in zip(members, torch.cat([totals, picks], dim=1).tolist()):
            values[i] = row
    return values


class Digests:
    def __init__(self, report, settings):
        self.report, self.settings = report, settings
        self.session = None
        self.recording = settings.mode == "record"
        self.pending: List[Tuple[Dict[str, Any], Optional[torch.Tensor], Any]] = []
        self.seen: Dict[tuple, int] = defaultdict(int)
        self.why: Dict[Any, Optional[str]] = {}
        self.sites: Dict[str, str] = {}  # the user's line -> file.py:LINE
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
        site = self.sites.get(op.site)
        if site is None:
            site = self.sites[op.site] = _short(op.site)
        base = (op.step, op.phase, op.short, site, op.module)
        self.seen[base] += 1
        entry = {"k": [*base, self.seen[base]], "shape": list(t.shape), "dtype": _DTYPE_NAMES[t.dtype],
                 "stride": list(t.stride())}
        stats = _stats(t) if t.numel() and t.dtype != torch.complex64 and not t.is_complex() else None
        self.pending.append((entry, stats, op))
        self.report.checked += 1

    def end_step(self, step: int) -> None:
        pending, self.pending = self.pending, []
        self.seen.clear()
        if not pending:
            return
        values = iter(_read([s for _, s, _ in pending if s is not None]))
        matched = []
        for entry, s, op in pending:
            if s is not None:
                entry["v"] = next(values)
            if self.recording:
                self._write(entry)
                self.ops += 1
            else:
                ref = self.record.get(tuple(entry["k"]))
                if ref is None:
                    self.unmatched += 1
                else:
                    matched.append((entry, ref, op))
        if matched:
            self._compare(matched)
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

    def _compare(self, matched) -> None:
        """Each (entry, recorded entry, op) of a step: its score (largest difference / allowed), in one go."""
        names = {"float32": "fp32", "float64": "fp64", "bfloat16": "bf16", "float16": "fp16"}
        scores = [0.0] * len(matched)
        rows, a, b, sizes, rtols = [], [], [], [], []
        tolerance: Dict[int, float] = {}
        for i, (entry, ref, op) in enumerate(matched):
            if ref["shape"] != entry["shape"] or ref["dtype"] != entry["dtype"]:
                scores[i] = 1e6
            elif "v" in ref and "v" in entry and len(ref["v"]) == len(entry["v"]) == 6:
                short = names.get(entry["dtype"])
                rows.append(i)
                a.append(entry["v"])
                b.append(ref["v"])
                n = 1
                for size in ref["shape"]:
                    n *= size
                sizes.append(max(n, 1))
                rtols.append(self.settings.threshold("rtol", op.short, short) if short else 0.0)
                tolerance[id(entry)] = rtols[-1]
        if rows:
            A = torch.tensor(a, dtype=torch.float64)
            B = torch.tensor(b, dtype=torch.float64)
            root = torch.tensor(sizes, dtype=torch.float64).sqrt()
            norm = B[:, 1]
            scale = torch.stack([norm * root, norm] + [norm / root] * 4, dim=1)
            allowed = torch.tensor(rtols, dtype=torch.float64)[:, None] * scale
            both_nan = A.isnan() & B.isnan()
            diff = torch.where(both_nan | (A == B), torch.zeros_like(A), (A - B).abs())
            diff = torch.where(diff.isnan(), torch.full_like(diff, float("inf")), diff)
            ratio = torch.where(diff == 0, torch.zeros_like(diff), diff / allowed)
            ratio = torch.where(ratio.isnan(), torch.full_like(ratio, float("inf")), ratio)
            for i, score in zip(rows, ratio.amax(dim=1).tolist()):
                scores[i] = score
        for (entry, ref, op), score in zip(matched, scores):
            key = (op.module, op.phase)
            self.rows[key] = max(self.rows.get(key, 0.0), min(score, 1e6))
            if score > 1 and self.report.finding is None:
                if ref["shape"] != entry["shape"] or ref["dtype"] != entry["dtype"]:
                    metrics = {"differs": f"shape/dtype {entry['shape']} {entry['dtype']}, recorded "
                                          f"{ref['shape']} {ref['dtype']}"}
                else:
                    x, y = entry.get("v") or [0.0] * 2, ref.get("v") or [0.0] * 2
                    metrics = {"differs": "statistics (sum, norm, samples)", "sum": x[0], "recorded_sum": y[0],
                               "norm": x[1], "recorded_norm": y[1], "max_rel_err": score * tolerance.get(id(entry), 0.0)}
                self.report.found(op, metrics)

    def finish(self) -> None:
        if self.recording and self.out is not None:
            self.out.close()
            per_op = self.bytes / max(self.ops, 1)
            self.report.note(f"recorded {self.ops} operations, {per_op:.0f} bytes per operation",
                             bytes=self.bytes, ops=self.ops)
        elif self.unmatched:
            self.report.note(f"{self.unmatched} operations had no counterpart in the record", count=self.unmatched)
