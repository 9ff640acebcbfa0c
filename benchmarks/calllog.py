"""TRANSFER_LOG's cost on a training step: the log on vs off, side by side in one process.

``python -m benchmarks.calllog [--target cpu] [--repeats N] [--quick]`` prints one
line; the suite (``python -m benchmarks``, family "calllog") runs the same
child with ``--json`` and reports it per target.

A small MLP trained with CUDA spellings (``x.cuda()``, ``device='cuda'``, an
``is_cuda`` check, ``torch.cuda.synchronize()``). Blocks of steps rotate
through three arms: transfer installed with TRANSFER_LOG set ("on"), with it
unset ("off"), and unset again (an A/A "control" showing the noise floor);
every arm takes every position in turn, and install/uninstall happen outside
the timed region. Ratio = per-step time on / off, per repeat; the median and
q1-q3 are reported with the control's. The issue's bar: at most 5% slower.
Time is the process's CPU time (`time.process_time`, every thread: vendor
autograd runs on a device thread): on a shared machine wall time wanders with
other processes by more than the effect measured.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Dict

if __package__ in (None, ""):  # python benchmarks/calllog.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    __package__ = "benchmarks"

from benchmarks import _common as C  # noqa: E402

TARGET = 1.05  # the bar: a training step slows by at most 5% with the log on
FULL = {"repeats": 21, "block_s": 0.1, "min_steps": 5, "max_steps": 400, "warmup": 3}
QUICK = {"repeats": 3, "block_s": 0.01, "min_steps": 2, "max_steps": 10, "warmup": 1}
ARMS = ("on", "off", "control")


def _step_block(torch, model, opt, data, steps):
    """`steps` training steps written as a CUDA user writes them; seconds per step."""
    start = time.process_time()
    for _ in range(steps):
        x = data.cuda(non_blocking=True)
        if not x.is_cuda:
            raise RuntimeError("the batch did not reach the device")
        y = torch.zeros(x.shape[0], dtype=torch.long, device="cuda")
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
    return (time.process_time() - start) / steps


def child(target: str, quick: bool, repeats: int = 0) -> Dict[str, Any]:
    unavailable = C.enter_child(target)
    if unavailable:
        return unavailable
    import torch

    import transfer

    cfg = dict(QUICK if quick else FULL)
    if repeats:
        cfg["repeats"] = repeats
    os.environ["TRANSFER_QUIET"] = "1"
    logdir = tempfile.mkdtemp(prefix="transfer-log-bench-")
    data = torch.randn(64, 256)

    def arm(name: str, steps: int) -> float:
        os.environ.pop("TRANSFER_LOG", None)
        if name == "on":
            os.environ["TRANSFER_LOG"] = logdir
        transfer.uninstall()
        transfer.install(target)
        try:
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            _step_block(torch, model, opt, data, cfg["warmup"])
            return _step_block(torch, model, opt, data, steps)
        finally:
            transfer.uninstall()
            os.environ.pop("TRANSFER_LOG", None)

    return _rotate(arm, ARMS, "on", "off", cfg, quick, logdir,
                   workload="MLP 256-512-10, batch 64, SGD, CUDA spellings incl. one is_cuda read per step")


PLAN_ARMS = ("plan", "native", "control")


def _native_block(torch, model, opt, data, steps):
    """`steps` steps of a native job whose calls pass the rehearsal's layers (transfer/plan.py) by their fast
    paths, as a CUDA job's do once each site is logged: torch.cuda.is_available() every step, .to() with a dtype,
    factories without a device. Seconds per step (process CPU time)."""
    start = time.process_time()
    for _ in range(steps):
        if torch.cuda.is_available():  # False here; one observed torch.cuda call per step either way
            raise RuntimeError("this measurement is for a machine without CUDA")
        x = data.to(torch.float32)
        y = torch.zeros(x.shape[0], dtype=torch.long)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return (time.process_time() - start) / steps


def child_plan(quick: bool, repeats: int = 0) -> Dict[str, Any]:
    """The rehearsal's cost on a native job (what `transfer-run --plan npu` adds on real CUDA): observe() on
    vs off, A/A control; no shim installed."""
    bad = C.enter_child("cpu")
    if bad:
        return bad
    import torch

    from transfer import plan

    cfg = dict(QUICK if quick else FULL)
    if repeats:
        cfg["repeats"] = repeats
    logdir = tempfile.mkdtemp(prefix="transfer-plan-bench-")
    data = torch.randn(64, 256)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def arm(name: str, steps: int) -> float:
        ctx = plan.observe(logdir, "npu") if name == "plan" else None
        try:
            _native_block(torch, model, opt, data, cfg["warmup"])
            return _native_block(torch, model, opt, data, steps)
        finally:
            if ctx is not None:
                ctx.registry.revert_all()

    return _rotate(arm, PLAN_ARMS, "plan", "native", cfg, quick, logdir,
                   workload="native MLP 256-512-10 step, batch 64, SGD, one torch.cuda call per step; "
                            "transfer.plan.observe on vs off, no shim")


def _rotate(arm, arms, on: str, off: str, cfg: Dict[str, Any], quick: bool, logdir: str, workload: str):
    """Blocks of steps of each arm in `arms`, the order rotating every repeat; the record of `on` / `off`
    per repeat, with the A/A control ("control" / `off`). The `on` arm must have written exactly one log
    file in `logdir` (removed after)."""
    from transfer import logfiles

    per_step = arm(off, 5)
    steps = int(min(cfg["max_steps"], max(cfg["min_steps"], cfg["block_s"] / per_step)))
    times: Dict[str, list] = {a: [] for a in arms}
    ratios, control = [], []
    for repeat in range(cfg["repeats"]):
        shift = repeat % len(arms)
        got = {name: arm(name, steps) for name in arms[shift:] + arms[:shift]}
        for name in arms:
            times[name].append(got[name])
        ratios.append(got[on] / got[off])
        control.append(got["control"] / got[off])
    logged = sorted(os.listdir(logdir))
    shutil.rmtree(logdir, ignore_errors=True)
    logfiles.forget_process_log()  # its directory is gone (each uninstall already ended its log: nothing left)
    if logged != ["transfer-log-rank0.jsonl"]:  # each uninstall completes the log of this rankless process as rank 0
        raise RuntimeError(f"the {on!r} arm wrote {logged} instead of one log file")
    record = C.ratio_record(times[on], times[off], ratios, TARGET, unit_scale=1e3)
    ctl = C.summary(control)
    if quick:
        record["meets_target"] = None  # a few short blocks show the family works, not the figure
    record.update(status="ok", unit="ms per step", steps_per_block=steps, control_ratio=ctl["median"],
                  control_q1=ctl["q1"], control_q3=ctl["q3"], workload=workload)
    return record


def line(target: str, rec: Dict[str, Any]) -> str:
    """The printed line of one target."""
    if rec.get("status") != "ok":
        return f"  [{target}] {rec.get('status')}"
    mark = {True: "ok", False: "MISS"}.get(rec.get("meets_target"), "not judged")
    what = "rehearsal (--plan npu) on / off" if target.endswith("plan") else "TRANSFER_LOG on / off"
    return (f"  [{target}] {what}: median {rec['ratio']:.3f} [q1 {rec['ratio_q1']:.3f} - q3 "
            f"{rec['ratio_q3']:.3f}] {mark} (bar {rec['target']}); A/A control {rec['control_ratio']:.3f} "
            f"[{rec['control_q1']:.3f}-{rec['control_q3']:.3f}]; {rec['repeats']} repeats of "
            f"{rec['steps_per_block']} steps, step off {rec['native']:.2f} ms")


def measure(targets, quick: bool, log=print) -> Dict[str, Any]:
    results = C.per_target("calllog", targets, quick, log, line)
    if "cpu" in targets:  # the rehearsal on a native job: what `transfer-run --plan` costs on real CUDA
        results["native+plan"] = C.run_child("calllog", ["--plan"] + (["--quick"] if quick else []),
                                             timeout=600 if quick else 1800)
        log(line("native+plan", results["native+plan"]))
    return {"targets": results, "method": "one process per target; blocks of steps rotate log on / off / off "
            "(A/A control); ratio = on ms/step / off ms/step per repeat"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.calllog", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="cpu", choices=C.TARGETS)
    parser.add_argument("--quick", action="store_true", help="few repeats: checks it works, not the number")
    parser.add_argument("--repeats", type=int, default=0, help=f"default {FULL['repeats']} ({QUICK['repeats']} quick)")
    parser.add_argument("--plan", action="store_true", help="the rehearsal's cost on a native job instead "
                        "(transfer.plan.observe on / off, no shim)")
    parser.add_argument("--json", help="write the result here and exit (the suite's child mode)")
    args = parser.parse_args(argv)
    run = (lambda: child_plan(args.quick, args.repeats)) if args.plan else \
        (lambda: child(args.target, args.quick, args.repeats))
    if args.json:
        C.finish_child(args.json, run)
    result = run()
    print(line("native+plan" if args.plan else args.target, result).strip())
    return 0 if result.get("status") == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
