"""Family "standin": what the vendor stand-ins (tests/vendors) cost against the CPU they run on.

``python -m benchmarks.standin [--target npu] [--quick]`` prints the rows; the suite
(``python -m benchmarks --only standin``) runs it per vendor target with ``--json``.

A stand-in's device memory is host memory and its kernels are the CPU's, so a step on ``npu:0``
should cost about what the same step costs on the CPU (the cpu target runs exactly that: CPU
kernels on CPU tensors). Three kinds of rows, all in one child process per vendor with one
intra-op thread:

* **steps** (issue 34, target: the stand-in within 1.5x of the CPU): an LSTM language model step
  (pytorch/examples' word_language_model: Embedding, 2-layer LSTM, Linear decoder, NLL loss,
  clip_grad_norm_, the manual SGD update) and a transformer step (a 2-layer causal
  TransformerEncoder language model, cross entropy, AdamW); also, not judged, a small ResNet step (conv,
  BatchNorm, SGD with momentum: the ResNet runs that timed out on the stand-ins). The same model, weights and batches
  on the CPU and on ``<target>:0``; blocks of steps alternate between the two (each arm takes each
  position in turn); ratio = device / CPU per repeat, median and q1-q3 (process CPU time).
* **ops**: single aten calls on small tensors, the fixed cost of a stand-in op (dispatch, the
  fallback, aliasing): ns per call on the device and on the CPU, and their ratio.
* **startup** (issue 32 asks the stand-ins' start-up and per-op cost to stay within 10% of a
  recorded baseline): fresh processes, ``import <stand-in>`` after ``import torch`` (the C++
  extension already built and cached), then the first op on the device (an add and a copy back).

Re-run after a change to the stand-ins and compare with the figures in benchmarks/README.md
("Stand-in speed"): ``python -m benchmarks --only standin --targets npu``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any, Callable, Dict, List

if __package__ in (None, ""):  # python benchmarks/standin.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    __package__ = "benchmarks"

from benchmarks import _common as C  # noqa: E402

TARGET = 1.5  # issue 34: a stand-in step within 1.5x of the same step on the CPU
FULL = {"repeats": 11, "block_s": 0.4, "op_repeats": 15, "op_block_s": 0.02, "startup_runs": 7}
QUICK = {"repeats": 2, "block_s": 0.02, "op_repeats": 3, "op_block_s": 0.002, "startup_runs": 1}
LSTM = {"ntoken": 2000, "ninp": 200, "nhid": 200, "nlayers": 2, "bptt": 35, "batch": 20}
TRANSFORMER = {"ntoken": 2000, "d_model": 128, "nhead": 4, "ff": 512, "nlayers": 2, "seq": 64, "batch": 8}
RESNET = {"width": 32, "batch": 32, "size": 32}
QUICK_RESNET = {"width": 4, "batch": 2, "size": 8}
QUICK_LSTM = {**LSTM, "ntoken": 200, "ninp": 16, "nhid": 16, "bptt": 5, "batch": 4}
QUICK_TRANSFORMER = {**TRANSFORMER, "ntoken": 200, "d_model": 16, "nhead": 2, "ff": 32, "seq": 8, "batch": 2}


# ---------------------------------------------------------------- workloads
def _lstm_step(torch, device: str, cfg: Dict[str, int]) -> Callable[[], None]:
    """word_language_model's train() body, one batch (its RNNModel with LSTM, tied=False)."""
    import torch.nn as nn
    import torch.nn.functional as F

    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.2)
            self.encoder = nn.Embedding(cfg["ntoken"], cfg["ninp"])
            self.rnn = nn.LSTM(cfg["ninp"], cfg["nhid"], cfg["nlayers"], dropout=0.2)
            self.decoder = nn.Linear(cfg["nhid"], cfg["ntoken"])

        def forward(self, x, hidden):
            emb = self.drop(self.encoder(x))
            output, hidden = self.rnn(emb, hidden)
            decoded = self.decoder(self.drop(output)).view(-1, cfg["ntoken"])
            return F.log_softmax(decoded, dim=1), hidden

    torch.manual_seed(0)
    model = RNNModel().to(device)
    gen = torch.Generator().manual_seed(1)
    data = torch.randint(0, cfg["ntoken"], (cfg["bptt"] + 1, cfg["batch"]), generator=gen).to(device)
    x, y = data[:-1], data[1:].reshape(-1)
    shape = (cfg["nlayers"], cfg["batch"], cfg["nhid"])
    state = {"hidden": (torch.zeros(shape, device=device), torch.zeros(shape, device=device))}
    lr = 20.0

    def step():
        hidden = tuple(h.detach() for h in state["hidden"])
        model.zero_grad()
        output, hidden = model(x, hidden)
        loss = F.nll_loss(output, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        state["hidden"] = hidden
        loss.item()

    return step


def _transformer_step(torch, device: str, cfg: Dict[str, int]) -> Callable[[], None]:
    """A small causal language model on nn.TransformerEncoder, AdamW, one batch."""
    import torch.nn as nn
    import torch.nn.functional as F

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(cfg["ntoken"], cfg["d_model"])
            self.pos = nn.Parameter(torch.zeros(cfg["seq"], cfg["d_model"]))
            layer = nn.TransformerEncoderLayer(cfg["d_model"], cfg["nhead"], cfg["ff"], dropout=0.1, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, cfg["nlayers"], enable_nested_tensor=False)
            self.norm = nn.LayerNorm(cfg["d_model"])
            self.head = nn.Linear(cfg["d_model"], cfg["ntoken"])

        def forward(self, x, mask):
            return self.head(self.norm(self.encoder(self.embed(x) + self.pos, mask=mask, is_causal=True)))

    torch.manual_seed(0)
    model = LM().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    gen = torch.Generator().manual_seed(1)
    data = torch.randint(0, cfg["ntoken"], (cfg["batch"], cfg["seq"] + 1), generator=gen).to(device)
    x, y = data[:, :-1], data[:, 1:]
    mask = nn.Transformer.generate_square_subsequent_mask(cfg["seq"], device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(x, mask)
        loss = F.cross_entropy(logits.reshape(-1, cfg["ntoken"]), y.reshape(-1))
        loss.backward()
        opt.step()
        loss.item()

    return step


def _resnet_step(torch, device: str, cfg: Dict[str, int]) -> Callable[[], None]:
    """A small ResNet (basic blocks: conv, BatchNorm, ReLU, shortcut), cross entropy, SGD with momentum: the
    conv/BatchNorm path of the self-supervised ResNet runs that timed out on the stand-ins (issue 34)."""
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.short = nn.Sequential() if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            return F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))) + self.short(x))

    w = cfg["width"]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
                          Block(w, w, 1), Block(w, 2 * w, 2), Block(2 * w, 4 * w, 2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * w, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(cfg["batch"], 3, cfg["size"], cfg["size"], generator=gen).to(device)
    y = torch.randint(0, 10, (cfg["batch"],), generator=gen).to(device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()

    return step


def _ops(torch, device: str) -> Dict[str, Callable[[], Any]]:
    """One aten call each, on small tensors (the stand-in's fixed cost per op)."""
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(1024, generator=gen).to(device) for _ in range(2))
    m, n = (torch.randn(64, 64, generator=gen).to(device) for _ in range(2))
    w, bias = torch.randn(64, 64, generator=gen).to(device), torch.randn(64, generator=gen).to(device)
    return {
        "a + b (1K floats)": lambda: a + b,
        "a.add_(b) (in place)": lambda: a.add_(b, alpha=0.0),
        "a.sum()": lambda: a.sum(),
        "mm 64x64": lambda: torch.mm(m, n),
        "F.linear 64x64": lambda: torch.nn.functional.linear(m, w, bias),
        "torch.empty(1024)": lambda: torch.empty(1024, device=device),
    }


# ---------------------------------------------------------------- measuring
def _compare(device_fn: Callable[[], Any], cpu_fn: Callable[[], Any], repeats: int, block_s: float,
             target) -> Dict[str, Any]:
    for fn in (device_fn, cpu_fn, device_fn, cpu_fn):  # warm-up (lazy init, allocator caches)
        fn()
    calls = max(1, int(block_s / max(1e-7, min(C.per_call(cpu_fn, 2), C.per_call(device_fn, 2)))))
    dev, cpu, ratios = C.interleaved(device_fn, cpu_fn, repeats, calls)
    record = C.ratio_record(dev, cpu, ratios, target)
    record.update(status="ok", calls_per_block=calls)
    return record


def child(target: str, quick: bool) -> Dict[str, Any]:
    unavailable = C.enter_child(target)
    if unavailable:
        return unavailable
    import torch

    cfg = QUICK if quick else FULL
    device = f"{target}:0"
    lstm, transformer, resnet = (QUICK_LSTM, QUICK_TRANSFORMER, QUICK_RESNET) if quick else (LSTM, TRANSFORMER, RESNET)
    steps = {}
    for name, build, sizes, target in (("lstm", _lstm_step, lstm, TARGET),
                                       ("transformer", _transformer_step, transformer, TARGET),
                                       ("resnet", _resnet_step, resnet, None)):
        record = _compare(build(torch, device, sizes), build(torch, "cpu", sizes), cfg["repeats"], cfg["block_s"],
                          None if quick else target)
        record.update(unit="ms per step", device_ms=record["shim"] * 1e3, cpu_ms=record["native"] * 1e3,
                      sizes=sizes)
        steps[name] = record
    dev_ops, cpu_ops = _ops(torch, device), _ops(torch, "cpu")
    ops = {}
    for name in dev_ops:
        record = _compare(dev_ops[name], cpu_ops[name], cfg["op_repeats"], cfg["op_block_s"], None)
        record.update(unit="ns per call", device_ns=record["shim"] * 1e9, cpu_ns=record["native"] * 1e9)
        ops[name] = record
    return {"status": "ok", "torch": torch.__version__, "steps": steps, "ops": ops}


_STARTUP = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
sys.path.insert(0, sys.argv[2])
__import__(sys.argv[1])
t2 = time.perf_counter()
x = torch.ones(4, device=sys.argv[3] + ":0")
y = (x + 1).cpu()
t3 = time.perf_counter()
assert y.tolist() == [2.0] * 4
print(json.dumps({"import_torch_ms": (t1 - t0) * 1e3, "import_standin_ms": (t2 - t1) * 1e3,
                  "first_op_ms": (t3 - t2) * 1e3}))
"""


def startup(target: str, runs: int) -> Dict[str, Any]:
    """Fresh processes: import the stand-in after torch, then the first device op. Called after the measuring
    child, which built the extension if it was not cached: every run here loads it from the cache."""
    samples: Dict[str, List[float]] = {}
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-c", _STARTUP, C.VENDOR_PACKAGES[target], C.VENDORS_DIR, target],
                              env=C.child_env(), cwd=C.ROOT, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return {"status": f"error: exited {proc.returncode}: {' | '.join(tail)[-400:]}"}
        for key, value in json.loads(proc.stdout.strip().splitlines()[-1]).items():
            samples.setdefault(key, []).append(value)
    return {"status": "ok", "runs": runs, **{key: C.summary(values) for key, values in samples.items()}}


def line(target: str, rec: Dict[str, Any]) -> str:
    if rec.get("status") != "ok":
        return f"  [{target}] {rec.get('status')}"
    out = [f"  [{target}] torch {rec.get('torch', '?')}"]
    for name, r in rec.get("steps", {}).items():
        mark = {True: "ok", False: "MISS"}.get(r.get("meets_target"), "not judged")
        out.append(f"    {name:22s} step {r['ratio']:.2f}x [{r['ratio_q1']:.2f}-{r['ratio_q3']:.2f}] {mark}  "
                   f"({r['device_ms']:.2f} ms on {target}, {r['cpu_ms']:.2f} ms on the CPU)")
    for name, r in rec.get("ops", {}).items():
        out.append(f"    {name:22s} op   {r['ratio']:.2f}x [{r['ratio_q1']:.2f}-{r['ratio_q3']:.2f}]  "
                   f"({r['device_ns']:.0f} ns on {target}, {r['cpu_ns']:.0f} ns on the CPU)")
    s = rec.get("startup", {})
    if s.get("status") == "ok":
        out.append(f"    start-up ({s['runs']} runs)  import stand-in {s['import_standin_ms']['median']:.1f} ms "
                   f"[{s['import_standin_ms']['q1']:.1f}-{s['import_standin_ms']['q3']:.1f}], first op "
                   f"{s['first_op_ms']['median']:.1f} ms [{s['first_op_ms']['q1']:.1f}-{s['first_op_ms']['q3']:.1f}]"
                   f" (import torch {s['import_torch_ms']['median']:.0f} ms)")
    elif s:
        out.append(f"    start-up: {s.get('status')}")
    return "\n".join(out)


def measure(targets, quick: bool, log=print) -> Dict[str, Any]:
    cfg = QUICK if quick else FULL
    results: Dict[str, Any] = {}
    for target in targets:
        if target == "cpu":
            results[target] = {"status": "not applicable: the cpu target has no stand-in (it is the reference arm)"}
            continue
        if quick and target != "npu":
            results[target] = dict(C.QUICK_SKIPPED)
            continue
        log(f"  standin: {target} ...")
        rec = C.run_child("standin", ["--target", target] + (["--quick"] if quick else []),
                          timeout=600 if quick else 1800)
        if C.is_ok(rec):
            rec["startup"] = startup(target, cfg["startup_runs"])
        results[target] = rec
        log(line(target, rec))
    return {"targets": results, "method": "one process per vendor, the same model/tensors on the CPU and on the "
            "device, blocks alternating; ratio = device / CPU per repeat (process CPU time); start-up in fresh "
            "processes"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.standin", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="npu", choices=[t for t in C.TARGETS if t != "cpu"])
    parser.add_argument("--quick", action="store_true", help="few repeats, tiny sizes: checks it works")
    parser.add_argument("--json", help="write the result here and exit (the suite's child mode)")
    parser.add_argument("--no-startup", action="store_true", help="skip the start-up processes")
    parser.add_argument("--out", help="also write the result (JSON) to this file")
    args = parser.parse_args(argv)
    if args.json:
        C.finish_child(args.json, lambda: child(args.target, args.quick))
    result = C.run_child("standin", ["--target", args.target] + (["--quick"] if args.quick else []), timeout=1800)
    if C.is_ok(result) and not args.no_startup:
        result["startup"] = startup(args.target, (QUICK if args.quick else FULL)["startup_runs"])
    print(line(args.target, result))
    if args.out:
        C.write_json(args.out, result)
    return 0 if result.get("status") == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
