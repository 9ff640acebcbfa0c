"""Two-run diff: per-operation digests recorded in one run (``record:FILE``) and compared in another
(``against:FILE``).

A digest is the operation's first output's shape, dtype and stride, two statistics and four sampled values
(flat positions 0, n/3, 2n/3, n-1): one JSON line of about 250 bytes per operation, never a whole tensor.
Floating outputs: sum and L2 norm, accumulated in the output's dtype (float32 for fp16/bf16) on a device,
in float64 in host memory; integer and boolean outputs: sum and sum of squares in int64 arithmetic and the
samples, exact integers compared exactly (so a record made in host memory and a run on a device that has
no float64, such as an Ascend, agree: nothing is computed in float64 on a device). The statistics are
computed on the output's device and read once per step, like the non-finite flags; an output in host
memory (the cpu target) is read at once, where it lies (the C watch, `watch.py`; the Python one asks
torch). Operations are aligned by key, not by position: (step, phase, operation, the user's line as
``file.py:LINE``, module, occurrence of that key in the step), so a record made on one machine (a CUDA
machine, with or without the rehearsal ``--plan``) matches a run on another, where the launch adds or
drops an operation (a ``.to()`` that is a no-op on one device and a copy on the other).

Two levels (`options.Settings.exact_steps`): in the steps watched operation by operation (``record``: the
first, ``exact=0``) every operation has its digest; in the others the cheap level's points have theirs
(`sentinels.py`: each module call's first output, keyed ``<Linear>`` by the module's class; each gradient
after a backward pass, ``<grad>``; each parameter after the optimizer's step, ``<param>``, keyed by the
parameter's name) and the operations outside every module theirs. ``against`` watches operation by
operation the steps its record holds so (the record's first line says which), so a divergence there is
named by its operation, elsewhere by the module call, gradient or parameter it first shows in.

A statistic differs when ``|a - b| > rtol * scale`` (scale: the record's norm times sqrt(n) for the sum,
its norm for the norm, its root mean square for the samples; rtol 1e-4 fp32, 2e-3 fp16, 1e-2 bf16); an
integer digest differs when any of its numbers does. The first operation (or point) of the run, in the
order it ran, whose digest differs, or whose shape or dtype does, is the finding: the ones before it
agreed, so its inputs did.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..errors import TransferError
from .options import rank_path
from .session import Op
from .shadow import _eligible
from .watch import FAST_DIGEST, SKIP

VERSION = 2  # 2: integer digests exact (sum and sum of squares); points of the cheap level


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


def _picks(n: int, device) -> torch.Tensor:
    where = _PICKS.get((n, device))
    if where is None:
        if len(_PICKS) > 4096:
            _PICKS.clear()
        where = _PICKS[(n, device)] = torch.tensor([0, n // 3, (2 * n) // 3, n - 1], device=device)
    return where


def _stats(t: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The digest's statistics of `t`, on its device, unread: floating, sum and norm (float32 at least,
    never float64 unless `t` is) and the four sampled values (`torch.take`: flat positions without a copy
    of a strided tensor); integer, sum and sum of squares in int64 and the samples. Three or four
    operations; they are gathered and read once per step (`Digests.end_step`)."""
    t = t.detach()
    where = _picks(t.numel(), t.device)
    if not t.is_floating_point():
        t = t.to(torch.int64)
        return t.sum(), (t * t).sum(), torch.take(t, where)
    wide = torch.float32 if t.dtype in _LOW else t.dtype
    return t.sum(dtype=wide), torch.linalg.vector_norm(t, dtype=wide), torch.take(t, where)


def values_now(t: torch.Tensor) -> Optional[List[Any]]:
    """The digest's values of host tensor `t`, read now: floating [sum, norm, 4 samples] in float64,
    integer and boolean [sum, sum of squares, 4 samples] exact (None: no values: empty or complex)."""
    if not t.numel() or t.is_complex():
        return None
    t = t.detach()
    n = t.numel()
    if not t.is_floating_point():
        t = t.to(torch.int64)
        picks = torch.take(t, torch.tensor([0, n // 3, (2 * n) // 3, n - 1]))
        return [int(t.sum()), int((t * t).sum()), *picks.tolist()]
    t = t.to(torch.float64)
    picks = torch.take(t, torch.tensor([0, n // 3, (2 * n) // 3, n - 1]))
    return [t.sum().item(), torch.linalg.vector_norm(t).item(), *picks.tolist()]


def _read(stats: List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> List[List[Any]]:
    """Each op's six values: one stack and one read per dtype and device, converted in host memory
    (floating to float64 there, integers kept exact)."""
    groups: Dict[tuple, List[int]] = defaultdict(list)
    for i, (total, _, picks) in enumerate(stats):
        groups[(total.dtype, picks.dtype, picks.device)].append(i)
    values: List[List[Any]] = [[] for _ in stats]
    for members in groups.values():
        totals = torch.stack([torch.stack([stats[i][0], stats[i][1]]) for i in members]).cpu()
        picks = torch.stack([stats[i][2] for i in members]).cpu()
        if totals.is_floating_point():
            totals, picks = totals.to(torch.float64), picks.to(torch.float64)
        for i, row in zip(members, torch.cat([totals, picks], dim=1).tolist()):
            values[i] = row
    return values


_KEYS: Dict[tuple, str] = {}  # (phase, short, site, module) -> its JSON text


def _number(x) -> str:
    """`x` as `json.dumps` writes it (NaN, Infinity, -Infinity included)."""
    text = repr(x)
    if text[-1] in "0123456789":  # a finite float or an int
        return text
    return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(text, json.dumps(x))


_LAYOUTS: Dict[tuple, str] = {}  # (shape, dtype, stride) -> its JSON text


def _line(base, count, shape, dtype, stride, values) -> str:
    """One record line, the text `json.dumps(entry, separators=(",", ":"))` makes of it, written without it
    (a record writes every point of every step: json's per-call cost showed in the step's time)."""
    key = _KEYS.get(base[1:])
    if key is None:
        if len(_KEYS) > 65536:
            _KEYS.clear()
        key = _KEYS[base[1:]] = json.dumps(list(base[1:]), separators=(",", ":"))[1:-1]
    layout = _LAYOUTS.get((shape, dtype, stride))
    if layout is None:
        if len(_LAYOUTS) > 65536:
            _LAYOUTS.clear()
        layout = _LAYOUTS[(shape, dtype, stride)] = \
            f'"shape":[{",".join(map(str, shape))}],"dtype":"{dtype}","stride":[{",".join(map(str, stride))}]'
    if values is None:
        return f'{{"k":[{base[0]},{key},{count}],{layout}}}\n'
    numbers = repr(values if type(values) is list else list(values)).replace(" ", "")  # json's text, but NaN, inf
    if "n" in numbers:
        numbers = f'[{",".join(map(_number, values))}]'
    return f'{{"k":[{base[0]},{key},{count}],{layout},"v":{numbers}}}\n'


class Digests:
    """Per-operation digests. `pending` (also the C watch's sink) holds, per operation of the step,
    (index, aten name, short name, phase, site, module, shape, dtype, stride, values): values a list
    (read at once), the three statistics tensors on a device (read at the step's end), or None."""

    fast = FAST_DIGEST  # the C watch takes the digests of host outputs itself
    replays = False  # a point that differs is the finding (the record holds nothing finer for that step)

    def __init__(self, report, settings):
        self.report, self.settings = report, settings
        self.session = None
        self.recording = settings.mode == "record"
        self.exact = settings.exact_steps()  # against: None until the record says
        self.pending: List[tuple] = []
        self.seen: Dict[tuple, int] = defaultdict(int)
        self.why: Dict[Any, Optional[str]] = {}
        self.sites: Dict[str, str] = {}  # the user's line -> file.py:LINE
        self.bytes = 0
        self.ops = 0
        self.record: Dict[tuple, Dict[str, Any]] = {}
        self.unmatched = 0
        self.rtols: Dict[tuple, float] = {}  # (op, dtype) -> rtol
        if self.recording:
            self.out = open(rank_path(settings.path), "w")
            self._write({"record": VERSION, "torch": torch.__version__, "exact": self.exact})
        else:
            self.out = None
            path = rank_path(settings.path)
            with open(path) as fh:
                for line in fh:
                    entry = json.loads(line)
                    if "k" in entry:
                        self.record[tuple(entry["k"])] = entry
                    elif "record" in entry:
                        if entry["record"] != VERSION:
                            raise TransferError(
                                f"TRANSFER_COMPARE=against:{settings.path}: {path} is a record of format "
                                f"{entry['record']} (an older transfer); this one reads format {VERSION}: record "
                                f"it again with record:{settings.path} (docs/accuracy.md)")
                        if self.exact is None:
                            self.exact = entry.get("exact") or "none"

    def _write(self, entry: Dict[str, Any]) -> None:
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        self.bytes += len(line)
        self.out.write(line)

    def classify(self, func, name: str) -> int:
        """The watch's flags for an operation (`watch.py`)."""
        why = _eligible(func)
        return 0 if why is None or why == "random" else SKIP

    def before(self, func, args, kwargs, op):
        return None

    def look(self, point, tensors, index: int) -> None:
        """The cheap level's point (`sentinels.Point`): the digest of its first tensor."""
        t = tensors[0] if type(tensors) is list and tensors and type(tensors[0]) is torch.Tensor else \
            _first_output(tensors)
        if t is None or t.layout != torch.strided:
            return
        if t.is_cpu:
            values = self.session.mode.digest(t) if t.numel() else None
            if values is None:
                values = values_now(t)
        else:
            values = _stats(t) if t.numel() and not t.is_complex() else None
        self.pending.append((index, point.name, point.short, point.phase, point.site, point.module, t.shape, t.dtype,
                             t.stride(), values))
        self.report.checked += 1

    def settle(self) -> list:
        return []  # compared at the step's end

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
        if t.is_cpu:
            values = values_now(t)
        else:
            values = _stats(t) if t.numel() and not t.is_complex() else None
        self.pending.append((op.index, op.name, op.short, op.phase, op.site, op.module, t.shape, t.dtype,
                             t.stride(), values))
        self.report.checked += 1

    def end_step(self, step: int) -> None:
        pending = self.pending[:]
        self.pending.clear()  # the same list: the C watch's sink
        self.seen.clear()
        if not pending:
            return
        values = iter(_read([p[9] for p in pending if isinstance(p[9], tuple)]))
        matched = []
        lines: List[str] = []
        sites, seen, names = self.sites, self.seen, _DTYPE_NAMES
        for index, name, short, phase, site, module, shape, dtype, stride, v in pending:
            if isinstance(v, tuple):
                v = next(values)
            short_site = sites.get(site)
            if short_site is None:
                short_site = sites[site] = _short(site)
            base = (step, phase, short, short_site, module)
            seen[base] += 1
            if self.recording:
                lines.append(_line(base, seen[base], shape, names[dtype], stride, v))
                continue
            entry = {"k": [*base, seen[base]], "shape": list(shape), "dtype": names[dtype], "stride": list(stride)}
            if v is not None:
                entry["v"] = v
            ref = self.record.get(tuple(entry["k"]))
            if ref is None:
                self.unmatched += 1
            else:
                matched.append((entry, ref, (index, step, name, short, phase, module, site)))
        if matched:
            self._compare(matched, step)
        if self.recording:
            text = "".join(lines)
            self.bytes += len(text)
            self.ops += len(lines)
            self.out.write(text)
            self.out.flush()

    def _compare(self, matched, step: int) -> None:
        """Each (entry, recorded entry, the op's fields) of a step: its score (largest difference / allowed), in
        one go; the first over 1 is the finding (the step's scores per module drawn with it)."""
        names = {"float32": "fp32", "float64": "fp64", "bfloat16": "bf16", "float16": "fp16"}
        scores = [0.0] * len(matched)
        rows, a, b, sizes, rtols = [], [], [], [], []
        tolerance: Dict[int, float] = {}
        for i, (entry, ref, op) in enumerate(matched):
            if ref["shape"] != entry["shape"] or ref["dtype"] != entry["dtype"]:
                scores[i] = 1e6
            elif "v" in ref and "v" in entry and len(ref["v"]) == len(entry["v"]) == 6:
                short = names.get(entry["dtype"])
                if short is None:  # integer or boolean: exact
                    scores[i] = 0.0 if ref["v"] == entry["v"] else 1e6
                    continue
                rows.append(i)
                a.append(entry["v"])
                b.append(ref["v"])
                n = 1
                for size in ref["shape"]:
                    n *= size
                sizes.append(max(n, 1))
                rtol = self.rtols.get((op[3], short))
                if rtol is None:
                    rtol = self.rtols[(op[3], short)] = self.settings.threshold("rtol", op[3], short)
                rtols.append(rtol)
                tolerance[id(entry)] = rtol
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
        if self.report.finding is not None:
            return
        first = next((i for i, score in enumerate(scores) if score > 1), None)
        if first is None:
            return
        entry, ref, op = matched[first]
        score = scores[first]
        if ref["shape"] != entry["shape"] or ref["dtype"] != entry["dtype"]:
            metrics = {"differs": f"shape/dtype {entry['shape']} {entry['dtype']}, recorded "
                                  f"{ref['shape']} {ref['dtype']}"}
        else:
            x, y = entry.get("v") or [0.0] * 2, ref.get("v") or [0.0] * 2
            metrics = {"differs": "statistics (sum, norm, samples)", "sum": x[0], "recorded_sum": y[0],
                       "norm": x[1], "recorded_norm": y[1], "max_rel_err": score * tolerance.get(id(entry), 0.0)}
        self.report.found(Op(*op), metrics)
        modules: Dict[tuple, float] = {}
        for (_, _, fields), score in zip(matched, scores):
            key = (fields[5], fields[4])  # (module, phase)
            modules[key] = max(modules.get(key, 0.0), min(score, 1e6))
        self.report.modules(step, [{"module": m, "phase": p, "error": e} for (m, p), e in modules.items()],
                            "difference / allowed difference")
        if self.session is not None:
            self.session.halt()

    def finish(self) -> None:
        if self.recording and self.out is not None:
            self.out.close()
            per_op = self.bytes / max(self.ops, 1)
            self.report.note(f"recorded {self.ops} operations, {per_op:.0f} bytes per operation",
                             bytes=self.bytes, ops=self.ops)
        elif self.unmatched:
            self.report.note(f"{self.unmatched} operations had no counterpart in the record", count=self.unmatched)
