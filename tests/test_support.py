"""The support table against the patches: every torch.cuda name cuda_namespace
replaces behaves on every profile as the table classes it."""

import inspect
import logging
import re
import types

import pytest
import torch

import transfer
from transfer import support
from transfer.cpu import runtime as cpu_runtime
from transfer.devices import Target
from transfer.errors import UnsupportedCudaAPI
from transfer.patches import PatchContext, cuda_namespace
from transfer.profiles import PROFILES
from transfer.registry import Registry

from conftest import NO_XPU_STANDIN, XPU_STANDIN, needs_standins


def _vendor_module(profile):
    """A stand-in torch.<device> holding exactly the table's names, each a marker."""
    module = types.SimpleNamespace()
    for name in PROFILES[profile].cuda_api:
        if name == "default_generators":
            setattr(module, name, ())
            continue

        def marker(*args, _name=name, **kwargs):
            return ("vendor", _name)

        if name == "get_device_capability":
            marker = lambda device=None: None  # noqa: E731  torch_npu without its variable
        setattr(module, name, marker)
    module.device_count = lambda: 1
    return module


def _runs_the_target(obj, native, depth=4) -> bool:
    """`obj` (torch.cuda.<name> under the shim) is, copies, subclasses or calls the target's `native`.

    Replacements name themselves as the CUDA originals (their __wrapped__ is CUDA's), so
    this follows the code: a function installed as a copy shares its code object, a class becomes
    a same-behaving subclass, a device-translating layer holds the target's function in its closure.
    """
    if obj is native:
        return True
    twin = getattr(obj, "__transfer_python__", None)  # a C stand-in (transfer/fastcalls.py) runs its twin's code
    if twin is not None:
        return _runs_the_target(twin, native, depth)
    if not callable(native):
        return obj == native  # data (the cpu target's default_generators: one generator per device)
    if inspect.isclass(obj) and inspect.isclass(native) and issubclass(obj, native):
        return True
    if getattr(obj, "__code__", None) is getattr(native, "__code__", 0):
        return True
    cells = getattr(obj, "__closure__", None) or ()
    return depth > 0 and any(_runs_the_target(cell.cell_contents, native, depth - 1) for cell in cells
                             if callable(cell.cell_contents))


@pytest.fixture(params=list(PROFILES))
def patched(request, monkeypatch):
    """torch.cuda patched by cuda_namespace alone for one profile (cpu: the real runtime)."""
    transfer.uninstall()
    profile = PROFILES[request.param]
    runtime = cpu_runtime if profile.is_cpu else _vendor_module(profile.name)
    registry = Registry()
    ctx = PatchContext(profile=profile, registry=registry, target=Target(profile.device_type, lambda: 1),
                       runtime=runtime)
    cuda_namespace.apply(ctx)
    yield profile, runtime, registry
    registry.revert_all()


def test_every_patched_name_behaves_as_the_table_says(patched, caplog):
    profile, runtime, registry = patched
    names = [r.attribute for r in registry.records()  # torch.version.cuda too on a CUDA build: not torch.cuda's
             if r.name.startswith("cuda_namespace.") and r.owner is torch.cuda and r.attribute != "nvtx"]
    assert len(names) > 60
    caplog.set_level(logging.WARNING, logger="transfer")
    for name in names:
        assert name in support.CUDA_NAMES, f"torch.cuda.{name} is patched but missing from the support table"
        expected = support.lookup(profile.name, f"torch.cuda.{name}")
        obj = getattr(torch.cuda, name)
        native = getattr(runtime, name, None)
        caplog.clear()
        if expected.cls == support.UNSUPPORTED:
            with pytest.raises(UnsupportedCudaAPI):
                obj()
        elif name == "get_device_capability":
            assert expected.cls == support.PLACEHOLDER
            # the table's markers answer is_bf16_supported with a tuple (truthy); cpu says True
            assert obj() == support.CAPABILITY_BF16
        elif expected.to.startswith(("torch.", "transfer.cpu.runtime")):
            assert native is not None and _runs_the_target(obj, native), name
            if not profile.is_cpu:
                assert expected.cls == support.TRANSLATED
        elif expected.cls == support.NOOP:
            assert obj() is None and "does nothing" in caplog.text, name
        else:  # placeholder: a fixed value; internal defaults silently
            assert expected.cls == support.PLACEHOLDER, name
            assert repr(obj()) == expected.to, name
            assert (name in support.INTERNAL_DEFAULTS) == (caplog.text == ""), name


def test_cpu_table_matches_the_cpu_runtime():
    assert PROFILES["cpu"].cuda_api == {n for n in support.CUDA_NAMES if hasattr(cpu_runtime, n)}
    assert PROFILES["cpu"].placeholders == cpu_runtime.PLACEHOLDERS


def test_table_names_every_public_cuda_callable():
    skipped = cuda_namespace._SUBMODULES | {"has_half", "has_magma"}
    public = {n for n in torch.cuda.__all__ if n not in skipped and not n.endswith(cuda_namespace._SKIP_SUFFIXES)}
    exceptions = {n for n in public if inspect.isclass(getattr(torch.cuda, n, None))
                  and issubclass(getattr(torch.cuda, n), BaseException)}
    assert public - exceptions <= set(support.CUDA_NAMES)
    for name in exceptions:  # torch 2.0 lists OutOfMemoryError: kept, with a row of its own
        assert support.lookup("npu", f"torch.cuda.{name}").to == "unchanged"


def test_every_row_has_a_class_and_reason_per_profile():
    for api, row in support.table():
        assert set(row) == set(PROFILES)
        for profile, entry in row.items():
            assert entry.cls in support.CLASSES, (api, profile)
            assert entry.reason or entry.to, (api, profile)
    with pytest.raises(KeyError, match="not in the support table"):
        support.lookup("npu", "Tensor.frobnicate")


def test_a_target_built_into_torch_is_named_as_torch_in_every_row():
    """xpu has no plug-in package (Profile.package None): no row may print "None" where the package goes."""
    builtin = [p for p in PROFILES.values() if p.package is None and not p.is_cpu]
    assert builtin, "no target built into torch"
    for api, row in support.table():
        for profile in builtin:
            entry = row[profile.name]
            # where a row names the plug-in ("{pkg}'s graph API", "{pkg} has no ..."); other Nones are values
            assert not re.search(r"None's|\bNone (has|is|for|without)\b|import None|\ba None\b",
                                 f"{entry.to} {entry.reason}"), (api, entry)


_STANDIN_NAMES = r"""
import importlib, json, sys, torch
package = importlib.import_module(sys.argv[1])
module = getattr(torch, package.SPEC.name)
spec = package.SPEC
print(json.dumps({"names": sorted(n for n in dir(module) if not n.startswith("__")),
                  "backend": spec.backend, "visible": spec.visible_devices_env,
                  "set_device_first": spec.requires_set_device, "one_per_device": spec.one_process_per_device}))
"""


@needs_standins
@pytest.mark.parametrize("profile", [pytest.param(p, marks=pytest.mark.skipif(
    PROFILES[p].package is None and not XPU_STANDIN, reason=NO_XPU_STANDIN)) for p in PROFILES if not PROFILES[p].is_cpu])
def test_vendor_columns_match_the_stand_in(profile):
    """The table's vendor column is what the stand-in's torch.<device> has (the stand-ins mirror the
    vendors' published modules), and the profile's backend quirks are the stand-in's."""
    import json
    import os
    import subprocess
    import sys

    from conftest import VENDORS, clean_env, vendor_path

    p = PROFILES[profile]
    standin = p.package or f"sim_{p.name}"  # a device built into torch (xpu): its stand-in, loaded at import torch
    proc = subprocess.run([sys.executable, "-c", _STANDIN_NAMES, standin],
                          env=clean_env(PYTHONPATH=vendor_path(profile)), capture_output=True, text=True,
                          timeout=900, cwd=os.path.dirname(VENDORS))
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    has = {n for n in support.CUDA_NAMES if n in found["names"]}
    assert has == set(PROFILES[profile].cuda_api), (
        f"in the table only: {sorted(set(PROFILES[profile].cuda_api) - has)}; "
        f"on the stand-in only: {sorted(has - set(PROFILES[profile].cuda_api))}")
    assert (found["backend"], found["visible"]) == (p.backend, p.visible_devices_env)
    assert (found["set_device_first"], found["one_per_device"]) == (p.set_device_before_init, p.one_process_per_device)


def test_every_logged_patch_has_its_own_row(install_cpu):
    """Each CUDA-facing patch outside torch.cuda names the table row the log classes it by; only
    device-taking factories, loaders and Tensor/Module methods fall under the generic device='cuda' row."""
    from transfer import calllog

    install_cpu(TRANSFER_LOG=None)
    generic = ("factories.", "serialization.", "tensor.", "module.")
    missing = []
    for record in transfer._active.registry.records():
        area = record.name.split(".", 1)[0]
        if area not in calllog._AREAS or record.name in calllog._LEFT:
            continue
        api = calllog._api(record)
        if api.startswith("torch.cuda."):
            continue  # the torch.cuda contract: test_every_patched_name_behaves_as_the_table_says
        row = calllog._ROWS.get(api) or ("device='cuda'" if record.name.startswith(generic) else None)
        if row is None:
            missing.append(f"{record.name} ({api})")
        else:
            assert support.lookup("cpu", row).cls in support.CLASSES
    assert not missing, "patched, logged, but no row of its own in the support table: " + ", ".join(missing)
