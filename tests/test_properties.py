"""Property-based equivalence: generated argument forms of every device-taking
patched API give, under transfer, the result, the error type and the aliasing of the hand
port (the same call with the target's device written in). The cpu target runs here; the
sdaa stand-in runs the same properties in a subprocess (never imported into pytest).

Profiles: "ci" (the default, ~30 s for the module on 2 busy cores) and "long" (local
runs): TRANSFER_HYPOTHESIS_PROFILE=long python -m pytest tests/test_properties.py
"""

import io
import os
import pickle
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, VENDORS, clean_env, needs_standins, python

settings.register_profile("ci", max_examples=50, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("long", max_examples=400, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("TRANSFER_HYPOTHESIS_PROFILE", "ci"))

COUNT = 2  # devices the cpu target reports here (TRANSFER_CPU_DEVICES)


class Port:
    """How the hand port spells a device on the target: 'cuda:1' -> 'cpu' or 'sdaa:1'."""

    def __init__(self, device_type, count):
        self.device_type, self.count = device_type, count

    def spell(self, kind, index):
        """(CUDA spelling, hand-port spelling) of one device argument."""
        if kind == "int":
            return index, (index if self.device_type != "cpu" else "cpu")
        target = self.device_type if self.device_type == "cpu" or index is None else f"{self.device_type}:{index}"
        cuda = "cuda" if index is None else f"cuda:{index}"
        if kind == "torch.device":
            return torch.device(cuda), torch.device(target)
        return cuda, target

    def valid(self, index):
        return index is None or 0 <= index < self.count

    def copies(self, cuda, target):
        """Whether the hand port of a move to `cuda` must say copy=True: on the cpu target the
        target device is host memory, and a move to CUDA copies (as on CUDA)."""
        return self.device_type == "cpu" and cuda is not target


#: CUDA spellings torch.device rejects ('CUDA:0', ' cuda', 'cuda:01', 'cuda:²' raised on a real GPU:
#: tests/oracle/cuda_recorded.json, "device_strings_rejected").
MALFORMED = ["CUDA:0", "Cuda", " cuda", "cuda ", "cuda:01", "cuda:\u00b2", "cuda:+1", "cuda:"]


@st.composite
def devices(draw, port):
    """(cuda, port, valid): a CUDA device argument, its hand port, and whether CUDA accepts it."""
    kind = draw(st.sampled_from(["str", "malformed", "torch.device", "int", "other"]))
    if kind == "other":  # not a CUDA device: passed through untouched
        other = draw(st.sampled_from(["cpu", torch.device("cpu"), "meta"]))
        return other, other, True
    if kind == "malformed":  # torch rejects it (torch.device raises): the hand port is the same call, which raises
        spelled = draw(st.sampled_from(MALFORMED))
        return spelled, spelled, True
    index = draw(st.integers(-2, port.count + 1) if kind == "int" else
                 st.one_of(st.none(), st.integers(0, port.count + 1)))
    if kind == "int" and index is None:
        index = 0
    cuda, target = port.spell(kind, index)
    return cuda, target, port.valid(index)


DTYPES = st.sampled_from([None, torch.float32, torch.float64, torch.float16, torch.int64])
FLAGS = st.sampled_from([None, False, True])  # None: not passed
FORMATS = st.sampled_from([None, torch.preserve_format, torch.contiguous_format, torch.channels_last])


def outcome(thunk):
    try:
        return "ok", thunk()
    except Exception as exc:  # the type is what must match
        return "error", exc


def same(got, want, inputs=()):
    """Structural equality: tensors by dtype, device, shape, stride, values and aliasing."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), got
        assert (got.dtype, got.device, got.shape) == (want.dtype, want.device, want.shape)
        if want.layout == torch.strided:
            assert got.stride() == want.stride()
        for original in inputs:
            assert (got is original) == (want is original), "aliasing differs"
        assert got.layout == want.layout
        if want.layout != torch.strided and want.device.type != "cpu":
            return  # the stand-ins cannot copy sparse compressed layouts back; shape and layout agree
        if want.device.type != "meta":
            g, w = got.cpu(), want.cpu()
            if w.layout != torch.strided:
                g, w = g.to_dense(), w.to_dense()
            assert torch.equal(g, w) or (g.is_floating_point() and torch.allclose(g, w, equal_nan=True))
    elif isinstance(want, dict):
        assert type(got) is type(want) and list(got) == list(want)
        for key in want:
            same(got[key], want[key], inputs)
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w, inputs)
    elif isinstance(want, torch.nn.Module):
        assert (got is inputs[0]) == (want is inputs[0])
        same(list(got.parameters()), list(want.parameters()))
    elif isinstance(want, torch.Generator):
        assert got.device == want.device
    else:
        assert got == want


def check(shim, port, valid, inputs=(), seed=0):
    """`shim` under transfer behaves as `port` (the hand port run natively)."""
    torch.manual_seed(seed)
    got = outcome(shim)
    if not valid:  # CUDA rejects the ordinal: every target raises its RuntimeError
        assert got[0] == "error" and isinstance(got[1], RuntimeError), got
        return
    torch.manual_seed(seed)
    want = outcome(port)
    if want[0] == "error":
        assert got[0] == "error" and isinstance(got[1], type(want[1])), (got, want)
    else:
        assert got[0] == "ok", got[1]
        same(got[1], want[1], inputs)


def _native(owner, name):
    """torch's original of a patched attribute (the hand port calls it)."""
    import transfer

    return transfer._active.registry.get_original(owner, name)


# --- the properties, written for any target ---------------------------------

def tensor_to(port, data):
    device, target, valid = data.draw(devices(port))
    dtype, non_blocking, copy, fmt = data.draw(DTYPES), data.draw(FLAGS), data.draw(FLAGS), data.draw(FORMATS)
    named = [("device", device, target), ("dtype", dtype, dtype), ("non_blocking", non_blocking, non_blocking),
             ("copy", copy, copy)]
    while named and named[-1][1] is None:
        named.pop()
    if named and device is None:
        named = named[1:]  # x.to(dtype, non_blocking, copy): the dtype-first overload
    positional = data.draw(st.integers(0, len(named)))
    cuda_args = [n[1] for n in named[:positional]]
    port_args = [n[2] for n in named[:positional]]
    cuda_kw = {n[0]: n[1] for n in named[positional:] if n[1] is not None}
    port_kw = {n[0]: n[2] for n in named[positional:] if n[1] is not None}
    if fmt is not None:
        cuda_kw["memory_format"] = port_kw["memory_format"] = fmt
    if device is not None and port.copies(device, target):
        if len(port_args) >= 4:
            port_args[3] = True
        else:
            port_kw["copy"] = True
    x = torch.arange(16.0).reshape(1, 1, 4, 4)
    native = _native(torch.Tensor, "to")
    check(lambda: x.to(*cuda_args, **cuda_kw), lambda: native(x, *port_args, **port_kw), valid, (x,))


def tensor_cuda(port, data):
    device, target, valid = data.draw(devices(port))
    if device in ("cpu", "meta") or device == torch.device("cpu"):
        return  # .cuda('cpu') is an error on CUDA too; not a port
    non_blocking, fmt = data.draw(FLAGS), data.draw(FORMATS)
    kwargs = {} if non_blocking is None else {"non_blocking": non_blocking}
    if fmt is not None:
        kwargs["memory_format"] = fmt
    keyword = data.draw(st.booleans())
    x = torch.arange(16.0).reshape(1, 1, 4, 4)
    shim = (lambda: x.cuda(device=device, **kwargs)) if keyword else (lambda: x.cuda(device, **kwargs))
    native_to = (getattr(torch._C, "TensorBase", None) or torch._C._TensorBase).to  # torch < 2.3: _TensorBase
    port_kwargs = dict(kwargs, copy=True) if port.copies(device, target) else kwargs
    check(shim, lambda: native_to(x, target, **port_kwargs), valid, (x,))


NEW_ARGS = {"new_empty": (2,), "new_empty_strided": ((2,), (1,)), "new_zeros": (2,), "new_ones": (2,),
            "new_full": ((2,), 3.0), "new_tensor": ([1.0, 2.0],)}


def tensor_new(port, data):
    name = data.draw(st.sampled_from(sorted(NEW_ARGS)))
    device, target, valid = data.draw(devices(port))
    dtype = data.draw(DTYPES)
    extra = {} if dtype is None else {"dtype": dtype}
    x = torch.ones(3)
    args = NEW_ARGS[name]
    native = _native(torch.Tensor, name)
    empty = name.startswith("new_empty")

    def shim():
        result = getattr(x, name)(*args, device=device, **extra)
        return result.zero_() if empty and result.device.type != "meta" else result

    def hand_port():
        result = native(x, *args, device=target, **extra)
        return result.zero_() if empty and result.device.type != "meta" else result

    check(shim, hand_port, valid, (x,))


def _factory_args():
    t, ti = torch.ones(2, 2), torch.ones(2, dtype=torch.int64)
    return {
        "arange": (4,), "as_tensor": ([1.0, 2.0],), "asarray": ([1.0, 2.0],), "bartlett_window": (4,),
        "blackman_window": (4,), "empty": (2,), "empty_like": (t,), "empty_permuted": ((2, 3), (1, 0)),
        "empty_quantized": ([2], torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.quint8)),
        "empty_strided": ((2, 2), (2, 1)), "eye": (3,), "full": ((2,), 1.5), "full_like": (t, 2.0),
        "hamming_window": (4,), "hann_window": (4,), "kaiser_window": (4,), "linspace": (0, 1, 5),
        "logspace": (0, 1, 5), "ones": (2,), "ones_like": (t,), "rand": (2,), "rand_like": (t,),
        "randint": (0, 10, (3,)), "normal": (0.0, 1.0, (3,)), "randint_like": (ti, 10), "randn": (2,), "randn_like": (t,), "randperm": (5,),
        "range": (0, 3), "scalar_tensor": (2.0,),
        "sparse_bsc_tensor": (torch.tensor([0, 1]), torch.tensor([0]), torch.ones(1, 2, 2), (2, 2)),
        "sparse_bsr_tensor": (torch.tensor([0, 1]), torch.tensor([0]), torch.ones(1, 2, 2), (2, 2)),
        "sparse_compressed_tensor": (torch.tensor([0, 1, 2]), torch.tensor([0, 1]), torch.ones(2), (2, 2)),
        "sparse_coo_tensor": (torch.tensor([[0, 1], [1, 0]]), torch.ones(2), (2, 2)),
        "sparse_csc_tensor": (torch.tensor([0, 1, 2]), torch.tensor([0, 1]), torch.ones(2), (2, 2)),
        "sparse_csr_tensor": (torch.tensor([0, 1, 2]), torch.tensor([0, 1]), torch.ones(2), (2, 2)),
        "tensor": ([1.0, 2.0],), "tril_indices": (3, 3), "triu_indices": (3, 3), "zeros": (2,),
        "zeros_like": (t,), "fftfreq": (4,), "rfftfreq": (4,), "nested_tensor": ([torch.ones(2), torch.ones(3)],),
        "fill": (t, 1.0), "vander": (torch.ones(3),),  # torch 2.0 lists these (no device= natively either)
    }


_FACTORY_KWARGS = {"sparse_compressed_tensor": {"layout": torch.sparse_csr}}
_UNINITIALISED = {"empty", "empty_like", "empty_permuted", "empty_strided", "empty_quantized"}


def factory_records():
    import transfer

    return [r for r in transfer._active.registry.records() if r.name.startswith("factories.")]


def factories(port, data):
    records = factory_records()
    table = _factory_args()
    missing = sorted({r.attribute for r in records} - set(table))
    assert not missing, f"add sample arguments for the new factories {missing} to _factory_args"
    record = data.draw(st.sampled_from(records))
    device, target, valid = data.draw(devices(port))
    args, kwargs = table[record.attribute], dict(_FACTORY_KWARGS.get(record.attribute, {}))
    shim_fn, native = getattr(record.owner, record.attribute), record.original

    def run(fn, where):
        result = fn(*args, device=where, **kwargs)
        if record.attribute in _UNINITIALISED:
            return (result.shape, result.dtype, result.device)
        if record.attribute == "nested_tensor":
            return [t for t in result.unbind()]
        return result

    check(lambda: run(shim_fn, device), lambda: run(native, target), valid)


def module_to(port, data):
    device, target, valid = data.draw(devices(port))
    dtype, non_blocking = data.draw(st.sampled_from([None, torch.float64])), data.draw(FLAGS)
    kwargs = {} if non_blocking is None else {"non_blocking": non_blocking}
    if dtype is not None:
        kwargs["dtype"] = dtype
    keyword = data.draw(st.booleans())
    shim_model, port_model = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    port_model.load_state_dict(shim_model.state_dict())
    native = _native(torch.nn.Module, "to")
    if keyword:
        shim = lambda: shim_model.to(device=device, **kwargs)  # noqa: E731
        hand_port = lambda: native(port_model, device=target, **kwargs)  # noqa: E731
    else:
        shim = lambda: shim_model.to(device, **kwargs)  # noqa: E731
        hand_port = lambda: native(port_model, target, **kwargs)  # noqa: E731
    torch.manual_seed(0)
    got, want = outcome(shim), outcome(hand_port)
    if not valid:
        assert got[0] == "error" and isinstance(got[1], RuntimeError)
        return
    assert got[0] == want[0], (got, want)
    if got[0] == "ok":
        assert (got[1] is shim_model) and (want[1] is port_model)
        same(list(shim_model.parameters()), list(port_model.parameters()))


@st.composite
def containers(draw, depth=2):
    leaf = st.builds(lambda n, dt: torch.arange(float(n)).to(dt), st.integers(1, 3),
                     st.sampled_from([torch.float32, torch.float64]))
    if depth == 0:
        return draw(leaf)
    child = containers(depth - 1)
    return draw(st.one_of(leaf, st.lists(child, max_size=2), st.tuples(child, child),
                          st.dictionaries(st.sampled_from(["w", "cuda_version", "opt"]), child, max_size=2)))


def _has_tensor(value):
    if isinstance(value, torch.Tensor):
        return True
    items = value.values() if isinstance(value, dict) else value
    return isinstance(value, (dict, list, tuple)) and any(_has_tensor(v) for v in items)


def load_map_location(port, data):
    """torch.load of nested containers with map_location as str/int/device/None/dict/callable."""
    payload = data.draw(containers())
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    form = data.draw(st.sampled_from(["none", "device", "dict", "callable-none", "callable-device"]))
    if form == "none":
        cuda_map, port_map, valid = None, None, True
    elif form == "device":
        cuda_map, port_map, valid = data.draw(devices(port))
        if isinstance(cuda_map, int):  # not a map_location torch.load accepts: the same error natively
            port_map, valid = cuda_map, True
    elif form == "dict":  # locations are strings in a map_location dict
        device, target, valid = data.draw(devices(port).filter(lambda d: isinstance(d[0], str)))
        cuda_map, port_map = {"cpu": device}, {"cpu": target}
    elif form == "callable-none":
        cuda_map = port_map = (lambda storage, location: None)
        valid = True
    else:  # the idiom map_location=lambda s, loc: s.cuda(rank)
        index = data.draw(st.one_of(st.none(), st.integers(0, port.count + 1)))
        valid = port.valid(index)
        cuda_map = lambda s, loc: s.cuda(index)  # noqa: E731
        if port.device_type == "cpu":
            port_map = lambda s, loc: s.cpu()  # noqa: E731
        else:
            port_map = lambda s, loc: getattr(s, port.device_type)(index)  # noqa: E731
    if not _has_tensor(payload):
        valid = True  # as on CUDA: a bad location only fails when a storage is placed
    positional = data.draw(st.booleans())
    native = _native(torch, "load")

    def load(fn, where):
        buffer.seek(0)
        try:
            return fn(buffer, where, weights_only=True) if positional else fn(buffer, map_location=where,
                                                                                weights_only=True)
        except pickle.UnpicklingError as exc:  # torch 2.0 re-raises a RuntimeError in weights_only load as this
            raise RuntimeError(str(exc)) from exc

    check(lambda: load(torch.load, cuda_map), lambda: load(native, port_map), valid)


def generator_and_device_context(port, data):
    device, target, valid = data.draw(devices(port))
    if device == "meta":
        return  # no meta generators, natively either
    native_gen = torch._C.Generator
    check(lambda: torch.Generator(device), lambda: native_gen(target), valid)
    native_init = _native(torch.utils._device.DeviceContext, "__init__")

    def in_context(make):
        context = make()
        with context:
            return torch.ones(2) + 1

    def port_context():
        context = torch.utils._device.DeviceContext.__new__(torch.utils._device.DeviceContext)
        native_init(context, target)
        return context

    make = (lambda: torch.device(device)) if isinstance(device, str) and device.islower() else \
        (lambda: torch.utils._device.DeviceContext(device))
    check(lambda: in_context(make), lambda: in_context(port_context), valid)


PROPERTIES = [tensor_to, tensor_cuda, tensor_new, factories, module_to, load_map_location,
              generator_and_device_context]


# --- the cpu target, in this process -------------------------------------------

@pytest.fixture
def cpu_port(install_cpu):
    install_cpu(TRANSFER_CPU_DEVICES=COUNT)
    return Port("cpu", COUNT)


@pytest.mark.parametrize("prop", PROPERTIES, ids=lambda p: p.__name__)
def test_cpu_target_matches_the_hand_port(cpu_port, prop):
    given(data=st.data())(lambda data: prop(cpu_port, data))()


# --- the vendor stand-in, in a subprocess ---------------------------------------

VENDOR_RUN = """
import sys
sys.path.insert(0, {tests!r})
import torch, transfer
transfer.install({vendor!r})
from hypothesis import given, strategies as st
import test_properties as p
port = p.Port({vendor!r}, torch.{vendor}.device_count())
for prop in p.PROPERTIES:
    given(data=st.data())(lambda data: prop(port, data))()
    print("PASSED", prop.__name__, flush=True)
"""


@needs_standins
def test_sdaa_stand_in_matches_the_hand_port():
    code = VENDOR_RUN.format(tests=os.path.join(ROOT, "tests"), vendor="sdaa")
    env = clean_env(PYTHONPATH=os.pathsep.join([ROOT, VENDORS]), TRANSFER_QUIET=1,
                    TRANSFER_HYPOTHESIS_PROFILE=os.environ.get("TRANSFER_HYPOTHESIS_PROFILE", "ci"))
    proc = python("-c", code, env=env, timeout=900)
    assert proc.stdout.count("PASSED") == len(PROPERTIES), proc.stdout + proc.stderr
