"""One patcher of CUDA calls per process (transfer.neighbours).

A second copy of transfer (under another import path) and torch_npu's transfer_to_npu are refused with
ConflictError whichever comes first, saying which one to remove; the transfer_to_npu stand-in behaves as
the real one does.
"""

import os
import shutil
import textwrap

from conftest import VENDORS, clean_env, needs_standins, python


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
    assert "refused: Huawei Ascend's CUDA migration module torch_npu.contrib.transfer_to_npu has already patched " \
        "torch" in proc.stdout, proc.stdout + proc.stderr
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
    # What torch_npu 2.13.0's torch_npu/contrib/transfer_to_npu.py does (read in its wheel): substring rewriting,
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


SHIM_PROBE = """
import sys, torch, transfer
sys.path.insert(0, {site!r})
import {module}
try:
    transfer.install("cpu")
except transfer.ConflictError as exc:
    print("refused before:", exc)
del sys.modules[{module!r}]
transfer.install("cpu")
try:
    import {module}
except ImportError as exc:
    print("refused after:", type(exc).__name__, exc)
transfer.uninstall()
import {module}
print("imports after uninstall")
"""


def test_every_vendors_migration_module_is_refused_whichever_comes_first(tmp_path):
    """Each profile's `migration_shims` (torch_npu's transfer_to_npu, torch_mlu's gpu_migration, torchada,
    torch_supa's transfer_to_supa): an empty module under that name stands for it (what conflicts.py checks is
    the name in sys.modules and the import), on the cpu target, so no stand-in is needed."""
    from transfer.profiles import PROFILES

    shims = {m: (p, fix) for p in PROFILES.values() for m, fix in p.migration_shims.items()}
    assert {"torch_npu.contrib.transfer_to_npu", "torch_mlu.utils.gpu_migration", "torchada",
            "torch_supa.contrib.transfer_to_supa"} <= set(shims)
    for module, (profile, fix) in shims.items():
        site = tmp_path / profile.name
        site.mkdir(exist_ok=True)
        path = site.joinpath(*module.split("."))
        for parent in [site.joinpath(*module.split(".")[:i]) for i in range(1, module.count(".") + 1)]:
            parent.mkdir(parents=True, exist_ok=True)
            (parent / "__init__.py").write_text("")
        path.with_suffix(".py").write_text("PATCHED = True\n")
        proc = python("-c", SHIM_PROBE.format(site=str(site), module=module), env=clean_env(TRANSFER_QUIET=1))
        out = proc.stdout
        assert f"refused before: {profile.vendor}'s CUDA migration module {module} has already patched torch" \
            in out, out + proc.stderr
        assert f"refused after: ConflictError transfer is active in this process (CUDA calls run on its 'cpu' " \
            f"target); importing {module} would patch torch a second time" in out, out + proc.stderr
        assert out.count(fix[0].upper() + fix[1:]) == 2 and f"TRANSFER_DEVICE={profile.name}" in out, out
        assert "imports after uninstall" in out, out + proc.stderr
