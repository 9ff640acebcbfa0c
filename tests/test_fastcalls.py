"""The C stand-ins of the hot wrappers (transfer/fastcalls.py) behave as the Python wrappers do.

The Python wrappers' behaviour is held to CUDA's by the rest of the suite; here every
spelling is run under both (TRANSFER_NO_FASTCALLS=1 and not) in the same order, and what a
user can see is compared: the result (device, dtype, values, whether it aliases the input),
the exception (type and message), the translations report, and an argument dict left as given.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
import pickle
import sys
import threading

import pytest
import torch

import transfer
from transfer import fastcalls

from conftest import ROOT, VENDORS, clean_env, dynamo_traces_wrapper_checks, needs_standins, run

needs_ext = pytest.mark.skipif(fastcalls.TYPE is None, reason="transfer._fastcalls is not built here "
                                "(`python setup.py build_ext --inplace`)")


def _install(monkeypatch, fast: bool):
    transfer.uninstall()
    for name in ("TRANSFER_DISABLE", "TRANSFER_STRICT", "TRANSFER_CPU_DEVICES", "LOCAL_WORLD_SIZE",
                 "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRANSFER_QUIET", "1")
    monkeypatch.setenv("TRANSFER_NO_FASTCALLS", "0" if fast else "1")
    transfer.install("cpu")


@pytest.fixture
def both(monkeypatch):
    """both(fast): transfer installed on the cpu target with (True) or without the C stand-ins."""
    yield lambda fast: _install(monkeypatch, fast)
    transfer.uninstall()


SHARED_KWARGS = {"device": "cuda"}


def _spellings():
    torch.manual_seed(1)
    m = torch.nn.Linear(2, 2)
    return [
        ("x.to(torch.float16)", lambda x: x.to(torch.float16)),
        ("x.to(None, torch.float64, False)", lambda x: x.to(None, torch.float64, False)),
        ("x.to(torch.float16, non_blocking=True)", lambda x: x.to(torch.float16, non_blocking=True)),
        ("x.to(torch.float16, copy=True)", lambda x: x.to(torch.float16, copy=True)),
        ("x.to('cuda')", lambda x: x.to("cuda")),
        ("x.to('cuda', non_blocking=True)", lambda x: x.to("cuda", non_blocking=True)),
        ("x.to('cuda', non_blocking=False)", lambda x: x.to("cuda", non_blocking=False)),
        ("x.to('cuda', torch.float16)", lambda x: x.to("cuda", torch.float16)),
        ("x.to('cuda:1')", lambda x: x.to("cuda:1")),
        ("x.to(torch.device('cuda', 0))", lambda x: x.to(torch.device("cuda", 0))),
        ("x.to(0)", lambda x: x.to(0)),
        ("x.to('cpu')", lambda x: x.to("cpu")),
        ("x.to(device='cuda')", lambda x: x.to(device="cuda")),
        ("x.to('cuda', copy=True)", lambda x: x.to("cuda", copy=True)),
        ("x.to(x)", lambda x: x.to(x)),
        ("x.to()", lambda x: x.to()),
        ("x.to('cuda:9')", lambda x: x.to("cuda:9")),
        ("x.to('cuda_model.pt')", lambda x: x.to("cuda_model.pt")),
        ("x.to('cuda', bogus=1)", lambda x: x.to("cuda", bogus=1)),
        ("torch.Tensor.to(x, 'cuda')", lambda x: torch.Tensor.to(x, "cuda")),
        ("torch.Tensor.to()", lambda x: torch.Tensor.to()),
        ("partial(torch.Tensor.to, x)('cuda')", lambda x: functools.partial(torch.Tensor.to, x)("cuda")),
        ("getattr(x, 'to')(torch.float16)", lambda x: getattr(x, "to")(torch.float16)),
        ("x.cuda()", lambda x: x.cuda()),
        ("x.new_zeros(2, device='cuda')", lambda x: x.new_zeros(2, device="cuda")),
        ("x.new_zeros(2)", lambda x: x.new_zeros(2)),
        ("torch.zeros(4)", lambda x: torch.zeros(4)),
        ("torch.zeros(4, device='cuda')", lambda x: torch.zeros(4, device="cuda")),
        ("torch.zeros(4, device='cuda:1')", lambda x: torch.zeros(4, device="cuda:1")),
        ("torch.zeros(4, device=torch.device('cuda'))", lambda x: torch.zeros(4, device=torch.device("cuda"))),
        ("torch.zeros(4, device=None)", lambda x: torch.zeros(4, device=None)),
        ("torch.zeros(4, device='cpu')", lambda x: torch.zeros(4, device="cpu")),
        ("torch.zeros(4, device=x.device)", lambda x: torch.zeros(4, device=x.device)),
        ("torch.zeros(4, device='cuda:7')", lambda x: torch.zeros(4, device="cuda:7")),
        ("torch.zeros(4, dtype=torch.int64)", lambda x: torch.zeros(4, dtype=torch.int64)),
        ("torch.ones(2, **shared)", lambda x: torch.ones(2, **SHARED_KWARGS)),
        ("torch.full((2,), 3.0, device='cuda')", lambda x: torch.full((2,), 3.0, device="cuda")),
        ("torch.arange(3, device='cuda')", lambda x: torch.arange(3, device="cuda")),
        ("torch.randn(3, device='cuda')", lambda x: torch.randn(3, device="cuda")),
        ("torch.randn(3, device='cuda:1')", lambda x: torch.randn(3, device="cuda:1")),
        ("torch.randn(3)", lambda x: torch.randn(3)),
        ("torch.randn(3, device='cpu')", lambda x: torch.randn(3, device="cpu")),
        ("torch.randn(3, device='cuda', dtype=torch.float64)",
         lambda x: torch.randn(3, device="cuda", dtype=torch.float64)),
        ("torch.rand(2, **shared)", lambda x: torch.rand(2, **SHARED_KWARGS)),
        ("torch.randint(5, (3,), device='cuda')", lambda x: torch.randint(5, (3,), device="cuda")),
        ("torch.randn_like(x)", lambda x: torch.randn_like(x)),
        ("torch.randn(3, device='cuda:5')", lambda x: torch.randn(3, device="cuda:5")),
        ("torch.cuda.current_device()", lambda x: torch.cuda.current_device()),
        ("torch.cuda.set_device(1); torch.cuda.current_device()", lambda x: _current_after(1)),
        ("torch.cuda.current_device(0)", lambda x: torch.cuda.current_device(0)),
        ("torch.cuda.current_device(device=0)", lambda x: torch.cuda.current_device(device=0)),
        ("torch.cuda.current_device() in a new thread", lambda x: _current_in_thread()),
        ("m.to(torch.bfloat16)", lambda x: m.to(torch.bfloat16).weight),
        ("m.to('cuda')", lambda x: m.to("cuda").weight),
        ("m.to(torch.device('cuda', 1), torch.float32)", lambda x: m.to(torch.device("cuda", 1), torch.float32).weight),
        ("m.to(device='cuda', dtype=torch.float32)", lambda x: m.to(device="cuda", dtype=torch.float32).weight),
        ("m.to('cuda:9')", lambda x: m.to("cuda:9")),
        ("with torch.device('cuda'): torch.ones(2)", lambda x: _under_device("cuda")),
        ("with torch.device('cuda:1'): x.new_ones(2)", lambda x: _under_device("cuda:1", x)),
        ("with torch.device('cuda:6'): ...", lambda x: _under_device("cuda:6")),
    ]


def _current_after(index):
    torch.cuda.set_device(index)
    try:
        return torch.cuda.current_device()
    finally:
        torch.cuda.set_device(0)


def _current_in_thread():
    """CUDA's current device is per thread: a new thread starts on device 0."""
    torch.cuda.set_device(1)
    seen = []
    worker = threading.Thread(target=lambda: seen.append(torch.cuda.current_device()))
    worker.start()
    worker.join()
    torch.cuda.set_device(0)
    return seen


def _under_device(device, x=None):
    with torch.device(device):
        return torch.ones(2) if x is None else x.new_ones(2)


def _seen(value, x):
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.device), value.dtype, tuple(value.shape), value.tolist(), value is x,
                value.data_ptr() == x.data_ptr())
    return ("value", repr(value))


def _run_all():
    """Each spelling three times (the memo's miss, then its hits), in one fixed order."""
    outcomes = []
    for label, call in _spellings():
        for _ in range(3):
            x = torch.arange(4.0)
            torch.manual_seed(0)
            torch.cuda.manual_seed_all(0)
            try:
                outcomes.append((label, "returned", _seen(call(x), x)))
            except Exception as exc:  # the exception itself is what is compared
                outcomes.append((label, "raised", type(exc).__name__, str(exc)))
    assert SHARED_KWARGS == {"device": "cuda"}, SHARED_KWARGS  # the caller's dict is never changed
    translations = [{k: v for k, v in row.items()} for row in transfer.status().get("translations", [])]
    return outcomes, translations


@needs_ext
def test_every_spelling_returns_raises_and_reports_as_the_python_wrappers(both):
    both(False)
    assert not fastcalls.is_fast(torch.Tensor.to)
    python = _run_all()
    both(True)
    assert fastcalls.is_fast(torch.Tensor.to) and fastcalls.is_fast(torch.zeros) and fastcalls.is_fast(torch.randn)
    c = _run_all()
    assert len(c[0]) == len(python[0])
    for got, want in zip(c[0], python[0]):
        assert got == want
    assert c[1] == python[1]


@needs_ext
def test_stand_ins_are_what_the_hot_calls_hold_and_uninstall_restores_torch(both):
    tensor_base = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
    natives = {"to": tensor_base.to, "zeros": torch.zeros, "randn": torch.randn, "module_to": torch.nn.Module.to}
    both(True)
    for obj in (torch.Tensor.to, torch.Tensor.new_zeros, torch.zeros, torch.randn, torch.nn.Module.to,
                torch.nn.Module.to_empty, torch.cuda.current_device):
        assert fastcalls.is_fast(obj), obj
    transfer.uninstall()
    assert "to" not in vars(torch.Tensor) or vars(torch.Tensor)["to"] is natives["to"]
    assert torch.Tensor.to is natives["to"] and torch.zeros is natives["zeros"]
    assert torch.randn is natives["randn"] and torch.nn.Module.to is natives["module_to"]


@needs_ext
def test_no_fastcalls_switch_keeps_python_wrappers_and_a_bad_value_stops_the_install(both, monkeypatch):
    both(False)
    assert inspect.isfunction(torch.Tensor.to) and inspect.isfunction(torch.zeros)
    transfer.uninstall()
    native_zeros = torch.zeros
    monkeypatch.setenv("TRANSFER_NO_FASTCALLS", "maybe")
    with pytest.raises(transfer.TransferError, match="TRANSFER_NO_FASTCALLS='maybe'"):
        transfer.install("cpu")
    assert torch.zeros is native_zeros  # nothing patched


@needs_ext
def test_stand_ins_pickle_copy_and_introspect_as_the_python_wrappers(both):
    both(False)
    python = {name: _facts(obj) for name, obj in _hot_objects().items()}
    both(True)
    fast = {name: _facts(obj) for name, obj in _hot_objects().items()}
    assert fast == python
    for obj in _hot_objects().values():
        assert pickle.loads(pickle.dumps(obj)) is obj
        assert copy.copy(obj) is obj and copy.deepcopy(obj) is obj


def _hot_objects():
    return {"Tensor.to": torch.Tensor.to, "Tensor.new_zeros": torch.Tensor.new_zeros, "zeros": torch.zeros,
            "randn": torch.randn, "Module.to": torch.nn.Module.to}


def _facts(obj):
    try:
        signature = str(inspect.signature(obj))
    except (TypeError, ValueError) as exc:
        signature = type(exc).__name__
    x = torch.zeros(1)
    bound = getattr(x, obj.__name__, None) if obj.__qualname__.startswith("Tensor.") else None
    return {"names": (obj.__name__, obj.__qualname__, obj.__module__, obj.__doc__),
            "wrapped": inspect.unwrap(obj), "signature": signature, "routine": inspect.isroutine(obj),
            "bound": None if bound is None else (bound.__self__ is x, bound.__name__)}


@needs_ext
def test_threads_share_the_memo_without_a_wrong_answer(both):
    both(True)
    x = torch.arange(4.0)
    calls = [(lambda: x.to("cuda"), torch.float32, True), (lambda: x.to("cuda:1"), torch.float32, True),
             (lambda: x.to(torch.float16), torch.float16, True), (lambda: x.to(torch.float32), torch.float32, False),
             (lambda: torch.zeros(2, device="cuda:1"), torch.float32, True),
             (lambda: torch.randn(2, device="cuda"), torch.float32, True)]
    wrong = []

    def work(offset):
        for i in range(3000):
            call, dtype, new = calls[(i + offset) % len(calls)]
            out = call()
            if out.dtype != dtype or out.device.type != "cpu" or (out is x) == new:
                wrong.append((offset, i, out.dtype, out is x))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not wrong, wrong[:5]


def _compiled_step(x):
    y = x.to("cuda", non_blocking=True) * 2 + torch.zeros(4, device="cuda") + x.to(torch.float16).float()
    return y + torch.randn(4, device="cuda") * 0 + torch.ones(4)


@needs_ext
def test_compile_traces_the_stand_ins_without_graph_breaks(both):
    """fullgraph=True raises at any graph break: dynamo is shown each stand-in's Python twin."""
    import torch._dynamo

    both(True)
    if not hasattr(torch._dynamo, "trace_rules") and not dynamo_traces_wrapper_checks():
        pytest.skip("this torch's dynamo cannot trace the wrappers' frozenset membership (graph breaks "
                    "with the Python wrappers too: test_cpu_target.py)")
    assert fastcalls.is_fast(torch.zeros)
    torch._dynamo.reset()
    x = torch.arange(4.0)
    compiled = torch.compile(_compiled_step, fullgraph=True, backend="eager")
    assert torch.equal(compiled(x), _compiled_step(x))
    torch._dynamo.reset()


@needs_ext
def test_compile_breaks_graphs_where_the_python_wrappers_do_and_computes_the_same(both):
    """On every torch (2.0-2.1's dynamo breaks on the wrappers' frozenset test: as many breaks either way)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    seen = []
    for fast in (False, True):
        both(fast)
        torch._dynamo.reset()
        counters.clear()
        x = torch.arange(4.0)
        out = torch.compile(_compiled_step_no_draw, backend="eager")(x)
        seen.append((sum(counters["graph_break"].values()), out.tolist(), out.dtype))
        torch._dynamo.reset()
    assert seen[1] == seen[0]


def _compiled_step_no_draw(x):  # torch 2.1's dynamo cannot run a draw with generator= in a graph (either way)
    y = x.to("cuda", non_blocking=True) * 2 + torch.zeros(4, device="cuda") + x.to(torch.float16).float()
    return y + torch.ones(4) + x.to("cuda:1") + torch.cuda.current_device()


CURRENT_DEVICE_FOLDS = """
import torch
from transfer import auto as _  # installed before dynamo's first compile, as in a user's script
from torch._dynamo.utils import counters

def step(x):
    return x + torch.cuda.current_device()

compiled = torch.compile(step, backend="eager")
first = compiled(torch.zeros(2)).tolist()
torch.cuda.set_device(1)
second = compiled(torch.zeros(2)).tolist()  # a guard on current_device(): recompiled, not stale
print("RESULT", type(torch.cuda.current_device).__name__, first, second, sum(counters["graph_break"].values()))
"""


@needs_ext
def test_current_device_folds_to_a_constant_under_compile_as_with_the_python_wrapper():
    """torch.cuda.current_device() is one of dynamo's constant-folded functions (torch >= 2.2): the C stand-in
    folds as the Python function did (dynamo is shown the twin beside the stand-in in its folding lists)."""
    seen = {}
    for fast in ("0", "1"):
        proc = run([sys.executable, "-c", CURRENT_DEVICE_FOLDS], cwd=ROOT, check=False,
                   env=clean_env(PYTHONPATH=ROOT, TRANSFER_DEVICE="cpu", TRANSFER_QUIET="1",
                                 TRANSFER_NO_FASTCALLS="0" if fast == "1" else "1"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        seen[fast] = proc.stdout.split("RESULT", 1)[1].split()
    assert seen["1"][0] == "FastCall" and seen["0"][0] == "function"
    assert seen["0"][1:5] == ["[0.0,", "0.0]", "[1.0,", "1.0]"], seen  # device 0, then 1 after set_device(1)
    assert seen["1"][1:] == seen["0"][1:], seen  # as many graph breaks: none on torch >= 2.2, one on 2.0-2.1


WITHOUT_EXTENSION = """
import sys
sys.modules["transfer._fastcalls"] = None  # as on a platform where it was not built
import inspect, torch, transfer
transfer.install("cpu")
assert inspect.isfunction(torch.Tensor.to) and inspect.isfunction(torch.zeros), (torch.Tensor.to, torch.zeros)
assert torch.zeros(2, device="cuda").device.type == "cpu" and torch.ones(2).to("cuda:1").device.type == "cpu"
print("PYTHON WRAPPERS")
"""


def test_without_the_extension_the_python_wrappers_are_installed():
    proc = run([sys.executable, "-c", WITHOUT_EXTENSION], env=clean_env(PYTHONPATH=ROOT, TRANSFER_QUIET="1"),
               cwd=ROOT, check=False)
    assert proc.returncode == 0 and "PYTHON WRAPPERS" in proc.stdout, proc.stdout + proc.stderr


ON_A_VENDOR = """
import torch, transfer
from transfer import fastcalls
assert fastcalls.is_fast(torch.Tensor.to) == FAST, torch.Tensor.to
torch.manual_seed(0)
m = torch.nn.Linear(2, 2)
h = torch.arange(4.0)
x = h.to("npu")
spellings = [
    lambda: x.to("cuda"), lambda: x.to("cuda", non_blocking=True), lambda: x.to("cuda", non_blocking=False),
    lambda: x.to(torch.float16), lambda: x.to(None, torch.float64, False), lambda: x.to("cuda:1"),
    lambda: h.to("cuda"), lambda: h.to("cuda", non_blocking=True), lambda: h.cuda(), lambda: x.to("cpu"),
    lambda: x.to(device="cuda"), lambda: x.to("cuda", copy=True), lambda: x.to("cuda:9"), lambda: x.to(),
    lambda: torch.zeros(2, device="cuda"), lambda: torch.zeros(2, device="cuda:1"), lambda: torch.zeros(2),
    lambda: torch.randn(2, device="cuda").shape, lambda: torch.ones(2, device=torch.device("cuda", 0)),
    lambda: m.to("cuda").weight, lambda: m.to(torch.bfloat16).weight, lambda: m.to("cuda", non_blocking=True).weight,
    lambda: m.to(torch.device("cuda", 1)).weight, lambda: torch.Tensor.to(x, "cuda"),
]
for i, call in enumerate(spellings):
    for _ in range(3):
        try:
            r = call()
            if isinstance(r, torch.Tensor):
                r = (str(r.device), r.dtype, r.shape, r.cpu().tolist(), r is x, r is h)
            print(i, "returned", r)
        except Exception as exc:
            print(i, "raised", type(exc).__name__, exc)
print(sorted((row["api"], str(row["argument"]), str(row["to"])) for row in transfer.status()["translations"]))
"""


@needs_standins
@needs_ext
def test_on_a_vendor_stand_in_every_spelling_matches_the_python_wrappers():
    """The vendor targets' Tensor.to / Module.to are the `to` stand-in (the cpu target's are not)."""
    outputs = []
    for fast in (False, True):
        env = clean_env(TRANSFER_DEVICE="npu", PYTHONPATH=os.pathsep.join([ROOT, VENDORS]), TRANSFER_QUIET="1",
                        TRANSFER_NO_FASTCALLS="0" if fast else "1")
        proc = run([sys.executable, "-c", f"FAST = {fast}\n" + ON_A_VENDOR], env=env, cwd=ROOT, timeout=600)
        outputs.append(proc.stdout)
    assert outputs[1] == outputs[0]
    assert "returned" in outputs[0] and "raised" in outputs[0]
