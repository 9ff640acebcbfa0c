"""The accuracy mode driven in one process: a CUDA training script run many times (test machinery).

``driver.py SCRIPT OUT_DIR JOB [JOB ...] -- [SCRIPT ARGS]`` with TRANSFER_DEVICE set (cpu, npu, sdaa,
gcu) and TRANSFER_COMPARE unset. Not a user script: it drives `transfer.compare` and the stand-ins'
fault injection (`_sim_accel._fault`) in process, so that dozens of runs cost one start-up.

JOB is ``MODE[!python][@FAULT][#ARGS]``: MODE a TRANSFER_COMPARE value (``off``: no mode; ``!python``: the
Python watch even where the C one is built, transfer/compare/watch.py), FAULT in
``SIM_ACCEL_FAULT`` syntax (stand-ins only), ARGS extra script arguments separated by ``;``. Each job's
report is ``OUT_DIR/<i>.jsonl``. The special JOB ``oracle`` runs the script under a plain logging
dispatch mode with torch's anomaly mode on, and records for each (aten operation, phase) its first call
on the target's device (the one a stand-in's faulty kernel makes; calls on CPU tensors, such as tables
computed before the model moves, run the CPU's kernel) and the line of SCRIPT that made it: the innermost frame of SCRIPT on the stack (forward), or in the
traceback torch's anomaly mode stored in the autograd node being run (backward): torch's own account,
independent of the mode.

The first picture of the first divergent step is drawn as the mode draws it (a PNG where matplotlib is
installed), the later ones as text tables: drawing a PNG costs about a second.

Prints one JSON line: {"oracle": {"op|phase": "file:line"}, "jobs": [[job, losses, report lines]],
"seconds": [CPU seconds per JOB]}; the losses are what the script printed (its JSON line's "losses").
"""

import io
import json
import os
import runpy
import sys
import time
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

script, out_dir, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
cut = rest.index("--") if "--" in rest else len(rest)
jobs, script_args = rest[:cut], rest[cut + 1:]
script_path = os.path.abspath(script)

import transfer  # noqa: E402  (test machinery: drives the mode in process)
from transfer import compare  # noqa: E402

transfer.install()
_sim = sys.modules.get("_sim_accel._fault")
DEVICE = os.environ["TRANSFER_DEVICE"]


def run_script(extra=()):
    """Run SCRIPT; return its losses (its JSON line)."""
    saved, saved_out = sys.argv, sys.stdout
    sys.argv = [script_path, *script_args, *extra]
    sys.stdout = captured = io.StringIO()
    try:
        runpy.run_path(script_path, run_name="__main__")
    finally:
        sys.argv, sys.stdout = saved, saved_out
    lines = [line for line in captured.getvalue().splitlines() if line.startswith("{")]
    return json.loads(lines[-1]).get("losses") if lines else None


class Oracle(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.first = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        node = torch._C._current_autograd_node()
        phase = "forward" if node is None else "backward"
        key = f"{name}|{phase}"
        out = func(*args, **(kwargs or {}))
        if key not in self.first and _on_device((args, kwargs, out)):
            if node is None:
                frames = traceback.extract_stack()
            else:
                stored = node.metadata.get("traceback_") or []
                frames = [_parse(line) for line in (stored if isinstance(stored, list) else [])]
            lines = [f for f in frames if f and f[0] == script_path]
            self.first[key] = f"{os.path.basename(script_path)}:{lines[-1][1]}" if lines else None
        return out


def _on_device(value):
    if isinstance(value, torch.Tensor):
        return value.device.type == DEVICE
    if isinstance(value, (list, tuple)):
        return any(_on_device(v) for v in value)
    if isinstance(value, dict):
        return any(_on_device(v) for v in value.values())
    return False


def _parse(entry):
    """One frame of the anomaly traceback (a formatted stack entry) as (file, line)."""
    if isinstance(entry, str) and entry.strip().startswith("File "):
        head = entry.strip().split("\n")[0]
        file_part, _, rest = head.partition(", line ")
        return file_part[len('File "'):-1], int(rest.split(",")[0])
    return None


results = {"oracle": None, "jobs": [], "seconds": []}
for i, job in enumerate(jobs):
    began = time.process_time()
    if job == "oracle":
        oracle = Oracle()
        with torch.autograd.detect_anomaly(check_nan=False), oracle:
            run_script()
        results["oracle"] = oracle.first
        results["seconds"].append(round(time.process_time() - began, 2))
        continue
    job_mode, _, extra = job.partition("#")
    job_mode, _, fault = job_mode.partition("@")
    job_mode, _, twin = job_mode.partition("!")
    extra = [a for a in extra.split(";") if a]
    if fault:
        _sim.apply(fault)
    report = os.path.join(out_dir, f"{i}.jsonl")
    try:
        if job_mode != "off":
            sep = "," if ":" in job_mode else ":"
            compare.start(compare.parse(f"{job_mode}{sep}report={report}"), os.environ["TRANSFER_DEVICE"],
                          python=twin == "python")
        try:
            losses = run_script(extra)
        finally:
            compare.stop()
    finally:
        if fault:
            _sim.apply(None)
    lines = []
    if job_mode != "off":
        with open(report) as fh:
            lines = [json.loads(line) for line in fh]
    if os.path.exists(os.path.join(out_dir, f"{i}.png")):
        sys.modules["matplotlib"] = None  # one PNG drawn: the later pictures are text tables (seconds each)
    results["jobs"].append([job, losses, lines])
    results["seconds"].append(round(time.process_time() - began, 2))  # CPU seconds per job (the test's cost)
print(json.dumps(results))
