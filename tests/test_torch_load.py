"""torch.load of CUDA checkpoints through torch's location hooks, as torch/serialization.py does on CUDA.

Every map_location form (None, strings, torch.device, dicts, callables), weights_only, mmap, the legacy
format, on the cpu target and the npu stand-in; loads are reported and uninstall removes the hook;
.safetensors files load as natively (torch 2.13 reads them through torch.load; torch 2.11 raised
UnpicklingError on a real GPU: tests/oracle/cuda_recorded.json, "torch_load_of_safetensors").
"""

import inspect
import io
import os
import pickle
from unittest import mock

import pytest
import torch

from conftest import ROOT, VENDORS, clean_env, needs_standins, python


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
import test_torch_load as t
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
