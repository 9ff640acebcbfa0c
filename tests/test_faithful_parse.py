"""Issue 17, items 3, 5 and 6, and two "one concept in one place" demands.

Expected values are CUDA's: torch's own parser (``torch.device``, the same C++ on every build),
torch's documented autocast and serialization semantics, and FACTS.md's record of a real H100
(torch 2.11): ``'CUDA:0'``, ``' cuda'``, ``'cuda:01'``, ``'cuda:²'`` raise RuntimeError;
``torch.autocast('cuda')`` and ``torch.cuda.amp.autocast()`` both give float16; torch 2.13 loads
``.safetensors`` files through ``torch.load``.

* device strings: `transfer.device_grammar` against ``torch.device`` over generated strings, and
  every translated position raising torch's own error (cpu target here, the npu stand-in in a
  subprocess);
* frames: torch's own code is told from its siblings (torchvision/, torch_npu/);
* autocast on the cpu target: TRANSFER_CPU_AMP_DTYPE governs every spelling, is checked at
  install, and the substitution is said (banner, status, report);
* torch.load through torch's location hooks: every map_location form, weights_only, mmap, the
  legacy format, safetensors; uninstall removes the hook.
"""

import inspect
import io
import os
import pickle
import re
import sys
import warnings
from unittest import mock

import pytest
import torch
import torch.nn as nn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, VENDORS, clean_env, needs_standins, python
from transfer import device_grammar, frames
from transfer.devices import parse_cuda

SETTINGS = settings(max_examples=int(os.environ.get("TRANSFER_PARSE_EXAMPLES", "400")), deadline=None,
                    derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])

#: FACTS.md: these raise RuntimeError on a real H100 (torch 2.11); the rest are of the same families.
MALFORMED = ["CUDA:0", " cuda", "cuda:01", "cuda:\u00b2", "Cuda", "cuda ", "cuda:0 ", "cuda:", "cuda:+1", "cuda:-1",
             "cuda:0:0", "cuda::0", "cuda:\u0663", "cuda:0x1", "cuda,0", "\uff43uda", "cuda:99999999999"]


# --------------------------------------------------------------------------- the grammar vs torch.device

def torch_types():
    """The device type names this torch knows, from torch's own error message."""
    try:
        torch.device("no_such_device_type")
    except RuntimeError as exc:
        listed = re.search(r"Expected one of (.*) device type at start", str(exc)).group(1)
        return tuple(listed.split(", "))
    raise AssertionError("torch accepted an unknown device type")


def torch_verdict(text):
    """(type, index), or the error torch.device raises."""
    try:
        device = torch.device(text)
    except Exception as exc:  # the type is part of the verdict
        return exc
    return device.type, device.index


NAMES = st.sampled_from(["cuda", "cpu", "meta", "xla", "mps", "privateuseone", "CUDA", "Cuda", "cUDA", "npu", "_",
                         "cuda_", "cu da", "", "c", "\u0441uda", "\uff43uda", "cud\u0430"])
INDEXES = st.one_of(st.integers(0, 300).map(str), st.integers(2 ** 31 - 3, 2 ** 31 + 3).map(str),
                    st.sampled_from(["", "0", "00", "01", "007", "+1", "-1", " 1", "1 ", "\u00b2", "\u0663", "1\u00b2",
                                     "0x1", "1e3", "1_0", ":0", "0:", "9" * 30]),
                    st.text(alphabet="0123456789", min_size=1, max_size=12))
SPACE = st.sampled_from(["", "", "", " ", "\t", "\n", "\x00", "\u00a0"])


@st.composite
def device_strings(draw):
    if draw(st.integers(0, 4)) == 0:
        return draw(st.text(max_size=12))  # anything at all
    text = draw(NAMES)
    if draw(st.booleans()):
        text += ":" + draw(INDEXES)
    return draw(SPACE) + text + draw(SPACE)


@SETTINGS
@given(text=device_strings())
def test_grammar_is_torch_device(text):
    """device_grammar.parse gives torch.device's (type, index), and raises (torch's words) where it raises."""
    want = torch_verdict(text)
    try:
        got = device_grammar.parse(text, torch_types())
    except device_grammar.DeviceStringError as exc:
        assert isinstance(want, RuntimeError), (text, want)
        comparable = "\x00" not in text and not any(0xD800 <= ord(c) < 0xE000 for c in text)
        if comparable:  # torch truncates at NUL and cannot encode lone surrogates: its message differs
            assert str(exc) == str(want), text
        return
    assert got == want, text


@SETTINGS
@given(text=device_strings())
def test_parse_cuda_is_torch_device_for_strings(text):
    """A string names a CUDA device for transfer exactly when torch.device gives type 'cuda'."""
    want = torch_verdict(text)
    expected = (want[1],) if isinstance(want, tuple) and want[0] == "cuda" else None
    assert parse_cuda(text) == expected, (text, want)


@SETTINGS
@given(kind=st.sampled_from(["cuda", "cpu", "meta"]), index=st.one_of(st.none(), st.integers(0, 127)),
       number=st.integers(-3, 300))
def test_parse_cuda_devices_and_ints(kind, index, number):
    """torch.device objects: CUDA by their type; an int is a CUDA ordinal ('Tensor Attributes': a device
    ordinal is a CUDA device; a negative one is rejected later, as torch.device(-1) rejects it)."""
    device = torch.device(kind) if index is None else torch.device(kind, index)
    assert parse_cuda(device) == ((device.index,) if kind == "cuda" else None)
    assert parse_cuda(number) == (number,)
    assert parse_cuda(bool(number % 2)) is None and parse_cuda(float(number)) is None


def test_the_facts_strings():
    for text in ["CUDA:0", " cuda", "cuda:01", "cuda:\u00b2"]:  # FACTS.md: RuntimeError on a real H100
        assert parse_cuda(text) is None
        with pytest.raises(device_grammar.DeviceStringError):
            device_grammar.parse(text)
    assert parse_cuda("cuda:256") == (0,)  # torch.device('cuda:256') is cuda:0: an int8 index


def test_migrate_reads_device_strings_with_the_same_grammar():
    """`transfer scan` finds the devices torch accepts, and not the spellings it rejects."""
    from transfer.migrate import scan

    source = "\n".join(f"x.to({text!r})" for text in ["cuda", "cuda:1", *MALFORMED]) + "\ny = f'cuda:{rank}'\n"
    found = [f.line for f in scan.scan_source(source) if f.api != "compare 'cuda'"]
    assert found == [1, 2, len(MALFORMED) + 3]


# --------------------------------------------------------------------------- every translated position

def _native_autocast(text):
    """What torch's own autocast raises for device_type `text` (torch 2.0 words it otherwise than torch.device)."""
    import transfer

    autocast = torch.amp.autocast_mode.autocast
    transfer._active.registry.get_original(autocast, "__init__")(autocast.__new__(autocast), text)


def positions():
    """(name, call taking one device argument, the native call whose error is CUDA's: torch.device)."""
    x = torch.arange(4.0)
    return [
        ("Tensor.to", lambda d: x.to(d), torch.device),
        ("Tensor.to(device=)", lambda d: x.to(device=d, dtype=torch.float64), torch.device),
        ("Tensor.cuda", lambda d: x.cuda(d), torch.device),
        ("Tensor.new_zeros", lambda d: x.new_zeros(2, device=d), torch.device),
        ("torch.zeros", lambda d: torch.zeros(2, device=d), torch.device),
        ("torch.tensor", lambda d: torch.tensor([1.0], device=d), torch.device),
        ("Module.to", lambda d: nn.Linear(2, 2).to(d), torch.device),
        ("torch.Generator", lambda d: torch.Generator(d), torch.device),
        ("with torch.device", lambda d: torch.utils._device.DeviceContext(d), torch.device),
        ("torch.cuda.set_device", lambda d: torch.cuda.set_device(d), torch.device),
        ("torch.cuda.device", lambda d: torch.cuda.device(d), torch.device),
        ("torch.cuda.get_device_name", lambda d: torch.cuda.get_device_name(d), torch.device),
        ("torch.cuda.synchronize", lambda d: torch.cuda.synchronize(d), torch.device),
        ("torch.autocast", lambda d: torch.autocast(d), _native_autocast),
    ]


def check_positions():
    """Each position raises, for each malformed string, the exception (type and message) torch raises natively."""
    wrong = []
    for text in MALFORMED:
        for name, call, native in positions():
            try:
                native(text)
            except Exception as exc:
                want = exc
            else:
                raise AssertionError(f"torch accepts {text!r} in {name}")
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    call(text)
            except Exception as exc:
                if type(exc) is not type(want) or str(exc) != str(want):
                    wrong.append(f"{name}({text!r}): {type(exc).__name__}: {exc}")
            else:
                wrong.append(f"{name}({text!r}): accepted")
    return wrong


def test_every_position_raises_torchs_error_on_the_cpu_target(cpu_target):
    assert check_positions() == []


def cuda_of_another_device():
    """x.cuda('cpu') and x.cuda('meta'): CUDA's C method raises "Invalid device, must be cuda device"."""
    x = torch.ones(1)
    out = []
    for other in ("cpu", torch.device("cpu"), "meta"):
        try:
            x.cuda(other)
            out.append("accepted")
        except RuntimeError as exc:
            out.append(str(exc))
    return out


def test_cuda_of_another_device_raises_on_the_cpu_target(cpu_target):
    assert cuda_of_another_device() == ["Invalid device, must be cuda device"] * 3


def test_ddp_device_ids_raise_torchs_error_on_the_cpu_target(cpu_target, tmp_path):
    import torch.distributed as dist

    dist.init_process_group("nccl", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        for text in ["CUDA:0", "cuda:01"]:
            with pytest.raises(RuntimeError) as raised:
                nn.parallel.DistributedDataParallel(nn.Linear(2, 2).cuda(), device_ids=[text])
            assert str(raised.value) == str(torch_verdict(text))
    finally:
        dist.destroy_process_group()


STANDIN_POSITIONS = """
import sys
sys.path.insert(0, {tests!r})
import torch, transfer
transfer.install("npu")
import test_faithful_parse as t
print("WRONG", t.check_positions())
print("OTHER", t.cuda_of_another_device())
x = torch.ones(1)
print("WRAPPED", x.to("cuda:256").device, x.to("cuda:1").device)
"""


@needs_standins
def test_every_position_raises_torchs_error_on_the_npu_stand_in():
    env = clean_env(PYTHONPATH=os.pathsep.join([ROOT, VENDORS]), TRANSFER_QUIET=1, SIM_ACCEL_DEVICE_COUNT=2)
    proc = python("-c", STANDIN_POSITIONS.format(tests=os.path.join(ROOT, "tests")), env=env, timeout=300)
    assert "WRONG []" in proc.stdout, proc.stdout + proc.stderr
    assert "WRAPPED npu:0 npu:1" in proc.stdout  # torch.device('cuda:256') is cuda:0
    assert f"OTHER {['Invalid device, must be cuda device'] * 3}" in proc.stdout


# --------------------------------------------------------------------------- whose frame

def _run_as(filename, fn):
    """Call fn() from code whose file is `filename` (as if that file called it)."""
    namespace = {"fn": fn}
    exec(compile("result = fn()", filename, "exec"), namespace)
    return namespace["result"]


def test_frame_kinds_use_the_directory_separator():
    site = os.path.dirname(frames.TORCH_DIR.rstrip(os.sep))
    assert frames.file_kind(os.path.join(frames.TORCH_DIR, "nn", "modules", "batchnorm.py")) == frames.TORCH
    for sibling in ("torchvision", "torch_npu", "torchaudio", "torch-2.13.0.dist-info"):
        assert frames.file_kind(os.path.join(site, sibling, "ops.py")) == frames.USER, sibling
    parent = os.path.dirname(frames.PACKAGE_DIR.rstrip(os.sep))
    assert frames.file_kind(os.path.join(frames.PACKAGE_DIR, "devices.py")) == frames.PLUMBING
    assert frames.file_kind(os.path.join(parent, "transfer_learning", "train.py")) == frames.USER


def test_a_torchvision_like_sibling_is_the_users_code(cpu_target, caplog):
    """A placeholder warns for the user's call, not for torch's; torchvision's call is not torch's."""
    site = os.path.dirname(frames.TORCH_DIR.rstrip(os.sep))
    torch_file = os.path.join(frames.TORCH_DIR, "nn", "fake_module.py")
    sibling = os.path.join(site, "torchvision", "fake_ops.py")
    with caplog.at_level("WARNING", logger="transfer"):
        _run_as(torch_file, torch.cuda.get_device_capability)
        assert "get_device_capability" not in caplog.text
        _run_as(sibling, torch.cuda.get_device_capability)
    assert "torch.cuda.get_device_capability" in caplog.text  # the capability policy's notice
    assert frames.called_by_torch(_run_as(torch_file, lambda: sys._getframe(1)))
    assert not frames.called_by_torch(_run_as(sibling, lambda: sys._getframe(1)))


def test_the_report_names_a_sibling_packages_line(cpu_target):
    site = os.path.dirname(frames.TORCH_DIR.rstrip(os.sep))
    sibling = os.path.join(site, "torch_npu", "contrib.py")
    exec(compile("torch.arange(2.0).to('cuda:1')", sibling, "exec"), {"torch": torch})
    rows = [r for r in cpu_target.status()["translations"] if r["api"] == "Tensor.to" and r["argument"] == "'cuda:1'"]
    assert rows and rows[0]["first_site"] == f"{sibling}:1"


# --------------------------------------------------------------------------- autocast on the cpu target

SPELLINGS = {
    "torch.autocast('cuda')": lambda: torch.autocast("cuda"),
    "torch.autocast(device_type='cuda')": lambda: torch.autocast(device_type="cuda"),
    "torch.autocast('cuda', dtype=torch.float16)": lambda: torch.autocast("cuda", dtype=torch.float16),
    "torch.amp.autocast('cuda', dtype=torch.float16)": lambda: torch.amp.autocast("cuda", dtype=torch.float16),
    "torch.cuda.amp.autocast()": lambda: torch.cuda.amp.autocast(),
    "torch.cuda.amp.autocast(dtype=torch.float16)": lambda: torch.cuda.amp.autocast(dtype=torch.float16),
}


def autocast_answers():
    """{spelling: (matmul dtype, is_autocast_enabled('cuda'), the autocast dtype torch reports for CUDA)}."""
    a = torch.ones(2, 2, device="cuda")
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, make in SPELLINGS.items():
            with make():
                enabled = torch.is_autocast_enabled("cuda") if hasattr(torch, "get_autocast_dtype") \
                    else torch.is_autocast_enabled()
                reported = torch.get_autocast_dtype("cuda") if hasattr(torch, "get_autocast_dtype") \
                    else torch.get_autocast_gpu_dtype()
                out[name] = ((a @ a).dtype, enabled, reported, torch.get_autocast_gpu_dtype())
    return out


@pytest.mark.parametrize("setting, dtype", [("float16", torch.float16), ("fp16", torch.float16),
                                            (None, torch.bfloat16), ("bfloat16", torch.bfloat16)])
def test_the_variable_governs_every_autocast_spelling(install_cpu, setting, dtype):
    """On CUDA every spelling computes in float16 (FACTS); on the cpu target every spelling computes in the
    one dtype TRANSFER_CPU_AMP_DTYPE names, and torch's state queries answer as inside a CUDA region."""
    if dtype is torch.float16 and not _cpu_float16_autocast():
        pytest.skip(f"torch {torch.__version__} has no float16 CPU autocast (install refuses it: tested in "
                    "test_cpu_target)")
    install_cpu(TRANSFER_CPU_AMP_DTYPE=setting)
    answers = autocast_answers()
    assert answers == {name: (dtype, True, dtype, dtype) for name in SPELLINGS}
    with torch.autocast("cuda", dtype=torch.bfloat16):  # an explicit bfloat16 is bfloat16 everywhere
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    assert not (torch.is_autocast_enabled("cuda") if hasattr(torch, "get_autocast_dtype")
                else torch.is_autocast_enabled())  # outside every region, as on CUDA


def _cpu_float16_autocast():
    from transfer.patches.amp import _cpu_autocast_takes_float16

    return _cpu_autocast_takes_float16()


@pytest.mark.parametrize("setting", [None, "float16"])
def test_custom_fwd_cast_inputs_follows_the_variable(install_cpu, setting):
    """custom_fwd(cast_inputs=torch.float16) casts a region's inputs to the region's dtype."""
    if setting == "float16" and not _cpu_float16_autocast():
        pytest.skip(f"torch {torch.__version__} has no float16 CPU autocast")
    install_cpu(TRANSFER_CPU_AMP_DTYPE=setting)
    custom_fwd = torch.amp.custom_fwd if hasattr(torch.amp, "custom_fwd") else None
    seen = []

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        decorate = custom_fwd(device_type="cuda", cast_inputs=torch.float16) if custom_fwd \
            else torch.cuda.amp.custom_fwd(cast_inputs=torch.float16)

        class Twice(torch.autograd.Function):
            @staticmethod
            @decorate
            def forward(ctx, x):
                seen.append((x.dtype, torch.is_autocast_enabled("cpu") if custom_fwd else torch.is_autocast_cpu_enabled()))
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                return grad * 2

        with torch.autocast("cuda"):
            Twice.apply(torch.ones(2, device="cuda"))
    expected = torch.float16 if setting == "float16" else torch.bfloat16
    assert seen == [(expected, False)]  # cast to the region's dtype, then run with autocast off


@pytest.mark.parametrize("value", ["half", "float32", "bfloat16x", "1"])
def test_an_unknown_amp_dtype_is_refused_at_install(install_cpu, value):
    import transfer

    with pytest.raises(transfer.TransferError) as raised:
        install_cpu(TRANSFER_CPU_AMP_DTYPE=value)
    message = str(raised.value)
    assert f"TRANSFER_CPU_AMP_DTYPE={value!r}" in message and "bfloat16" in message and "float16" in message
    assert not transfer.status()["active"]


SAY = """
import torch, transfer
print("STATUS", transfer.status().get("substitutions"))
print(transfer.report())
"""


@pytest.mark.parametrize("setting", [None, "float16"])
def test_the_substitution_is_said_once(setting):
    """The banner line, status() and report() name the float16 -> bfloat16 substitution, once; none is said
    where no substitution is made."""
    if setting == "float16" and not _cpu_float16_autocast():
        pytest.skip(f"torch {torch.__version__} has no float16 CPU autocast")
    env = clean_env(TRANSFER_DEVICE="cpu")
    if setting:
        env["TRANSFER_CPU_AMP_DTYPE"] = setting
    proc = python("-c", SAY, env=env, timeout=120)
    said = "float16 autocast runs as bfloat16 (TRANSFER_CPU_AMP_DTYPE=float16 keeps float16)"
    banner = [line for line in proc.stderr.splitlines() if line.startswith("transfer: CUDA calls run on cpu")]
    assert len(banner) == 1, proc.stderr
    if setting == "float16":
        assert "bfloat16" not in proc.stderr + proc.stdout
        assert "STATUS {}" in proc.stdout
        return
    assert "; float16 autocast runs as bfloat16;" in banner[0]  # the banner's short form; the report's is whole
    assert "STATUS {'float16 autocast': 'bfloat16 (TRANSFER_CPU_AMP_DTYPE=float16 keeps float16)'}" in proc.stdout
    assert f"  {said}" in proc.stdout.splitlines()


def test_grad_scaler_with_bfloat16_changes_no_step(install_cpu):
    """The decision (README, amp.py): GradScaler stays as on CUDA (enabled, scale 2**16) and, with
    bfloat16, a step equals the unscaled step (a power-of-two scale is exact; no overflow)."""
    install_cpu(TRANSFER_CPU_AMP_DTYPE=None)
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).cuda() for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaler = torch.cuda.amp.GradScaler()
    x, y = torch.randn(4, 8, device="cuda"), torch.randn(4, 1, device="cuda")
    for model, optimizer, scaled in zip(models, optimizers, (True, False)):
        with torch.autocast("cuda"):
            loss = nn.functional.mse_loss(model(x).float(), y)
        if scaled:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
    assert scaler.is_enabled() and scaler.get_scale() == 2.0 ** 16
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        assert torch.equal(a, b)


# --------------------------------------------------------------------------- torch.load

def saved(obj, tag, legacy=False, path=None):
    """obj saved as torch.save does on a GPU whose storages carry location `tag`."""
    target = path if path is not None else io.BytesIO()
    with mock.patch("torch.serialization.location_tag", lambda storage: tag):
        torch.save(obj, target, _use_new_zipfile_serialization=not legacy)
    if path is None:
        target.seek(0)
    return target


LOAD = """
import io, os, sys, tempfile
sys.path.insert(0, {tests!r})
import torch, transfer
transfer.install({target!r})
import test_faithful_parse as t
print("RESULTS", t.load_results())
"""


MMAP = "mmap" in inspect.signature(torch.load).parameters  # torch 2.0 has no mmap loading


def load_results():
    """{case: where the tensor landed, or the error}: CUDA checkpoints, every map_location form."""
    import tempfile

    state = {"w": torch.arange(3.0), "cuda_version": "12.1"}
    forms = {
        "None": None, "'cuda'": "cuda", "'cuda:1'": "cuda:1", "device('cuda',1)": torch.device("cuda", 1),
        "{'cuda:0':'cuda:1'}": {"cuda:0": "cuda:1"}, "lambda: s.cuda(1)": lambda s, loc: s.cuda(1),
        "lambda: None": lambda s, loc: None, "lambda: s": lambda s, loc: s, "'cpu'": "cpu",
        "'cuda:01'": "cuda:01", "'cuda:5'": "cuda:5", "'CUDA:0'": "CUDA:0",
    }
    out = {}
    directory = tempfile.mkdtemp()
    for tag in ("cuda:0", "cuda:1", "cuda:7"):
        for legacy in (False, True):
            for mmap in ((False, True) if MMAP and not legacy else (False,)):
                path = os.path.join(directory, f"{tag.replace(':', '_')}-{legacy}.pt")
                saved(state, tag, legacy, path)
                for weights_only in (True, False):
                    for name, form in forms.items():
                        key = f"{tag} legacy={legacy} mmap={mmap} weights_only={weights_only} map_location={name}"
                        try:
                            kwargs = {"mmap": True} if mmap else {}
                            loaded = torch.load(path, map_location=form, weights_only=weights_only, **kwargs)
                            assert torch.equal(loaded["w"].cpu(), state["w"]) and loaded["cuda_version"] == "12.1"
                            out[key] = str(loaded["w"].device)
                        except (RuntimeError, pickle.UnpicklingError):  # torch 2.0's weights_only load re-raises so
                            out[key] = "RuntimeError"
    return out


def expected_load(device_type, count=2):
    """What CUDA gives on a machine with `count` devices (torch/serialization.py), as the target's device."""
    def on(index):
        if index is not None and index >= count:
            return "RuntimeError"  # "Attempting to deserialize object on CUDA device 7 but ... device_count() is 2"
        return device_type if device_type == "cpu" else f"{device_type}:{0 if index is None else index}"

    out = {}
    for tag in ("cuda:0", "cuda:1", "cuda:7"):
        saved_at = int(tag[5:])
        for legacy in (False, True):
            for mmap in ((False, True) if MMAP and not legacy else (False,)):
                for weights_only in (True, False):
                    prefix = f"{tag} legacy={legacy} mmap={mmap} weights_only={weights_only} map_location="
                    out[prefix + "None"] = on(saved_at)
                    out[prefix + "'cuda'"] = on(None)  # the current device
                    out[prefix + "'cuda:1'"] = out[prefix + "device('cuda',1)"] = on(1)
                    out[prefix + "{'cuda:0':'cuda:1'}"] = on(1 if saved_at == 0 else saved_at)
                    out[prefix + "lambda: s.cuda(1)"] = on(1)
                    out[prefix + "lambda: None"] = on(saved_at)
                    out[prefix + "lambda: s"] = out[prefix + "'cpu'"] = "cpu"
                    out[prefix + "'cuda:01'"] = "RuntimeError"  # torch.device("cuda:01") raises
                    out[prefix + "'cuda:5'"] = "RuntimeError"  # past the device count
                    out[prefix + "'CUDA:0'"] = "RuntimeError"  # "don't know how to restore data location"
    return out


def test_load_every_map_location_form_on_the_cpu_target(install_cpu):
    install_cpu(TRANSFER_CPU_DEVICES=2)
    assert load_results() == expected_load("cpu")


@needs_standins
def test_load_every_map_location_form_on_the_npu_stand_in():
    env = clean_env(PYTHONPATH=os.pathsep.join([ROOT, VENDORS]), TRANSFER_QUIET=1, SIM_ACCEL_DEVICE_COUNT=2)
    proc = python("-c", LOAD.format(tests=os.path.join(ROOT, "tests"), target="npu"), env=env, timeout=300)
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULTS "))
    got = eval(line[len("RESULTS "):])  # a dict of str -> str, printed by load_results
    want = expected_load("npu")
    assert {k: (got[k], want[k]) for k in want if got.get(k) != want[k]} == {}


def test_loads_are_reported_and_uninstall_removes_the_hook(install_cpu):
    import transfer

    before = list(torch.serialization._package_registry)
    install_cpu()
    assert len(torch.serialization._package_registry) == len(before) + 1
    torch.load(saved({"w": torch.ones(1)}, "cuda:1"), weights_only=True)
    rows = [r for r in transfer.status()["translations"] if r["api"] == "torch.load(checkpoint location)"]
    assert [(r["argument"], r["to"], r["first_site"].split(":")[0]) for r in rows] == [("'cuda:1'", "cpu", __file__)]
    transfer.uninstall()
    assert torch.serialization._package_registry == before


def _torch_loads_safetensors():
    return "safetensors" in inspect.getsource(torch.serialization.load)


needs_safetensors = pytest.mark.skipif(
    not _torch_loads_safetensors(), reason=f"torch {torch.__version__}'s torch.load does not read .safetensors "
                                          "files (torch 2.13 is the first that does)")


@needs_safetensors
def test_safetensors_load_as_natively(install_cpu, tmp_path):
    """torch.load('model.safetensors') works; a CUDA map_location lands on the target; dict and callable
    map_locations are refused with torch's own errors, as natively."""
    pytest.importorskip("safetensors", reason="safetensors is a test requirement (noxfile TEST_REQUIREMENTS)")
    from safetensors.torch import save_file

    path = str(tmp_path / "model.safetensors")
    save_file({"w": torch.arange(3.0)}, path)
    native = {}
    for name, form in (("dict", {"cuda:0": "cpu"}), ("callable", lambda s, loc: s)):
        with pytest.raises(RuntimeError) as raised:
            torch.load(path, map_location=form)
        native[name] = str(raised.value)
    install_cpu()
    assert torch.equal(torch.load(path)["w"], torch.arange(3.0))
    for form in ("cuda", "cuda:1", torch.device("cuda", 1), "cpu"):
        loaded = torch.load(path, map_location=form)["w"]
        assert loaded.device.type == "cpu" and torch.equal(loaded, torch.arange(3.0))
    for name, form in (("dict", {"cuda:0": "cpu"}), ("callable", lambda s, loc: s)):
        with pytest.raises(RuntimeError) as raised:
            torch.load(path, map_location=form)
        assert str(raised.value) == native[name]


SAFETENSORS = """
import sys, torch, transfer
transfer.install("npu")
from safetensors.torch import save_file
save_file({{"w": torch.arange(3.0)}}, {path!r})
print("DEVICES", torch.load({path!r})["w"].device, torch.load({path!r}, map_location="cuda:1")["w"].device)
"""


@needs_safetensors
@needs_standins
def test_safetensors_on_the_npu_stand_in(tmp_path):
    pytest.importorskip("safetensors", reason="safetensors is a test requirement (noxfile TEST_REQUIREMENTS)")
    env = clean_env(PYTHONPATH=os.pathsep.join([ROOT, VENDORS]), TRANSFER_QUIET=1, SIM_ACCEL_DEVICE_COUNT=2)
    proc = python("-c", SAFETENSORS.format(path=str(tmp_path / "m.safetensors")), env=env, timeout=300)
    assert "DEVICES cpu npu:1" in proc.stdout, proc.stdout + proc.stderr
