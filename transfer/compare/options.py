"""TRANSFER_COMPARE's value: which accuracy check runs, on what, with which thresholds (no torch here).

Grammar: ``MODE[:OPTION,OPTION...]``. Modes, cheapest first:

* ``nonfinite``: the first operation whose output holds inf/NaN while its inputs did not;
* ``shadow``: every (sampled) operation recomputed on the CPU from the same inputs, in float64 and in its
  own dtype, and compared;
* ``record:PATH``: per-operation digests of this run written to PATH (``{rank}`` is replaced; without it,
  ranks other than 0 write ``PATH.rank<N>``);
* ``against:PATH``: this run's digests compared with a record.

Options (``key=value``, comma-separated; the first option of record/against may be the PATH alone):

* ``every=N``: check one step in N (steps 0, N, 2N, ...); ``steps=A-B`` (also ``A``, ``A-``): only those
  steps (0-based: the number of optimizer steps taken before); ``modules=P+Q``: only operations inside
  those modules (path prefixes as ``named_modules`` spells them, ``transformer.h.0``); ``ops=gelu+mm``:
  only those aten operations;
* ``exact`` (also ``exact=A-B``, ``exact=none``): which steps every operation is watched in. Elsewhere
  ``nonfinite``, ``record`` and ``against`` run their cheap level (`sentinels.py`: module outputs,
  gradients, the optimizer's results; ``nonfinite`` then names the operation by replaying what made the
  value, `replay.py`). Defaults: ``record`` ``exact=0`` (the first step operation by operation, the others
  per module), ``against`` the steps its record has operation by operation, ``nonfinite`` none;
  ``shadow``, ``modules=`` and ``ops=`` watch every operation of every checked step;
* thresholds, each optionally narrowed to an op and/or a dtype (``KEY[.op][.dtype]=value``, dtypes
  ``fp64 fp32 bf16 fp16``): ``ratio`` (shadow: the target's error from float64 may be at most this many
  times the CPU's own error in the op's dtype; default 2), ``ulp`` (shadow: plus this many units in the
  last place of the output's largest value; default 1 for fp16/bf16, 32 for fp32/fp64), ``cosine``
  (shadow: below it an output diverges; default 0.99), ``rtol`` (against: the relative difference of the
  digests' statistics allowed; default 1e-4 fp32/fp64, 2e-3 fp16, 1e-2 bf16);
* ``report=PATH``: the JSON-lines report (default ``transfer-compare-rank{rank}.jsonl`` in the current
  directory); the picture is written next to it (``.png`` with matplotlib, else ``.txt``).

`parse` raises `TransferError` naming the variable, the value and the fix (`transfer.settings.check_environment` calls it
at install, before anything is patched).
"""

from __future__ import annotations

import os
from typing import Dict, NamedTuple, Optional, Tuple

from ..errors import TransferError

MODES = ("nonfinite", "shadow", "record", "against")
DTYPES = ("fp64", "fp32", "bf16", "fp16")
THRESHOLDS = ("ratio", "ulp", "cosine", "rtol")
DEFAULTS: Dict[Tuple[str, str], float] = {
    ("ratio", ""): 2.0,
    ("ulp", "fp16"): 1.0, ("ulp", "bf16"): 1.0, ("ulp", "fp32"): 32.0, ("ulp", "fp64"): 32.0,
    ("cosine", ""): 0.99,
    ("rtol", "fp64"): 1e-4, ("rtol", "fp32"): 1e-4, ("rtol", "fp16"): 2e-3, ("rtol", "bf16"): 1e-2,
}
VARIABLE = "TRANSFER_COMPARE"
FIX = ("use nonfinite, shadow, record:FILE or against:FILE, optionally followed by :every=N,steps=A-B,exact,"
       "modules=a.b+c,ops=gelu+mm,report=FILE (docs/accuracy.md), or unset it")


class Settings(NamedTuple):
    mode: str
    path: Optional[str] = None  # record/against
    every: int = 1
    first_step: int = 0
    last_step: Optional[int] = None
    modules: Tuple[str, ...] = ()
    ops: Tuple[str, ...] = ()
    thresholds: Tuple[Tuple[str, str, str, float], ...] = ()  # (key, op, dtype, value) given by the user
    report: str = "transfer-compare-rank{rank}.jsonl"
    exact: Optional[str] = None  # steps watched operation by operation: None (the mode's default), "all",
    # "none" or a range "A", "A-B", "A-" (`exact_steps`)

    def threshold(self, key: str, op: str, dtype: str) -> float:
        """The most specific value of `key` for `op` (``gelu``) and `dtype` (``bf16``)."""
        best, rank = None, -1
        for k, o, d, value in self.thresholds:
            if k == key and o in ("", op) and d in ("", dtype):
                score = (2 if o else 0) + (1 if d else 0)
                if score > rank:
                    best, rank = value, score
        if best is not None:
            return best
        return DEFAULTS.get((key, dtype), DEFAULTS.get((key, ""), 0.0))

    def exact_steps(self) -> Optional[str]:
        """The steps every operation is watched in: "all", "none" or a range (the mode's default applied;
        ``against`` without ``exact``: None, the record decides)."""
        if self.mode == "shadow" or self.modules or self.ops:
            return "all"
        if self.exact is not None:
            return self.exact
        return {"record": "0", "nonfinite": "none"}.get(self.mode)

    def step_checked(self, step: int) -> bool:
        if step < self.first_step or (self.last_step is not None and step > self.last_step):
            return False
        return (step - self.first_step) % self.every == 0


def _fail(value: str, why: str) -> TransferError:
    return TransferError(f"{VARIABLE}={value!r}: {why}; {FIX}")


def parse(value: str) -> Settings:
    """`Settings` of a TRANSFER_COMPARE value (module docstring); `TransferError` for a bad one."""
    text = value.strip()
    mode, _, rest = text.partition(":")
    mode = mode.strip().lower()
    if mode not in MODES:
        raise _fail(value, f"{mode!r} is not a mode (nonfinite, shadow, record, against)")
    fields: Dict[str, object] = {"mode": mode}
    thresholds = []
    options = [o.strip() for o in rest.split(",")] if rest.strip() else []
    if mode in ("record", "against"):
        if not options or "=" in options[0] and not options[0].startswith(("file=", "path=")):
            raise _fail(value, f"{mode} needs a file: {mode}:PATH")
        fields["path"] = options.pop(0).split("=", 1)[-1] if options[0].startswith(("file=", "path=")) \
            else options.pop(0)
        if not fields["path"]:
            raise _fail(value, f"{mode} needs a file: {mode}:PATH")
    for option in options:
        if not option:
            continue
        key, sep, val = option.partition("=")
        key, val = key.strip().lower(), val.strip()
        if key == "exact" and not sep:
            sep, val = "=", "all"
        if not sep or not val:
            raise _fail(value, f"option {option!r} has no value (key=value)")
        if key == "every":
            if not val.isdigit() or int(val) < 1:
                raise _fail(value, f"every={val!r} is not a whole number from 1")
            fields["every"] = int(val)
        elif key == "steps":
            steps = step_range(val)
            if steps is None:
                raise _fail(value, f"steps={val!r} is not a step range (A, A-B or A-, from 0)")
            fields["first_step"], fields["last_step"] = steps
        elif key == "exact":
            if val not in ("all", "none") and step_range(val) is None:
                raise _fail(value, f"exact={val!r} is not all, none or a step range (A, A-B or A-, from 0)")
            fields["exact"] = val
        elif key in ("modules", "ops"):
            names = tuple(n.strip() for n in val.split("+") if n.strip())
            if key == "ops":
                names = tuple(n.split("::")[-1] for n in names)
            fields[key] = names
        elif key == "report":
            fields["report"] = val
        elif key.split(".")[0] in THRESHOLDS:
            parts = key.split(".")
            name, op, dtype = parts[0], "", ""
            for part in parts[1:]:
                if part in DTYPES:
                    dtype = part
                elif part and not op:
                    op = part
                else:
                    raise _fail(value, f"threshold {key!r}: KEY[.op][.dtype] with a dtype of {', '.join(DTYPES)}")
            try:
                number = float(val)
            except ValueError:
                raise _fail(value, f"{key}={val!r} is not a number") from None
            if number < 0 or (name == "cosine" and number > 1):
                raise _fail(value, f"{key}={val!r} is out of range")
            thresholds.append((name, op, dtype, number))
        else:
            raise _fail(value, f"unknown option {key!r} (every, steps, exact, modules, ops, report, "
                        f"{', '.join(THRESHOLDS)})")
    fields["thresholds"] = tuple(thresholds)
    settings = Settings(**fields)
    if settings.mode == "against" and not os.path.isfile(rank_path(settings.path)):
        raise _fail(value, f"the record {rank_path(settings.path)} does not exist (write it first with "
                    f"record:{settings.path})")
    if settings.mode == "record":
        folder = os.path.dirname(os.path.abspath(rank_path(settings.path)))
        if not os.path.isdir(folder):
            raise _fail(value, f"the folder {folder} of the record does not exist")
    folder = os.path.dirname(os.path.abspath(rank_path(settings.report)))
    if not os.path.isdir(folder):
        raise _fail(value, f"the folder {folder} of the report does not exist")
    return settings


def step_range(text: str) -> Optional[Tuple[int, Optional[int]]]:
    """``A``, ``A-B`` or ``A-`` as (first, last or None); None when it is not one."""
    first, dash, last = text.partition("-")
    if not first.isdigit() or (last and not last.isdigit()) or (last and int(last) < int(first)):
        return None
    return int(first), ((int(last) if last else None) if dash else int(first))


def in_steps(spec: Optional[str], step: int) -> bool:
    """Whether `step` is among the steps `spec` names ("all", "none", a `step_range`; None: none)."""
    if spec is None or spec == "none":
        return False
    if spec == "all":
        return True
    first, last = step_range(spec)
    return step >= first and (last is None or step <= last)


def rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def rank_path(path: str) -> str:
    """`path` for this process's rank: ``{rank}`` replaced; without it, ranks above 0 add ``.rank<N>``."""
    if "{rank}" in path:
        return path.replace("{rank}", str(rank()))
    return path if rank() == 0 else f"{path}.rank{rank()}"
