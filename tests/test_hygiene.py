"""Patching hygiene (issue 17, item 11): what transfer does to the rest of the process.

uninstall restores only what is still ours; a second copy of transfer and
torch_npu's transfer_to_npu are refused whichever comes first; copies bound
before install (``from torch.cuda import device_count``) are rebound and put
back; the yes/no switches read one way; TRANSFER_DISABLE names are checked;
transfer's logging leaves the application's configuration alone.
"""

import functools
import logging
import os
import shutil
import sys
import textwrap

import pytest
import torch

import transfer
from conftest import VENDORS, clean_env, needs_standins, python
from transfer.errors import TransferError, UnsupportedCudaAPI



# --- a. uninstall restores only what is still ours -------------------------------------------

def test_uninstall_leaves_a_patch_made_after_transfer_and_restores_once_it_is_undone(install_cpu, caplog):
    original = torch.cuda.device_count
    try:
        install_cpu()
        ours = torch.cuda.device_count

        @functools.wraps(ours)
        def profiled():  # another library wraps the function after transfer installed
            return ours()

        torch.cuda.device_count = profiled
        with caplog.at_level(logging.WARNING, logger="transfer"):
            transfer.uninstall()
        assert torch.cuda.device_count is profiled  # not overwritten with torch's original
        said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(said) == 1 and "torch.cuda.device_count" in said[0] and "calls transfer's replacement" in said[0]
        assert torch.cuda.is_available() is False  # everything else is restored

        torch.cuda.device_count = profiled.__wrapped__  # the library undoes its patch: ours is back
        transfer.uninstall()  # nothing active: restores what was left behind, now that it is ours again
        assert torch.cuda.device_count is original

        # The same through a second install: it never takes our stale replacement for torch's original.
        install_cpu()
        torch.cuda.device_count = profiled2 = functools.wraps(torch.cuda.device_count)(lambda: 7)
        transfer.uninstall()
        torch.cuda.device_count = profiled2.__wrapped__
        install_cpu()
        transfer.uninstall()
        assert torch.cuda.device_count is original
    finally:
        transfer.uninstall()
        torch.cuda.device_count = original


# --- b. a second copy of transfer, torch_npu's transfer_to_npu -------------------------------

def test_a_second_copy_of_transfer_is_refused_whichever_installs_first(tmp_path):
    import transfer  # the copy under test: the checkout's, or the installed wheel's under nox

    installed = os.path.dirname(os.path.abspath(transfer.__file__))
    vendored = tmp_path / "site" / "_vendored_copy"
    shutil.copytree(installed, vendored / "transfer",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (vendored / "__init__.py").write_text("")
    code = textwrap.dedent("""
        import torch, transfer, _vendored_copy.transfer as copy
        for first, second in ((transfer, copy), (copy, transfer)):
            first.install("cpu")
            try:
                second.install("cpu")
            except ImportError as exc:  # ConflictError
                print(type(exc).__name__, exc)
            print("second active:", second.status()["active"])
            first.uninstall()
            print("clean:", not torch.cuda.is_available() and "is_cuda" not in torch.Tensor.__dict__)
    """)
    proc = python("-c", code, env=clean_env(PYTHONPATH=str(tmp_path / "site"), TRANSFER_QUIET=1))
    out = proc.stdout
    assert out.count("ConflictError another copy of transfer is active") == 2, out + proc.stderr
    assert out.count("second active: False") == 2 and out.count("clean: True") == 2
    assert str(vendored / "transfer") in out and installed in out


@needs_standins
def test_transfer_to_npu_imported_first_makes_install_refuse():
    code = textwrap.dedent("""
        import torch, torch_npu
        from torch_npu.contrib import transfer_to_npu
        import transfer
        try:
            transfer.install("npu")
        except transfer.ConflictError as exc:
            print("refused:", exc)
        print("active:", transfer.status()["active"], "patched by transfer:", hasattr(torch, "_transfer_active"))
    """)
    proc = python("-c", code, env=clean_env(PYTHONPATH=VENDORS, TRANSFER_QUIET=1))
    assert "refused: torch_npu's transfer_to_npu (torch_npu.contrib.transfer_to_npu) has already patched torch" \
        in proc.stdout, proc.stdout + proc.stderr
    assert "Remove `from torch_npu.contrib import transfer_to_npu`" in proc.stdout
    assert "active: False patched by transfer: False" in proc.stdout


@needs_standins
def test_transfer_to_npu_imported_while_transfer_is_active_is_refused(tmp_path):
    # The Ascend way of porting a script, under TRANSFER_DEVICE=npu: transfer installs at `import torch`.
    script = tmp_path / "train.py"
    script.write_text("import torch\nimport torch_npu\nfrom torch_npu.contrib import transfer_to_npu\n"
                      "print('ran on', torch.ones(1).cuda().device)\n")
    env = clean_env(PYTHONPATH=VENDORS, TRANSFER_DEVICE="npu", TRANSFER_QUIET=1)
    proc = python(str(script), env=env, check=False)
    assert proc.returncode != 0 and "ran on" not in proc.stdout
    assert "ConflictError: transfer is active in this process" in proc.stderr, proc.stderr
    assert "Remove `from torch_npu.contrib import transfer_to_npu`" in proc.stderr

    # Guarded by `except ImportError`, the script runs under transfer alone; after uninstall it imports.
    script.write_text(textwrap.dedent("""
        import torch
        import torch_npu
        try:
            from torch_npu.contrib import transfer_to_npu
        except ImportError:
            pass
        import sys, transfer
        print("ran on", torch.ones(1).cuda().device, "imported:", "torch_npu.contrib.transfer_to_npu" in sys.modules)
        transfer.uninstall()
        from torch_npu.contrib import transfer_to_npu
        print("after uninstall:", torch.ones(1).cuda().device, torch.Tensor.is_cuda is torch.Tensor.is_npu)
    """))
    proc = python(str(script), env=env)
    assert "ran on npu:0 imported: False" in proc.stdout, proc.stdout + proc.stderr
    assert "after uninstall: npu:0 True" in proc.stdout


@needs_standins
def test_transfer_to_npu_standin_behaves_as_the_real_one():
    # What torch_npu 2.13.0's transfer_to_npu.py does (FACTS.md, "The anchors"): substring rewriting,
    # torch_npu.npu's names copied onto torch.cuda, is_cuda -> is_npu, jit.script a no-op.
    code = textwrap.dedent("""
        import torch, torch_npu
        from torch_npu.contrib import transfer_to_npu
        print("zeros", torch.zeros(2, device="cuda:1").device, torch.ones(1).cuda().device)
        print("names", torch.cuda.device_count is torch.npu.device_count, torch.Tensor.is_cuda is torch.Tensor.is_npu)
        try:
            torch.load("/nonexistent/cuda_model.pt")
        except FileNotFoundError as exc:
            print("load", exc)
        try:
            torch.ones(1).to("CUDA:0")
        except RuntimeError:
            print("upper case refused")
        f = lambda x: x
        print("script", torch.jit.script(f) is f, hasattr(torch.cuda.device_count, "__wrapped__"))
    """)
    proc = python("-c", code, env=clean_env(PYTHONPATH=VENDORS))
    out = proc.stdout
    assert "zeros npu:1 npu:0" in out and "names True True" in out, out + proc.stderr
    assert "npu_model.pt" in out and "upper case refused" in out and "script True False" in out


# --- c. copies bound before install ----------------------------------------------------------

USER_MODULE = """
import torch
from torch import zeros
from torch.cuda import current_device, device_count, set_device
from torch.distributed import is_nccl_available
_zeros_kept = torch.zeros  # saved under another name: a kept original, left alone
"""


def test_copies_bound_before_install_are_rebound_and_restored(tmp_path, monkeypatch, install_cpu):
    (tmp_path / "hygiene_user_mod.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import hygiene_user_mod as mod

    originals = {n: getattr(mod, n) for n in ("zeros", "current_device", "device_count", "set_device",
                                              "is_nccl_available")}
    torch_own = torch.cuda.memory.memory_allocated  # torch's own modules keep torch's originals
    try:
        info = install_cpu(TRANSFER_CPU_DEVICES=2)
        assert mod.device_count is torch.cuda.device_count and mod.device_count() == 2
        mod.set_device(1)
        assert mod.current_device() == 1 and torch.cuda.current_device() == 1
        assert mod.zeros(2, device="cuda").device == torch.zeros(2, device="cuda").device
        assert mod.is_nccl_available() is True
        assert mod._zeros_kept is originals["zeros"]
        assert torch.cuda.memory.memory_allocated is torch_own
        assert "copies.hygiene_user_mod.device_count" in info["patches"]
        transfer.uninstall()
        assert all(getattr(mod, n) is v for n, v in originals.items())

        install_cpu(TRANSFER_DISABLE="copies")
        assert mod.device_count is originals["device_count"]

        install_cpu(TRANSFER_DISABLE=None, TRANSFER_LOG=str(tmp_path / "log"))  # a copy gets what the owner holds: the logging object
        assert mod.device_count is torch.cuda.device_count and mod.device_count is not originals["device_count"]
    finally:
        sys.modules.pop("hygiene_user_mod", None)


def test_import_line_after_isorted_cuda_imports(tmp_path):
    # isort puts `from transfer import auto` after `from torch.cuda import ...` ("torch" < "transfer").
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch import zeros
        from torch.cuda import current_device, device_count, set_device
        from transfer import auto as _  # noqa: F401

        n = device_count()
        set_device(n - 1)
        print("devices", n, "current", current_device(), "zeros on", zeros(1, device="cuda").device.type)
    """))
    proc = python(str(script), env=clean_env(TRANSFER_CPU_DEVICES=2, TRANSFER_QUIET=1))
    # On a 2-GPU CUDA machine: devices 2 current 1; the tensor lands on the target's device (cpu here).
    assert "devices 2 current 1 zeros on cpu" in proc.stdout, proc.stdout + proc.stderr


def test_copies_are_left_in_torchs_transfers_and_the_vendors_modules():
    from transfer.patches.copies import kept

    assert kept("torch") and kept("torch.cuda.memory") and kept("functorch.dim") and kept("torchgen.model")
    assert kept("transfer") and kept("transfer.registry") and kept("torch_npu.contrib.transfer_to_npu")
    assert not kept("torchvision.models") and not kept("__main__") and not kept("transformers.trainer")
    assert not kept("torch_extras") and not kept("transfer_learning")  # a prefix without the separator


# --- d. yes/no switches ------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["1", "true", "YES", " on "])
def test_strict_true_spellings(install_cpu, value):
    install_cpu(TRANSFER_STRICT=value)
    with pytest.raises(UnsupportedCudaAPI):
        torch.cuda.max_memory_allocated()


@pytest.mark.parametrize("value", ["0", "false", "No", "off", ""])
def test_strict_false_spellings(install_cpu, value):
    install_cpu(TRANSFER_STRICT=value)
    torch.cuda.max_memory_allocated()  # a placeholder with a warning, no error


@pytest.mark.parametrize("name", ["TRANSFER_STRICT", "TRANSFER_QUIET"])
def test_a_bad_switch_value_raises_before_anything_is_patched(install_cpu, name):
    with pytest.raises(TransferError, match=f"{name}='ture' is not a yes/no value"):
        install_cpu(**{name: "ture"})
    assert not torch.cuda.is_available() and transfer.status()["active"] is False


@pytest.mark.parametrize("value,shown", [("0", True), ("false", True), ("off", True), ("", True), ("1", False),
                                         ("yes", False)])
def test_quiet_spellings(monkeypatch, caplog, value, shown):
    transfer.uninstall()
    monkeypatch.setenv("_TRANSFER_SAID", "")
    monkeypatch.delenv("_TRANSFER_SAID")  # the banner has not been said in this job; restored after
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("TRANSFER_QUIET", value)
    caplog.set_level(logging.INFO, logger="transfer")
    try:
        transfer.install("cpu")
    finally:
        transfer.uninstall()
    banners = [r for r in caplog.records if "CUDA calls run on cpu" in r.getMessage()]
    assert len(banners) == (1 if shown else 0)


# --- e. TRANSFER_DISABLE names -----------------------------------------------------------------

def test_a_misspelled_disable_name_raises_with_the_valid_names(install_cpu):
    with pytest.raises(TransferError) as info:
        install_cpu(TRANSFER_DISABLE="tensor.is_cuad,factories")
    message = str(info.value)
    assert f"'tensor.is_cuad' is not an area or patch of transfer for the cpu target on torch {torch.__version__}" \
        in message and "did you mean 'tensor.is_cuda'?" in message
    assert "tensor.to" in message and "cuda_namespace" in message  # the area's patches, every area
    assert not torch.cuda.is_available() and "is_cuda" not in torch.Tensor.__dict__  # nothing left patched
    with pytest.raises(TransferError, match="did you mean 'factories.zeros'"):
        install_cpu(TRANSFER_DISABLE="factory.zeros")
    assert install_cpu(TRANSFER_DISABLE="tensor.is_cuda, factories,")["disabled"] == ["factories", "tensor.is_cuda"]


def test_a_misspelled_disable_name_stops_the_environment_way_in():
    proc = python("-c", "import torch", env=clean_env(TRANSFER_DEVICE="cpu", TRANSFER_DISABLE="shutdwn"),
                  check=False)
    assert proc.returncode != 0 and "did you mean 'shutdown'?" in proc.stderr, proc.stderr


# --- f. logging ----------------------------------------------------------------------------------

LOGGING_PROBE = """
import logging
import torch
{configure}
torch.cuda.max_memory_allocated()  # the cpu target warns once: a placeholder value
log = logging.getLogger("transfer")
print("propagate", log.propagate, "handlers", len(log.handlers), "level", log.level)
"""


def test_no_logging_configured_banner_and_warnings_reach_stderr_once():
    proc = python("-c", LOGGING_PROBE.format(configure=""), env=clean_env(TRANSFER_DEVICE="cpu"))
    assert proc.stderr.count("transfer: CUDA calls run on cpu") == 1
    assert proc.stderr.count("max_memory_allocated") == 1, proc.stderr
    # issue 24: one short line; the detail (nccl -> gloo among it) on request, through what an unmodified
    # script can use: TRANSFER_REPORT (not transfer.report(), which it cannot call)
    (banner,) = [line for line in proc.stderr.splitlines() if line.startswith("transfer: CUDA calls run on cpu")]
    assert banner == ("transfer: CUDA calls run on cpu (any CPU); float16 autocast runs as bfloat16; "
                      "details: TRANSFER_REPORT=FILE"), banner
    assert "propagate True handlers 0 level 0" in proc.stdout  # nothing of the application's changed


def test_logging_configured_after_install_gets_transfers_records_once():
    configure = "logging.basicConfig(format='APP %(levelname)s %(name)s: %(message)s')"
    proc = python("-c", LOGGING_PROBE.format(configure=configure), env=clean_env(TRANSFER_DEVICE="cpu"))
    warned = [line for line in proc.stderr.splitlines() if "max_memory_allocated" in line]
    assert len(warned) == 1 and warned[0].startswith("APP WARNING transfer: "), proc.stderr
    assert "propagate True handlers 0" in proc.stdout


def test_logging_configured_before_install_shows_the_banner_once_in_its_format():
    code = ("import logging; logging.basicConfig(level=logging.INFO, format='APP %(name)s: %(message)s')\n"
            "from transfer import auto as _\n")
    proc = python("-c", code, env=clean_env(TRANSFER_DEVICE="cpu"))
    banners = [line for line in proc.stderr.splitlines() if "CUDA calls run on cpu" in line]
    assert banners == [line for line in banners if line.startswith("APP transfer: ")] and len(banners) == 1, \
        proc.stderr
