"""Copies of CUDA functions bound before install (transfer/patches/copies.py).

``from torch.cuda import device_count`` (or ``from torch import zeros``) in a module imported before
transfer installed is rebound to the translated object and put back at uninstall; a copy under another
name is left alone; torch's own modules, transfer's and the vendors' keep theirs; the import line works
after isort put it below the CUDA imports.
"""

import sys
import textwrap

import torch

import transfer
from conftest import clean_env, python


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
