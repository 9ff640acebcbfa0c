"""What a CUDA script observes: probes and generated programs, written as CUDA users write them.

Run natively on a machine with an NVIDIA GPU, this records CUDA's answers:

    python tests/oracle/cuda_semantics.py --record tests/oracle/data/cuda-<gpu>-torch<version>.json \
        --files tests/oracle/data

Run anywhere else with the same code, it prints the same observations as JSON on stdout, so a
test can compare what a CUDA script computes there with what it computed on the GPU:

    python tests/oracle/cuda_semantics.py --observe [--probes name,...] [--programs N]

Every observation is a value that CUDA's semantics fix independently of the hardware: values
of integer-valued float tensors (exact on every device and in fp16), dtypes, identities
(``y is x``), whether a host tensor changed, error types and messages, the CPU random stream
(``torch.randperm`` after seeding), and the *pattern* of equalities between device random
draws (CUDA's Philox values themselves can never be reproduced elsewhere; which draws repeat
can).

Programs: `program(seed)` builds a short sequence of tensor moves, in-place ops, random-number
calls and autocast regions from a `random.Random(seed)`; `run_program` executes it and returns
its observations. The ops stay inside what a CUDA script may rely on (no device-to-device
aliasing tricks, no mixing of host and device tensors in one op): the probes cover those.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------- helpers


def _error(exc):
    return {"error": type(exc).__name__, "message": str(exc).split("\n")[0][:300]}


def _values(t):
    return t.detach().cpu().float().tolist()


def _dtype(t):
    return str(t.dtype).replace("torch.", "")


# ----------------------------------------------------------------------------- probes

PROBES = {}


def probe(fn):
    PROBES[fn.__name__] = fn
    return fn


def _host():
    return torch.arange(4, dtype=torch.float32)


def _moved_then_changed(move):
    x = _host()
    y = move(x)
    torch.cuda.synchronize()
    y.add_(1)
    torch.cuda.synchronize()
    return {"host": _values(x), "moved": _values(y), "same_object": y is x}


@probe
def copy_cuda():
    return _moved_then_changed(lambda x: x.cuda())


@probe
def copy_cuda_index():
    return _moved_then_changed(lambda x: x.cuda(0))


@probe
def copy_to_string():
    return _moved_then_changed(lambda x: x.to("cuda"))


@probe
def copy_to_string_index():
    return _moved_then_changed(lambda x: x.to("cuda:0"))


@probe
def copy_to_non_blocking():
    return _moved_then_changed(lambda x: x.to("cuda", non_blocking=True))


@probe
def copy_to_device_keyword():
    return _moved_then_changed(lambda x: x.to(device="cuda"))


@probe
def copy_to_torch_device():
    return _moved_then_changed(lambda x: x.to(torch.device("cuda")))


@probe
def copy_to_int():
    return _moved_then_changed(lambda x: x.to(0))


@probe
def copy_to_with_dtype():
    return _moved_then_changed(lambda x: x.to("cuda", torch.float32))


@probe
def copy_as_tensor():
    return _moved_then_changed(lambda x: torch.as_tensor(x, device="cuda"))


@probe
def copy_pin_memory():
    x = _host()
    y = x.pin_memory()
    y.add_(1)
    return {"host": _values(x), "pinned": _values(y), "same_object": y is x, "is_pinned": y.is_pinned(),
            "host_is_pinned": x.is_pinned()}


@probe
def copy_pinned_to_device():
    x = _host().pin_memory()
    y = x.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    y.add_(1)
    return {"host": _values(x), "moved": _values(y)}


@probe
def copy_module_cuda():
    model = nn.Linear(2, 2)
    weight = model.weight
    host_data = model.weight.data
    before = _values(host_data)
    model.cuda()
    with torch.no_grad():
        model.weight.add_(1)
    return {"same_parameter": model.weight is weight, "host_data_unchanged": _values(host_data) == before,
            "param_is_cuda": model.weight.is_cuda}


@probe
def copy_module_to():
    model = nn.Linear(2, 2)
    host_data = model.weight.data
    before = _values(host_data)
    model.to("cuda")
    with torch.no_grad():
        model.weight.mul_(0)
    return {"host_data_unchanged": _values(host_data) == before}


@probe
def identity_device_tensor_cuda():
    # Known to differ on a CPU stand-in for the device: there host and device tensors are one kind.
    d = torch.ones(2, device="cuda")
    return {"cuda_is_self": d.cuda() is d, "to_cuda_is_self": d.to("cuda") is d,
            "to_cuda_copy_is_self": d.to("cuda", copy=True) is d}


@probe
def identity_device_tensor_cpu():
    # Known to differ on a CPU stand-in for the device: d.cpu() of a "device" tensor is itself there.
    d = torch.ones(2, device="cuda")
    h = d.cpu()
    h.add_(1)
    return {"device_after": _values(d), "host": _values(h), "same_object": h is d}


@probe
def identity_host_cpu():
    x = _host()
    return {"cpu_is_self": x.cpu() is x, "to_cpu_is_self": x.to("cpu") is x}


@probe
def mixing_host_and_device():
    d = torch.ones(2, device="cuda")
    h = torch.ones(2)
    out = {}
    try:
        out["sum"] = _values(d + h)
    except Exception as exc:  # CUDA: tensors on different devices
        out["sum"] = {"error": type(exc).__name__}
    out["scalar_host"] = _values(d + torch.tensor(1.0))  # a 0-dim CPU tensor mixes with CUDA tensors
    return out


@probe
def is_cuda_of_host_and_device():
    return {"host": _host().is_cuda, "device": torch.ones(1, device="cuda").is_cuda,
            "device_type_host": _host().device.type}


# RNG ------------------------------------------------------------------------


def _cpu_stream(n=10):
    return torch.randperm(n).tolist()


@probe
def rng_cuda_seed_leaves_cpu_stream():
    torch.manual_seed(0)
    plain = _cpu_stream()
    torch.manual_seed(0)
    torch.cuda.manual_seed(123)
    torch.cuda.manual_seed_all(5)
    after_seed = _cpu_stream()
    torch.manual_seed(0)
    torch.cuda.seed()
    torch.cuda.seed_all()
    after_reseed = _cpu_stream()
    return {"plain": plain, "after_cuda_manual_seed": after_seed, "after_cuda_seed": after_reseed}


@probe
def rng_cuda_state_calls_leave_cpu_stream():
    torch.manual_seed(0)
    plain = _cpu_stream()
    torch.manual_seed(0)
    state = torch.cuda.get_rng_state()
    torch.rand(8, device="cuda")
    torch.cuda.set_rng_state(state)
    torch.cuda.set_rng_state_all(torch.cuda.get_rng_state_all())
    return {"plain": plain, "after_state_calls": _cpu_stream()}


@probe
def rng_device_factories_leave_cpu_stream():
    torch.manual_seed(0)
    plain = _cpu_stream()
    torch.manual_seed(0)
    torch.randn(100, device="cuda")
    torch.rand(3, device="cuda")
    torch.randint(0, 10, (5,), device="cuda")
    torch.randperm(20, device="cuda")
    torch.normal(torch.zeros(3, device="cuda"), 1.0)
    torch.empty(4, device="cuda").uniform_()
    return {"plain": plain, "after_device_draws": _cpu_stream()}


@probe
def rng_device_ops_leave_cpu_stream():
    # Known to differ on a CPU stand-in for the device (ops on existing tensors draw from the one CPU stream).
    torch.manual_seed(0)
    plain = _cpu_stream()
    torch.manual_seed(0)
    d = torch.ones(100, device="cuda")
    F.dropout(d, 0.5, training=True)
    torch.rand_like(d)
    d.bernoulli_(0.5)
    return {"plain": plain, "after_device_ops": _cpu_stream()}


@probe
def rng_sampler_order_with_device_draws():
    from torch.utils.data import RandomSampler, random_split

    def epoch_orders(draw_on_device):
        torch.manual_seed(0)
        orders = []
        for _ in range(2):
            orders.append(list(RandomSampler(range(12))))
            if draw_on_device:
                torch.cuda.manual_seed(1)
                torch.randn(16, device="cuda")
        split = [list(s.indices) for s in random_split(range(10), [7, 3])]
        return orders, split

    return {"plain": epoch_orders(False), "with_device_draws": epoch_orders(True)}


@probe
def rng_cuda_state_round_trip():
    torch.manual_seed(0)
    state = torch.cuda.get_rng_state()
    a = torch.rand(6, device="cuda")
    torch.cuda.set_rng_state(state)
    b = torch.rand(6, device="cuda")
    c = torch.rand(6, device="cuda")
    return {"repeat_after_restore": torch.equal(a, b), "next_differs": not torch.equal(b, c),
            "state_dtype": _dtype(state), "state_device": state.device.type, "state_dim": state.dim()}


@probe
def rng_cuda_seed_repeats():
    torch.cuda.manual_seed(3)
    a = torch.rand(5, device="cuda")
    torch.cuda.manual_seed(3)
    b = torch.rand(5, device="cuda")
    torch.cuda.manual_seed(4)
    c = torch.rand(5, device="cuda")
    torch.cuda.manual_seed_all(3)
    d = torch.rand(5, device="cuda")
    return {"same_seed_same_draws": torch.equal(a, b), "other_seed_differs": not torch.equal(a, c),
            "manual_seed_all_same": torch.equal(a, d)}


@probe
def rng_manual_seed_seeds_device():
    torch.manual_seed(3)
    a = torch.rand(5, device="cuda")
    torch.manual_seed(3)
    b = torch.rand(5, device="cuda")
    return {"torch_manual_seed_repeats_device_draws": torch.equal(a, b), "cuda_initial_seed": torch.cuda.initial_seed()}


@probe
def rng_initial_seeds_separate():
    torch.manual_seed(7)
    torch.cuda.manual_seed(5)
    return {"cpu": torch.initial_seed(), "cuda": torch.cuda.initial_seed()}


@probe
def rng_state_all():
    states = torch.cuda.get_rng_state_all()
    torch.cuda.manual_seed_all(11)
    a = torch.rand(4, device="cuda")
    torch.cuda.manual_seed_all(11)
    saved = torch.cuda.get_rng_state_all()
    torch.rand(4, device="cuda")
    torch.cuda.set_rng_state_all(saved)
    b = torch.rand(4, device="cuda")
    return {"count": len(states), "dtypes": sorted({_dtype(s) for s in states}), "round_trip": torch.equal(a, b)}


@probe
def rng_device_generator():
    g = torch.Generator(device="cuda")
    g.manual_seed(1)
    a = torch.rand(4, device="cuda", generator=g)
    g.manual_seed(1)
    b = torch.rand(4, device="cuda", generator=g)
    torch.manual_seed(0)
    plain = _cpu_stream()
    torch.manual_seed(0)
    g.manual_seed(2)
    torch.rand(4, device="cuda", generator=g)
    return {"repeat": torch.equal(a, b), "initial_seed": g.initial_seed(), "cpu_stream_untouched": _cpu_stream() == plain}


@probe
def rng_fork_rng_restores_device_state():
    torch.cuda.manual_seed(9)
    state = torch.cuda.get_rng_state()
    with torch.random.fork_rng(devices=[0]):
        torch.cuda.manual_seed(1)
        torch.rand(4, device="cuda")
    return {"restored": torch.equal(torch.cuda.get_rng_state(), state)}


@probe
def rng_checkpoint_resume():
    torch.manual_seed(0)
    torch.rand(3, device="cuda")
    checkpoint = {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all()}
    path = os.path.join(tempfile.mkdtemp(), "rng.pt")
    torch.save(checkpoint, path)
    a = (torch.randperm(6).tolist(), torch.rand(3, device="cuda"))
    loaded = torch.load(path, weights_only=False)
    torch.set_rng_state(loaded["cpu"])
    torch.cuda.set_rng_state_all(loaded["cuda"])
    b = (torch.randperm(6).tolist(), torch.rand(3, device="cuda"))
    return {"cpu_resumes": a[0] == b[0], "device_resumes": torch.equal(a[1], b[1])}


# autocast ---------------------------------------------------------------------


def _mm_dtype():
    a = torch.ones(2, 2, device="cuda")
    return _dtype(a @ a)


@probe
def amp_autocast_cuda_default():
    with torch.autocast("cuda"):
        return {"mm": _mm_dtype()}


@probe
def amp_autocast_device_type_keyword():
    with torch.autocast(device_type="cuda"):
        return {"mm": _mm_dtype()}


@probe
def amp_cuda_amp_autocast():
    with torch.cuda.amp.autocast():
        return {"mm": _mm_dtype()}


@probe
def amp_autocast_float16_explicit():
    with torch.autocast("cuda", dtype=torch.float16):
        return {"mm": _mm_dtype()}


@probe
def amp_autocast_bfloat16():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return {"mm": _mm_dtype()}


@probe
def amp_nested_disabled():
    with torch.autocast("cuda"):
        with torch.autocast("cuda", enabled=False):
            return {"mm": _mm_dtype()}


@probe
def amp_autocast_state_queries():
    out = {}
    with torch.autocast("cuda"):
        out["is_enabled_cuda"] = torch.is_autocast_enabled("cuda") if _takes_device(torch.is_autocast_enabled) else None
        out["gpu_dtype"] = _dtype(torch.ones(0, dtype=torch.get_autocast_gpu_dtype())) \
            if hasattr(torch, "get_autocast_gpu_dtype") else None
        out["dtype_cuda"] = str(torch.get_autocast_dtype("cuda")).replace("torch.", "") \
            if hasattr(torch, "get_autocast_dtype") else None
    return out


def _takes_device(fn):
    try:
        fn("cuda")
        return True
    except TypeError:
        return False


@probe
def amp_values_exact():
    a = torch.arange(4, dtype=torch.float32, device="cuda").view(2, 2)
    with torch.autocast("cuda"):
        out = a @ (a + 1)
    return {"values": _values(out), "dtype": _dtype(out)}


@probe
def amp_grad_scaler():
    scaler = torch.cuda.amp.GradScaler()
    loss = torch.tensor(2.0, device="cuda")
    return {"scale": scaler.get_scale(), "scaled": scaler.scale(loss).item(), "enabled": scaler.is_enabled()}


# device strings -----------------------------------------------------------------

DEVICE_STRINGS = ["cuda", "cuda:0", "cuda:1", "cuda:7", "CUDA", "CUDA:0", "Cuda:0", " cuda", "cuda ", "cuda:0 ",
                  "cuda:01", "cuda:00", "cuda:+1", "cuda:-1", "cuda:", "cuda:0:0", "cuda::0", "cuda:1_0",
                  "cuda:\u00b2", "cuda:\u0663", "cuda:0x1", "cuda,0", "cuda0", "cpu", "cpu:0", "meta", "",
                  "cuda:nccl", "/ckpt/cuda_model.pt"]


def _parse(spec):
    try:
        d = torch.device(spec)
        return {"type": d.type, "index": d.index}
    except Exception as exc:
        return _error(exc)


def _factory(spec):
    try:
        t = torch.zeros(1, device=spec)
        return {"ok": True, "is_cuda": t.is_cuda, "index": t.device.index if t.device.type != "cpu" else None}
    except Exception as exc:
        return dict(_error(exc), RuntimeError=isinstance(exc, RuntimeError))


@probe
def device_strings():
    return {spec: {"device": _parse(spec), "factory": _factory(spec)} for spec in DEVICE_STRINGS}


@probe
def device_ints():
    out = {}
    for spec in (0, 1, -1, 7):
        out[str(spec)] = _factory(spec)
    for args in (("cuda", 0), ("cuda", -1), ("cuda", 1)):
        try:
            out[repr(args)] = {"index": torch.device(*args).index}
        except Exception as exc:
            out[repr(args)] = _error(exc)
    return out


@probe
def device_ordinal_errors():
    count = torch.cuda.device_count()
    out = {"count": count}
    calls = {
        "to": lambda: torch.ones(1).to(f"cuda:{count}"),
        "cuda": lambda: torch.ones(1).cuda(count),
        "set_device": lambda: torch.cuda.set_device(count),
        "get_device_name": lambda: torch.cuda.get_device_name(count),
        "get_device_properties": lambda: torch.cuda.get_device_properties(count),
        "set_device_negative": lambda: torch.cuda.set_device(-1),
    }
    for name, call in calls.items():
        try:
            call()
            out[name] = {"ok": True}
        except Exception as exc:
            out[name] = {"RuntimeError": isinstance(exc, RuntimeError), "AssertionError": isinstance(exc, AssertionError)}
    return out


# serialization ----------------------------------------------------------------------

CHECKPOINTS = ("ckpt_zip.pt", "ckpt_legacy.pt")


def write_checkpoints(folder):
    """Checkpoints saved on CUDA (their storages carry 'cuda:0' location tags)."""
    state = {"weight": torch.arange(6, dtype=torch.float32, device="cuda").view(2, 3),
             "bias": torch.ones(3, device="cuda"), "host": torch.arange(3), "step": 7}
    torch.save(state, os.path.join(folder, "ckpt_zip.pt"))
    torch.save(state, os.path.join(folder, "ckpt_legacy.pt"), _use_new_zipfile_serialization=False)
    try:
        from safetensors.torch import save_file

        save_file({"weight": state["weight"], "bias": state["bias"]}, os.path.join(folder, "model.safetensors"))
    except ImportError:
        pass


def _placement(loaded):
    return {k: ({"cuda": v.is_cuda, "index": v.get_device() if v.is_cuda else None, "values": _values(v)}
                if isinstance(v, torch.Tensor) else v)
            for k, v in sorted(loaded.items())}


def _map_locations():
    return {
        "none": None,
        "cpu": "cpu",
        "cuda": "cuda",
        "cuda:0": "cuda:0",
        "torch.device": torch.device("cuda", 0),
        "dict_to_cpu": {"cuda:0": "cpu"},
        "dict_identity": {"cuda:0": "cuda:0"},
        "callable_keep": lambda storage, location: storage,
        "callable_cuda": lambda storage, location: storage.cuda(0),
        "callable_none": lambda storage, location: None,
        "invalid_ordinal": "cuda:7",
    }


def load_checkpoints(folder):
    out = {}
    for name in CHECKPOINTS:
        path = os.path.join(folder, name)
        for label, where in _map_locations().items():
            for weights_only in (True, False):
                key = f"{name} map_location={label} weights_only={weights_only}"
                try:
                    out[key] = _placement(torch.load(path, map_location=where, weights_only=weights_only))
                except Exception as exc:
                    out[key] = {"error": type(exc).__name__}
    return out


@probe
def graph_capture_replay():
    static_x = torch.zeros(4, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            static_x * 2 + 1
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = static_x * 2 + 1
    outs = []
    for step in range(3):
        static_x.copy_(torch.arange(4, dtype=torch.float32) + step)
        graph.replay()
        outs.append(_values(static_y))
    return {"replays": outs, "capturing_outside": torch.cuda.is_current_stream_capturing()}


@probe
def graph_make_graphed_callables():
    torch.manual_seed(0)
    model = nn.Linear(4, 4).cuda()
    sample = torch.ones(2, 4, device="cuda", requires_grad=True)
    eager_out = model(sample)
    eager_out.sum().backward()
    eager_grad = model.weight.grad.clone()
    model.zero_grad(set_to_none=True)
    graphed = torch.cuda.make_graphed_callables(model, (torch.zeros(2, 4, device="cuda", requires_grad=True),))
    out = graphed(sample)
    out.sum().backward()
    return {"forward_equal": torch.allclose(out, eager_out), "grad_equal": torch.allclose(model.weight.grad, eager_grad)}


@probe
def library_cuda_kernel():
    lib = torch.library.Library("oracle_probe", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CUDA")
    out = {"device": _values(torch.ops.oracle_probe.twice(torch.arange(3.0, device="cuda")))}
    try:
        out["host"] = _values(torch.ops.oracle_probe.twice(torch.arange(3.0)))
    except Exception as exc:
        out["host"] = {"error": type(exc).__name__}
    return out


@probe
def data_loader_pin_memory():
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=4, pin_memory=True)
    (batch,) = next(iter(loader))
    return {"pinned": batch.is_pinned(), "is_cuda": batch.is_cuda}


@probe
def capability():
    props = torch.cuda.get_device_properties(0)
    return {"capability": list(torch.cuda.get_device_capability()), "capability_0": list(torch.cuda.get_device_capability(0)),
            "bf16": torch.cuda.is_bf16_supported(), "available": torch.cuda.is_available(),
            "version_cuda": torch.version.cuda, "name": props.name, "major": props.major, "minor": props.minor,
            "multi_processor_count": props.multi_processor_count, "total_memory": props.total_memory}


# ----------------------------------------------------------------------------- programs

SEEDS = (0, 1, 2, 3)
MOVES = ("cuda()", "cuda(0)", "to('cuda')", "to('cuda:0')", "to('cuda', non_blocking=True)", "to(device='cuda')",
         "to(torch.device('cuda'))", "to(0)", "as_tensor", "pin_memory().to('cuda')")
AUTOCASTS = ("torch.autocast('cuda')", "torch.cuda.amp.autocast()", "torch.autocast('cuda', dtype=torch.float16)",
             "none")
FACTORY_DRAWS = ("rand", "randn", "randint", "randperm")  # device='cuda' factories: the device generator
TENSOR_DRAWS = ("uniform_", "normal")  # ops on device tensors: the generator of the tensor's device


def program(seed, length=14, tensor_draws=True):
    """A list of ops (tuples) over named host tensors h0.. and device tensors d0.. .

    `tensor_draws=False` leaves out random ops applied to existing device tensors."""
    rnd = random.Random(seed)
    draws = FACTORY_DRAWS + (TENSOR_DRAWS if tensor_draws else ())
    ops, hosts, devices = [], 0, 0
    ops.append(("host", "h0", rnd.randrange(-3, 4)))
    hosts = 1
    for _ in range(length):
        kind = rnd.choice(["host", "move", "move", "inplace", "inplace", "binary", "seed", "draw", "draw_cpu",
                           "state", "autocast"])
        if kind == "host" or (kind == "move" and hosts == 0):
            ops.append(("host", f"h{hosts}", rnd.randrange(-3, 4)))
            hosts += 1
        elif kind == "move":
            ops.append(("move", f"h{rnd.randrange(hosts)}", f"d{devices}", rnd.choice(MOVES)))
            devices += 1
        elif kind == "inplace":
            names = [f"h{i}" for i in range(hosts)] + [f"d{i}" for i in range(devices)]
            ops.append(("inplace", rnd.choice(names), rnd.choice(["add_", "sub_", "mul_", "remainder_"]),
                        rnd.choice([-2, -1, 1, 2, 3])))
        elif kind == "binary" and devices >= 1:
            a, b = rnd.randrange(devices), rnd.randrange(devices)
            ops.append(("binary", f"d{a}", f"d{b}", f"d{devices}"))
            devices += 1
        elif kind == "seed":
            ops.append(("seed", rnd.choice(["torch.manual_seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all"]),
                        rnd.choice(SEEDS)))
        elif kind == "draw":
            ops.append(("draw", f"d{devices}", rnd.choice(draws)))
            devices += 1
        elif kind == "draw_cpu":
            ops.append(("draw_cpu", f"h{hosts}"))
            hosts += 1
        elif kind == "state":
            ops.append(("state", rnd.choice(["save", "restore"]), rnd.choice(["cuda", "cpu"])))
        elif kind == "autocast" and devices >= 2:
            ops.append(("autocast", f"d{rnd.randrange(devices)}", f"d{rnd.randrange(devices)}", f"d{devices}",
                        rnd.choice(AUTOCASTS)))
            devices += 1
    return ops


def _move(x, how):
    if how == "as_tensor":
        return torch.as_tensor(x, device="cuda")
    return eval(f"x.{how}", {"torch": torch, "x": x})


def _autocast(how):
    import contextlib

    if how == "none":
        return contextlib.nullcontext()
    return eval(how, {"torch": torch})


def _draw(how):
    if how == "rand":
        return torch.rand(4, device="cuda")
    if how == "randn":
        return torch.randn(4, device="cuda")
    if how == "randint":
        return torch.randint(0, 1000, (4,), device="cuda").float()
    if how == "randperm":
        return torch.randperm(16, device="cuda")[:4].float()
    if how == "uniform_":
        return torch.empty(4, device="cuda").uniform_()
    return torch.normal(torch.zeros(4, device="cuda"), torch.ones(4, device="cuda"))


def run_program(ops):
    """Execute `ops`; return what a CUDA user can rely on (see the module docstring)."""
    torch.manual_seed(1234)
    tensors, random_names, saved = {}, set(), {}
    events = []
    for op in ops:
        kind = op[0]
        if kind == "host":
            tensors[op[1]] = torch.arange(4, dtype=torch.float32) + op[2]
        elif kind == "move":
            tensors[op[2]] = _move(tensors[op[1]], op[3])
            if op[1] in random_names:
                random_names.add(op[2])
        elif kind == "inplace":
            t = tensors[op[1]]
            getattr(t, op[2])(op[3] if op[2] != "remainder_" else abs(op[3]) + 2)
        elif kind == "binary":
            tensors[op[3]] = tensors[op[1]] + tensors[op[2]]
            if op[1] in random_names or op[2] in random_names:
                random_names.add(op[3])
        elif kind == "seed":
            eval(op[1], {"torch": torch})(op[2])
        elif kind == "draw":
            tensors[op[1]] = _draw(op[2])
            random_names.add(op[1])
        elif kind == "draw_cpu":
            tensors[op[1]] = torch.randint(-5, 6, (4,)).float()
        elif kind == "state":
            if op[1] == "save":
                saved[op[2]] = torch.cuda.get_rng_state() if op[2] == "cuda" else torch.get_rng_state()
            elif op[2] in saved:
                (torch.cuda.set_rng_state if op[2] == "cuda" else torch.set_rng_state)(saved[op[2]])
        elif kind == "autocast":
            a, b = tensors[op[1]].view(2, 2), tensors[op[2]].view(2, 2)
            with _autocast(op[4]):
                out = (a.remainder(5) @ b.remainder(5)).reshape(4)
            events.append(_dtype(out))
            tensors[op[3]] = out.float()
            if op[1] in random_names or op[2] in random_names:
                random_names.add(op[3])
    torch.cuda.synchronize()
    exact = {name: _values(t) for name, t in tensors.items() if name not in random_names}
    drawn = sorted(random_names)
    classes = {}
    for name in drawn:  # which random tensors hold identical values: the first name of each class
        value = _values(tensors[name])
        classes[name] = next((other for other in drawn if other < name and _values(tensors[other]) == value), name)
    return {"exact": exact, "random_classes": classes, "autocast_dtypes": events,
            "cpu_stream": torch.randperm(8).tolist()}


# ----------------------------------------------------------------------------- main


def observe(names=None, programs=0, files=None):
    out = {"probes": {}, "programs": {}}
    for name, fn in PROBES.items():
        if names and name not in names:
            continue
        try:
            out["probes"][name] = fn()
        except Exception as exc:
            out["probes"][name] = {"error": type(exc).__name__, "message": str(exc)[:300],
                                   "traceback": traceback.format_exc(limit=3)[-600:]}
    for seed in range(programs):
        ops = program(seed)
        try:
            out["programs"][str(seed)] = {"ops": ops, "observed": run_program(ops)}
        except Exception as exc:
            out["programs"][str(seed)] = {"ops": ops, "error": _error(exc)}
    if files:
        out["checkpoints"] = load_checkpoints(files)
    return out


def check(names, programs):
    """Compare what this machine answers with the documented expectations (run natively on CUDA)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cuda_expected import HARDWARE, differences, expected_probes, model_program

    count = torch.cuda.device_count()
    expected = {}
    for seed in range(programs):  # the model first: it must see no state the observation leaves
        expected[str(seed)] = model_program(program(seed), count)
    table = expected_probes(count, DEVICE_STRINGS)
    observed = observe(names, programs)
    problems = []
    for name, value in observed["probes"].items():
        if name not in HARDWARE:
            problems += [f"probe {name}{d}" for d in differences(value, table[name][0])]
    for seed, entry in observed["programs"].items():
        got = entry.get("observed", entry.get("error"))
        problems += [f"program {seed}{d}" for d in differences(got, expected[seed])]
    print("\n".join(problems) or f"CUDA agrees with cuda_expected.py ({len(observed['probes'])} probes, "
                                  f"{programs} programs)")
    return 1 if problems else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--record", metavar="JSON", help="write the observations with metadata to JSON")
    parser.add_argument("--observe", action="store_true", help="print the observations as JSON")
    parser.add_argument("--files", metavar="DIR", help="with --record: write CUDA checkpoints there first; "
                                                       "always: load the checkpoints found there")
    parser.add_argument("--probes", default="", help="comma-separated probe names (default: all)")
    parser.add_argument("--programs", type=int, default=200, help="generated programs to run")
    parser.add_argument("--check", action="store_true",
                        help="on a CUDA machine: compare CUDA's answers with cuda_expected.py; exit 1 on a difference")
    args = parser.parse_args(argv)
    names = [n for n in args.probes.split(",") if n]
    if args.check:
        return check(names, args.programs)
    if args.record and args.files:
        os.makedirs(args.files, exist_ok=True)
        write_checkpoints(args.files)
    result = observe(names, args.programs, args.files)
    if args.record:
        result["meta"] = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
                          "gpu": torch.cuda.get_device_name(0), "device_count": torch.cuda.device_count(),
                          "date": os.environ.get("RECORD_DATE", ""),
                          "environment": {k: v for k, v in sorted(os.environ.items())
                                          if k.startswith(("NCCL_", "CUDA_", "NVIDIA_", "TORCH_", "CUDNN_", "NV_"))}}
        with open(args.record, "w") as fh:
            json.dump(result, fh, indent=1, sort_keys=True)
    else:
        json.dump(result, sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
