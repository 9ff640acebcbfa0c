"""CUDA streams and events with CUDA device arguments, on every target.

timm's ``PrefetchLoader`` makes ``torch.cuda.Stream(device=torch.device('cuda'))`` and apex's imagenet
prefetcher ``record_stream``s its batches and times the copies with events: on a vendor the stream
constructor took the CUDA device as it was ("ValueError: Expected a npu device, but got: cuda"). The
oracle is CUDA's semantics: a stream is on the device its argument names (``cuda:1`` is device 1), and
a prefetcher changes when copies run, never what is computed, so a run with it gives the losses of the
same run without it, bit for bit.
"""

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from conftest import NO_STANDINS, SCRIPTS, STANDINS, python, target_env

PREFETCHER = os.path.join(SCRIPTS, "idioms", "timm_prefetcher.py")
TARGETS = ["cpu", *(pytest.param(v, marks=pytest.mark.skipif(not STANDINS, reason=NO_STANDINS))
                    for v in ("npu", "sdaa", "gcu"))]


def test_stream_device_arguments_on_the_cpu_target(cpu_target):
    for spec in (torch.device("cuda"), "cuda", "cuda:1", torch.device("cuda", 1), 1, None):
        stream = torch.cuda.Stream(device=spec)
        assert isinstance(stream, torch.cuda.Stream) and stream.query()
        assert stream.device_index == (1 if spec in ("cuda:1", torch.device("cuda", 1), 1) else 0), spec
    assert torch.cuda.Stream(torch.device("cuda"), priority=-1).priority == -1
    with pytest.raises(RuntimeError, match="invalid device ordinal cuda:7"):
        torch.cuda.Stream(device="cuda:7")


STREAM_API = r"""
import json, torch
dev = torch.device("cuda")
out = {}
s = torch.cuda.Stream(device=dev)
s1 = torch.cuda.Stream("cuda:1", priority=-1)
out["devices"] = [str(s.device), str(s1.device), str(torch.cuda.Stream(device=1).device)]
out["isinstance"] = [isinstance(x, torch.cuda.Stream) for x in (s, s1, torch.cuda.current_stream(dev))]
x = torch.arange(4.0)
with torch.cuda.stream(s):
    y = x.to(dev, non_blocking=True) * 2
torch.cuda.current_stream(device=dev).wait_stream(s)
y.record_stream(torch.cuda.current_stream())
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record(s)
with torch.cuda.StreamContext(s1):
    z = torch.ones(2, device="cuda:1") + 1
s.record_event(end)
s1.wait_event(end)
end.wait(torch.cuda.default_stream(dev))
end.synchronize()
out["elapsed_ms_nonnegative"] = start.elapsed_time(end) >= 0
out["values"] = [y.tolist(), z.tolist(), str(y.device), str(z.device)]
torch.cuda.synchronize(dev)
s.synchronize()
out["query"] = [s.query(), end.query()]
try:
    torch.cuda.Stream(device="cuda:9")
except Exception as exc:
    out["bad_ordinal"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_stream_and_event_api_with_cuda_devices(target):
    proc = python("-c", STREAM_API, env=target_env(target), timeout=600)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    device = (lambda i: "cpu") if target == "cpu" else (lambda i: f"{target}:{i}")
    if target != "cpu":  # the cpu target's streams are the CPU's (every virtual device is the one CPU)
        assert out["devices"] == [device(0), device(1), device(1)], out
    assert out["isinstance"] == [True, True, True], out
    assert out["values"] == [[0.0, 2.0, 4.0, 6.0], [2.0, 2.0], device(0), device(1)], out
    assert out["elapsed_ms_nonnegative"] and out["query"] == [True, True], out
    assert "invalid device ordinal cuda:9" in out["bad_ordinal"], out


def _losses(target, prefetcher):
    proc = python(PREFETCHER, "--prefetcher", prefetcher, "--amp", env=target_env(target), timeout=600)
    accuracy, losses = re.search(r"accuracy ([\d.]+) losses ([\d. ]+)", proc.stdout).groups()
    assert re.search(r"parameters on (\S+),", proc.stdout).group(1) == ("cpu" if target == "cpu" else f"{target}:0")
    return float(accuracy), losses.split()


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_prefetchers_with_amp_compute_what_the_plain_loop_computes(target):
    """timm's PrefetchLoader and apex's data_prefetcher, AMP on, learn exactly as the same loop without them."""
    with ThreadPoolExecutor(2) as pool:
        runs = dict(zip(("timm", "apex", "none"), pool.map(lambda p: _losses(target, p), ("timm", "apex", "none"))))
    accuracy, plain = runs["none"]
    assert accuracy >= 0.9 and len(plain) == 24 and float(plain[-1]) < float(plain[0]) / 4, runs
    for name in ("timm", "apex"):
        assert runs[name] == runs["none"], f"{name}'s prefetcher changed the losses: {runs[name]} != {runs['none']}"


COMPILED_FED_BY_PREFETCHER = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from timm_prefetcher import PrefetchLoader, fast_collate, synthetic_images
model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.LazyLinear(4))
model.to(torch.device("cuda"))
loader = torch.utils.data.DataLoader(synthetic_images(64), batch_size=16, collate_fn=fast_collate)
eager = [model(x) for x, _ in PrefetchLoader(loader)]
compiled = torch.compile(model, fullgraph=True, backend="eager")  # fullgraph: a break raises
outputs = [compiled(x) for x, _ in PrefetchLoader(loader)]
print(json.dumps({"same": all(torch.equal(a, b) for a, b in zip(eager, outputs)), "n": len(outputs),
                  "device": str(outputs[0].device)}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu", pytest.param("npu", marks=pytest.mark.skipif(not STANDINS,
                                                                                          reason=NO_STANDINS))])
def test_a_compiled_model_fed_by_the_prefetcher_stays_one_graph(target):
    """timm's ``--torchcompile`` with its prefetcher: the streams stay outside the compiled model, whose graph
    stays whole (fullgraph=True) and computes what eager computes."""
    proc = python("-c", COMPILED_FED_BY_PREFETCHER, os.path.dirname(PREFETCHER), env=target_env(target), timeout=600)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"same": True, "n": 4, "device": "cpu" if target == "cpu" else f"{target}:0"}, out
