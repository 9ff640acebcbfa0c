"""The support table against the patches: every torch.cuda name cuda_namespace
replaces behaves on every profile as the table classes it."""

import logging
import types

import pytest
import torch

import transfer
from transfer import cpu_runtime, support
from transfer.devices import Target
from transfer.errors import UnsupportedCudaAPI
from transfer.patches import PatchContext, cuda_namespace
from transfer.profiles import PROFILES
from transfer.registry import Registry


def _vendor_module(profile):
    """A stand-in torch.<device> holding exactly the table's names, each a marker."""
    module = types.SimpleNamespace()
    for name in support.VENDOR_API[profile]:
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


def _unwrap(obj):
    while hasattr(obj, "__wrapped__"):
        obj = obj.__wrapped__
    return obj


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
    names = [r.attribute for r in registry.records() if r.name.startswith("cuda_namespace.") and r.attribute != "nvtx"]
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
            if expected.cls == support.PLACEHOLDER:
                assert obj() == (0, 0)
            else:
                assert _unwrap(obj) is native
        elif expected.to.startswith(("torch.", "transfer.cpu_runtime")):
            assert native is not None and _unwrap(obj) is native, name
            if not profile.is_cpu:
                assert expected.cls == support.TRANSLATED
        elif expected.cls == support.NOOP:
            assert obj() is None and "does nothing" in caplog.text, name
        else:  # placeholder: a fixed value; internal defaults silently
            assert expected.cls == support.PLACEHOLDER, name
            assert repr(obj()) == expected.to, name
            assert (name in support.INTERNAL_DEFAULTS) == (caplog.text == ""), name


def test_cpu_table_matches_the_cpu_runtime():
    assert support.CPU_API == {n for n in support.CUDA_NAMES if hasattr(cpu_runtime, n)}
    assert support.PLACEHOLDERS["cpu"] == cpu_runtime.PLACEHOLDERS


def test_table_names_every_public_cuda_callable():
    skipped = cuda_namespace._SUBMODULES | {"has_half", "has_magma"}
    public = {n for n in torch.cuda.__all__ if n not in skipped and not n.endswith(cuda_namespace._SKIP_SUFFIXES)}
    assert public <= set(support.CUDA_NAMES)


def test_every_row_has_a_class_and_reason_per_profile():
    for api, row in support.table():
        assert set(row) == set(PROFILES)
        for profile, entry in row.items():
            assert entry.cls in support.CLASSES, (api, profile)
            assert entry.reason or entry.to, (api, profile)
    with pytest.raises(KeyError, match="not in the support table"):
        support.lookup("npu", "Tensor.frobnicate")
