"""CUDA's answers to cuda_semantics.py, from torch's documented semantics and GPU records.

`expected_probes(count)` gives, for every probe, what the probe returns on a machine with
`count` CUDA devices. Each entry names its source: torch's documentation, torch's own CPU
behaviour where the CUDA answer is defined as that (the CPU random stream, device-string
parsing, which is the same C++ code on every build), or a value recorded on a real GPU
(tests/oracle/cuda_recorded.json, with the GPU, torch and date it was recorded on). Run on a
GPU, ``python tests/oracle/cuda_semantics.py --check`` compares these with what CUDA really
returns, so the oracle itself is checked wherever a GPU is at hand.

`model_program(ops, count)` is a reference interpreter of CUDA's semantics for the generated
programs, in plain CPU torch with explicit generators: a host-to-device move is a copy (Tensor.to:
"a copy ... with the desired device"); `torch.manual_seed` seeds the CPU generator and every CUDA
generator, `torch.cuda.manual_seed` the current device's, `manual_seed_all` every device's; device
factories and random ops on device tensors draw from the device's generator and never advance
the CPU stream; `torch.cuda.get/set_rng_state` save and restore the current device's generator;
autocast('cuda') and torch.cuda.amp.autocast() without a dtype run matmuls in float16.

Nothing here imports the package under test: it must compute the same with or without it, so
call it before a shim is installed (the test does).
"""

from __future__ import annotations

import torch

from cuda_recorded import SOURCE as GPU_RECORD
from cuda_recorded import value as recorded

#: The matmul dtype of a CUDA autocast region given no dtype, as recorded on the GPU.
AUTOCAST_DEFAULT = recorded("autocast_default_dtype")
TO_DOCS = "torch docs, Tensor.to: returns self if it already has the device and dtype, else a copy"


def _cpu_stream(seed=0, n=10):
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=g).tolist()


def _sampler_orders():
    """RandomSampler/random_split after torch.manual_seed(0): CPU semantics, the same on a CUDA machine."""
    from torch.utils.data import RandomSampler, random_split

    state = torch.get_rng_state()
    try:
        torch.manual_seed(0)
        orders = [list(RandomSampler(range(12))) for _ in range(2)]
        split = [list(s.indices) for s in random_split(range(10), [7, 3])]
    finally:
        torch.set_rng_state(state)
    return [orders, split]


def _parse(spec):
    try:
        d = torch.device(spec)
        return {"type": d.type, "index": d.index}
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc).split("\n")[0][:300]}


class _Any:
    """Matches any observed value (a message whose wording is CUDA's own, say)."""

    def __repr__(self):
        return "ANY"


ANY = _Any()
ORDINAL_ERROR = {"error": ANY, "message": ANY, "RuntimeError": True}  # "CUDA error: invalid device ordinal"


def _factory(parsed, count):
    """torch.zeros(1, device=spec) on CUDA, given how torch parsed spec."""
    if "error" in parsed:  # the same error: torch parses the string before any kernel runs
        return dict(parsed, RuntimeError=parsed["error"] == "RuntimeError")
    if parsed["type"] != "cuda":
        return {"ok": True, "is_cuda": False, "index": None}
    index = parsed["index"] or 0
    if index >= count:
        return ORDINAL_ERROR
    return {"ok": True, "is_cuda": True, "index": index}


def expected_probes(count, device_strings):
    """{probe: (expected value, source)} for a machine with `count` CUDA devices."""
    moved = ({"host": [0.0, 1.0, 2.0, 3.0], "moved": [1.0, 2.0, 3.0, 4.0], "same_object": False},
             f"{TO_DOCS}; {GPU_RECORD} (x.cuda(), x.to('cuda', non_blocking=True) leave x unchanged)")
    plain = _cpu_stream()
    stream_kept = "torch docs, torch.cuda.manual_seed / get_rng_state: they act on the CUDA generator only; " \
                  + GPU_RECORD + " (randperm after torch.manual_seed(0) identical with or without them)"
    strings = {}
    for spec in device_strings:
        parsed = _parse(spec)
        strings[spec] = {"device": parsed, "factory": _factory(parsed, count)}
    ints = {}
    for spec in (0, 1, -1, 7):
        if spec < 0:
            ints[str(spec)] = ORDINAL_ERROR  # "Device index must not be negative"
        else:
            ints[str(spec)] = _factory({"type": "cuda", "index": spec}, count)
    for args in (("cuda", 0), ("cuda", -1), ("cuda", 1)):
        ints[repr(args)] = _parse_pair(args)
    return {
        "copy_cuda": moved,
        "copy_cuda_index": moved,
        "copy_to_string": moved,
        "copy_to_string_index": moved,
        "copy_to_non_blocking": moved,
        "copy_to_device_keyword": moved,
        "copy_to_torch_device": moved,
        "copy_to_int": moved,
        "copy_to_with_dtype": moved,
        "copy_as_tensor": (moved[0], "torch docs, torch.as_tensor: a copy when the device differs"),
        "copy_pin_memory": ({"host": [0.0, 1.0, 2.0, 3.0], "pinned": [1.0, 2.0, 3.0, 4.0], "same_object": False,
                             "is_pinned": True, "host_is_pinned": False},
                            "torch docs, Tensor.pin_memory: copies the tensor to pinned memory if it is not pinned"),
        "copy_pinned_to_device": ({"host": [0.0, 1.0, 2.0, 3.0], "moved": [1.0, 2.0, 3.0, 4.0]}, TO_DOCS),
        "copy_module_cuda": ({"same_parameter": True, "host_data_unchanged": True, "param_is_cuda": True},
                             "torch docs, Module.cuda/Module.to: in place on the module; parameters keep their "
                             "identity (torch._has_compatible_shallow_copy_type CPU->CUDA), their data is a copy"),
        "copy_module_to": ({"host_data_unchanged": True}, "as copy_module_cuda"),
        "identity_device_tensor_cuda": ({"cuda_is_self": True, "to_cuda_is_self": True, "to_cuda_copy_is_self": False},
                                        f"{TO_DOCS}; Tensor.cuda: no copy if already on the device; copy=True copies"),
        "identity_device_tensor_cpu": ({"device_after": [1.0, 1.0], "host": [2.0, 2.0], "same_object": False},
                                       "torch docs, Tensor.cpu: a copy in CPU memory (self only if already there)"),
        "identity_host_cpu": ({"cpu_is_self": True, "to_cpu_is_self": True}, TO_DOCS),
        "mixing_host_and_device": ({"sum": {"error": "RuntimeError"}, "scalar_host": [2.0, 2.0]},
                                   "torch: 'Expected all tensors to be on the same device', except 0-dim CPU tensors"),
        "is_cuda_of_host_and_device": ({"host": False, "device": True, "device_type_host": "cpu"},
                                       "torch docs, Tensor.is_cuda: True if the tensor is stored on the GPU"),
        "rng_cuda_seed_leaves_cpu_stream": ({"plain": plain, "after_cuda_manual_seed": plain,
                                             "after_cuda_seed": plain}, stream_kept),
        "rng_cuda_state_calls_leave_cpu_stream": ({"plain": plain, "after_state_calls": plain}, stream_kept),
        "rng_device_factories_leave_cpu_stream": ({"plain": plain, "after_device_draws": plain},
                                                  "device factories draw from the CUDA generator"),
        "rng_device_ops_leave_cpu_stream": ({"plain": plain, "after_device_ops": plain},
                                            "random ops on CUDA tensors draw from the CUDA generator"),
        "rng_sampler_order_with_device_draws": ({"plain": _sampler_orders(), "with_device_draws": _sampler_orders()},
                                                "RandomSampler seeds itself from the CPU stream, which device "
                                                "draws do not advance"),
        "rng_cuda_state_round_trip": ({"repeat_after_restore": True, "next_differs": True, "state_dtype": "uint8",
                                       "state_device": "cpu", "state_dim": 1},
                                      "torch docs, torch.cuda.get_rng_state: a ByteTensor (on the CPU)"),
        "rng_cuda_seed_repeats": ({"same_seed_same_draws": True, "other_seed_differs": True,
                                   "manual_seed_all_same": True}, "torch docs, torch.cuda.manual_seed(_all)"),
        "rng_manual_seed_seeds_device": ({"torch_manual_seed_repeats_device_draws": True, "cuda_initial_seed": 3},
                                         "torch docs, torch.manual_seed: seeds the RNG for all devices"),
        "rng_initial_seeds_separate": ({"cpu": 7, "cuda": 5}, "torch.initial_seed / torch.cuda.initial_seed: "
                                                              "one generator each"),
        "rng_state_all": ({"count": count, "dtypes": ["uint8"], "round_trip": True},
                          "torch docs, torch.cuda.get_rng_state_all: one state per device"),
        "rng_device_generator": ({"repeat": True, "initial_seed": 2, "cpu_stream_untouched": True},
                                 "torch.Generator(device='cuda') is a generator of its own"),
        "rng_fork_rng_restores_device_state": ({"restored": True}, "torch docs, torch.random.fork_rng"),
        "rng_checkpoint_resume": ({"cpu_resumes": True, "device_resumes": True},
                                  "get/set_rng_state(_all) round-trip through torch.save"),
        "amp_autocast_cuda_default": ({"mm": AUTOCAST_DEFAULT["torch.autocast('cuda')"]},
                                      GPU_RECORD + ": torch.autocast('cuda') gives float16"),
        "amp_autocast_device_type_keyword": ({"mm": "float16"}, "as amp_autocast_cuda_default"),
        "amp_cuda_amp_autocast": ({"mm": AUTOCAST_DEFAULT["torch.cuda.amp.autocast()"]},
                                  GPU_RECORD + ": torch.cuda.amp.autocast() gives float16"),
        "amp_autocast_float16_explicit": ({"mm": "float16"}, "torch docs, torch.autocast(dtype=)"),
        "amp_autocast_bfloat16": ({"mm": "bfloat16"}, "torch docs, torch.autocast(dtype=)"),
        "amp_nested_disabled": ({"mm": "float32"}, "torch docs, autocast(enabled=False) inside a region"),
        "amp_autocast_state_queries": ({"is_enabled_cuda": _is_enabled_answer(), "gpu_dtype": "float16",
                                        "dtype_cuda": "float16" if hasattr(torch, "get_autocast_dtype") else None},
                                       "torch docs, torch.is_autocast_enabled(device_type), get_autocast_dtype"),
        "amp_values_exact": ({"values": [[3.0, 4.0], [11.0, 16.0]], "dtype": "float16"},
                             "integer matmul, exact in float16"),
        "amp_grad_scaler": ({"scale": 65536.0, "scaled": 131072.0, "enabled": True},
                            "torch docs, GradScaler: init_scale=2.**16"),
        "device_strings": (strings, "c10/core/Device.cpp parses device strings on every build; torch.zeros on a "
                                    "CUDA ordinal past the device count raises RuntimeError"),
        "device_ints": (ints, "an int device is a CUDA ordinal (torch docs, 'Tensor Attributes')"),
        # What CUDA raises is caught by `except RuntimeError` / `except AssertionError`; an error that is
        # both (transfer's InvalidDeviceError) is caught by the same handlers, so the other flag is free.
        "device_ordinal_errors": ({"count": count, "to": {"RuntimeError": True, "AssertionError": ANY},
                                   "cuda": {"RuntimeError": True, "AssertionError": ANY},
                                   "set_device": {"RuntimeError": True, "AssertionError": ANY},
                                   "get_device_name": {"RuntimeError": ANY, "AssertionError": True},
                                   "get_device_properties": {"RuntimeError": ANY, "AssertionError": True},
                                   "set_device_negative": {"ok": True}},
                                  "torch.cuda: 'invalid device ordinal' (RuntimeError); _get_device_index's "
                                  "'Invalid device id' (AssertionError); set_device(-1) is a no-op"),
        "graph_capture_replay": ({"replays": [[1.0, 3.0, 5.0, 7.0], [3.0, 5.0, 7.0, 9.0], [5.0, 7.0, 9.0, 11.0]],
                                  "capturing_outside": False},
                                 "torch docs, CUDA graphs: replay re-runs the captured work on the static tensors"),
        "graph_make_graphed_callables": ({"forward_equal": True, "grad_equal": True},
                                         "torch docs, make_graphed_callables: same results as the eager callable"),
        "library_cuda_kernel": ({"device": [0.0, 2.0, 4.0], "host": {"error": "NotImplementedError"}},
                                "torch.library: a kernel registered for CUDA runs for CUDA tensors only"),
        "data_loader_pin_memory": ({"pinned": True, "is_cuda": False},
                                   "torch docs, DataLoader(pin_memory=True): batches in pinned host memory"),
    }


def _parse_pair(args):
    try:
        return {"index": torch.device(*args).index}
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc).split("\n")[0][:300]}


def _is_enabled_answer():
    try:
        torch.is_autocast_enabled("cuda")
    except TypeError:  # torch < 2.4: no device_type argument
        return None
    return True


#: Probes whose values depend on the hardware: recorded, never compared.
HARDWARE = frozenset({"capability"})


# ----------------------------------------------------------------------------- programs


class Model:
    """CUDA's semantics for cuda_semantics.run_program, on CPU generators (module docstring)."""

    def __init__(self, count):
        self.cpu = torch.Generator()
        self.cuda = [torch.Generator() for _ in range(count)]
        self.current = 0
        self.seed_all(1234)

    def seed_all(self, seed):
        self.cpu.manual_seed(seed)
        for g in self.cuda:
            g.manual_seed(seed)

    def draw(self, how):
        g = self.cuda[self.current]
        if how == "rand":
            return torch.rand(4, generator=g)
        if how == "randn":
            return torch.randn(4, generator=g)
        if how == "randint":
            return torch.randint(0, 1000, (4,), generator=g).float()
        if how == "randperm":
            return torch.randperm(16, generator=g)[:4].float()
        if how == "uniform_":
            return torch.empty(4).uniform_(generator=g)
        return torch.normal(torch.zeros(4), torch.ones(4), generator=g)


def model_program(ops, count):
    """What `cuda_semantics.run_program(ops)` returns on CUDA (up to the values of random draws)."""
    model = Model(count)
    tensors, random_names, saved, events = {}, set(), {}, []
    for op in ops:
        kind = op[0]
        if kind == "host":
            tensors[op[1]] = torch.arange(4, dtype=torch.float32) + op[2]
        elif kind == "move":
            tensors[op[2]] = tensors[op[1]].clone()  # host-to-device: a copy
            if op[1] in random_names:
                random_names.add(op[2])
        elif kind == "inplace":
            getattr(tensors[op[1]], op[2])(op[3] if op[2] != "remainder_" else abs(op[3]) + 2)
        elif kind == "binary":
            tensors[op[3]] = tensors[op[1]] + tensors[op[2]]
            if op[1] in random_names or op[2] in random_names:
                random_names.add(op[3])
        elif kind == "seed":
            if op[1] == "torch.manual_seed":
                model.seed_all(op[2])
            elif op[1] == "torch.cuda.manual_seed":
                model.cuda[model.current].manual_seed(op[2])
            else:
                for g in model.cuda:
                    g.manual_seed(op[2])
        elif kind == "draw":
            tensors[op[1]] = model.draw(op[2])
            random_names.add(op[1])
        elif kind == "draw_cpu":
            tensors[op[1]] = torch.randint(-5, 6, (4,), generator=model.cpu).float()
        elif kind == "state":
            g = model.cuda[model.current] if op[2] == "cuda" else model.cpu
            if op[1] == "save":
                saved[op[2]] = g.get_state()
            elif op[2] in saved:
                g.set_state(saved[op[2]])
        elif kind == "autocast":
            a, b = tensors[op[1]].view(2, 2), tensors[op[2]].view(2, 2)
            out = (a.remainder(5) @ b.remainder(5)).reshape(4)
            dtype = "float32" if op[4] == "none" else "float16"
            events.append(dtype)
            tensors[op[3]] = out.to(getattr(torch, dtype)).float()
            if op[1] in random_names or op[2] in random_names:
                random_names.add(op[3])
    exact = {name: t.tolist() for name, t in tensors.items() if name not in random_names}
    drawn = sorted(random_names)
    classes = {}
    for name in drawn:
        value = tensors[name].tolist()
        classes[name] = next((o for o in drawn if o < name and tensors[o].tolist() == value), name)
    return {"exact": exact, "random_classes": classes, "autocast_dtypes": events,
            "cpu_stream": torch.randperm(8, generator=model.cpu).tolist()}


def differences(observed, expected, path=""):
    """Readable paths where `observed` differs from `expected` (floats compared exactly)."""
    if isinstance(expected, dict) and isinstance(observed, dict):
        out = []
        for key in sorted(set(expected) | set(observed), key=str):
            if key not in observed:
                out.append(f"{path}/{key}: missing (expected {expected[key]!r})")
            elif key not in expected:
                out.append(f"{path}/{key}: unexpected {observed[key]!r}")
            else:
                out.extend(differences(observed[key], expected[key], f"{path}/{key}"))
        return out
    if isinstance(expected, (list, tuple)) and isinstance(observed, (list, tuple)):
        if len(expected) == len(observed):
            return [d for i, (o, e) in enumerate(zip(observed, expected)) for d in differences(o, e, f"{path}[{i}]")]
    if expected is not ANY and observed != expected:
        return [f"{path}: {observed!r} != {expected!r}"]
    return []
