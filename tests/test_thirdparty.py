"""The mechanism that serves CUDA-only third-party packages under their public names
(transfer/dropins/__init__.py): finder, metadata, switches, undo, ways in.

The packages' numerics are tested in tests/test_thirdparty_attention.py.
"""

import importlib
import importlib.metadata
import importlib.util
import os
import sys
import textwrap

import pytest

from conftest import ROOT, clean_env, run

PYTHON = sys.executable
SERVED = ("flash_attn", "xformers", "transformer_engine")


def _forget(names=SERVED):
    for key in [k for k in sys.modules if k.partition(".")[0] in names]:
        del sys.modules[key]


@pytest.fixture
def served(cpu_target):
    _forget()
    yield cpu_target
    _forget()


def test_nothing_is_served_without_transfer():
    import transfer

    transfer.uninstall()
    assert importlib.util.find_spec("flash_attn") is None  # no real flash_attn in the test environment
    with pytest.raises(ModuleNotFoundError, match="No module named 'flash_attn'"):
        import flash_attn  # noqa: F401


def test_flash_attn_is_a_real_package_under_its_public_name(served):
    assert {"thirdparty.flash_attn", "thirdparty.xformers", "thirdparty.transformer_engine"} <= set(
        served.status()["patches"])
    spec = importlib.util.find_spec("flash_attn")
    assert spec.name == "flash_attn" and spec.submodule_search_locations
    import flash_attn
    import flash_attn.bert_padding

    assert flash_attn.__name__ == flash_attn.__spec__.name == "flash_attn"
    assert flash_attn.__path__ and os.path.isfile(flash_attn.__file__)
    assert flash_attn.__version__ == "2.7.4.post1"
    assert flash_attn.bert_padding.__name__ == "flash_attn.bert_padding"
    assert callable(flash_attn.flash_attn_func)
    assert importlib.util.find_spec("flash_attn.bert_padding").name == "flash_attn.bert_padding"


def test_metadata_answers_as_for_an_installed_wheel(served):
    assert importlib.metadata.version("flash-attn") == importlib.metadata.version("flash_attn") == "2.7.4.post1"
    assert importlib.metadata.version("xformers") == "0.0.29.post3"
    if hasattr(importlib.metadata, "packages_distributions"):  # Python 3.10+
        assert "flash-attn" in importlib.metadata.packages_distributions()["flash_attn"]
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("transformer-engine")


def test_transformer_engine_is_refused_with_a_message(served):
    assert importlib.util.find_spec("transformer_engine") is None  # availability checks answer False
    with pytest.raises(ModuleNotFoundError, match="transformer_engine is not provided by transfer") as info:
        import transformer_engine.pytorch  # noqa: F401
    assert info.value.name == "transformer_engine.pytorch" or info.value.name == "transformer_engine"
    assert "torch.autocast" in str(info.value)
    try:  # the fallback idiom of public code
        import transformer_engine  # noqa: F401
        fell_back = False
    except ImportError:
        fell_back = True
    assert fell_back


def test_a_module_we_do_not_provide_says_what_is_provided(served):
    assert importlib.util.find_spec("flash_attn.models") is None
    with pytest.raises(ModuleNotFoundError, match="flash_attn.models is not among them") as info:
        import flash_attn.models.gpt  # noqa: F401
    assert "flash_attn.bert_padding" in str(info.value)
    with pytest.raises(ModuleNotFoundError, match="flash_attn.modules"):
        importlib.import_module("flash_attn.modules.block")


def test_uninstall_removes_the_finder_and_the_modules(served):
    import flash_attn.bert_padding  # noqa: F401

    finders = [f for f in sys.meta_path if type(f).__module__ == "transfer.dropins"]
    assert finders
    served.uninstall()
    assert not [f for f in sys.meta_path if f in finders]
    assert not [k for k in sys.modules if k.partition(".")[0] == "flash_attn"]
    assert importlib.util.find_spec("flash_attn") is None


@pytest.mark.parametrize("disable,gone,kept", [
    ("thirdparty.flash_attn", ["flash_attn"], ["xformers"]),
    ("thirdparty", ["flash_attn", "xformers"], []),
])
def test_transfer_disable_switches_packages_off(install_cpu, disable, gone, kept):
    _forget()
    status = install_cpu(TRANSFER_DISABLE=disable)
    for name in gone:
        assert f"thirdparty.{name}" not in status["patches"]
        assert importlib.util.find_spec(name) is None
    for name in kept:
        assert f"thirdparty.{name}" in status["patches"]
        assert importlib.util.find_spec(name) is not None
    _forget()


def _fake_real_package(root, name, version):
    """A real-looking CUDA build of `name` on sys.path: its import fails as on a machine without CUDA."""
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "raise ImportError('libcudart.so.12: cannot open shared object file: No such file or directory')\n")
    dist = root / f"{name}-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n")
    (dist / "top_level.txt").write_text(name + "\n")


def test_an_installed_cuda_build_is_replaced(install_cpu, tmp_path, monkeypatch):
    _fake_real_package(tmp_path, "flash_attn", "2.5.8")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    _forget()
    install_cpu()
    import flash_attn

    assert flash_attn.__version__ == "2.7.4.post1"
    assert importlib.metadata.version("flash-attn") == "2.7.4.post1"
    _forget()


def _python(code, **env):
    return run([PYTHON, "-c", textwrap.dedent(code)], env=clean_env(TRANSFER_QUIET="1", **env), timeout=240,
               check=False)


@pytest.mark.slow
def test_install_imports_no_implementation_and_env_way_serves_before_torch(tmp_path):
    """The finder costs nothing until asked; under TRANSFER_DEVICE a script may import
    flash_attn before torch (the start-up trigger imports torch, which installs transfer)."""
    result = _python("""
        import sys
        import transfer
        transfer.install("cpu")
        loaded = [m for m in sys.modules if m.partition(".")[0] in ("flash_attn", "xformers")
                  or m.startswith("transfer.dropins.")]
        print("loaded:", loaded)
    """)
    assert result.returncode == 0, result.stderr
    assert "loaded: []" in result.stdout
    result = _python("""
        from flash_attn import flash_attn_func
        import torch, transfer
        print("served", transfer.status()["device"], flash_attn_func.__module__)
    """, TRANSFER_DEVICE="cpu")
    assert result.returncode == 0, result.stderr
    assert "served cpu flash_attn.flash_attn_interface" in result.stdout
    result = _python("""
        import torch
        try:
            import flash_attn
        except ModuleNotFoundError as exc:
            print("absent:", exc)
    """, TRANSFER_DEVICE="off")
    assert result.returncode == 0, result.stderr
    assert "absent: No module named 'flash_attn'" in result.stdout
