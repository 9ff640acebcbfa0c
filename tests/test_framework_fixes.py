"""What frameworks and public scripts tripped on, and the set-device rule.

1. TorchScript sees torch's builtins through the factory replacements (``import
   torch.distributed.optim``, user ``@torch.jit.script`` helpers), and a scripted
   ``device="cuda"`` runs on the target; uninstall restores the builtin table exactly.
2. A CUDA class the target lacks stays a class (``X | None``, subclass, isinstance);
   constructing it raises UnsupportedCudaAPI.
3. The cpu target reports 2 devices by default and accepts Lightning's
   ``init_process_group(..., device_id=cuda:N)``.
4. tccl's set-device-before-init rule holds for process groups torch creates itself
   (DeviceMesh calls torch's own init_process_group; new_group).
"""

import inspect
import json
import textwrap
import typing

import pytest
import torch

from conftest import clean_env, free_port, needs_standins, python, vendor_path
from transfer.errors import TransferError, UnsupportedCudaAPI


# ---------------------------------------------------------------- 1. TorchScript

def scripted_factories(n: int) -> torch.Tensor:
    a = torch.zeros(n, device="cuda")
    b = torch.full_like(a, 2.0)
    return a + b + torch.ones(n, device="cuda:1")


def test_torchscript_compiles_factory_calls_and_runs_them_on_the_target(cpu_target):
    import torch.jit._builtins as builtins

    table = builtins._get_builtin_table()
    assert "factories.zeros" in cpu_target.status()["patches"]
    assert table[id(torch.zeros)] == "aten::zeros"  # the replacement is known as the builtin
    fn = torch.jit.script(scripted_factories)
    out = fn(3)
    assert out.device.type == "cpu" and out.tolist() == [3.0, 3.0, 3.0]
    devices = [n.s("value") for n in fn.graph.findAllNodes("prim::Constant")
               if n.output().type().kind() == "DeviceObjType"]
    assert devices and all(d == "cpu" for d in devices), devices


class FilledModule(torch.nn.Module):
    def forward(self, x):
        return x + torch.full((2,), 2.0, device="cuda")


def test_scripted_module_runs_on_the_target(cpu_target):
    module = torch.jit.script(FilledModule())
    assert module(torch.ones(2)).tolist() == [3.0, 3.0]


def test_uninstall_restores_the_builtin_table_exactly(monkeypatch):
    import torch.jit._builtins as builtins
    import transfer

    transfer.uninstall()
    monkeypatch.setenv("TRANSFER_QUIET", "1")
    before = dict(builtins._get_builtin_table())
    transfer.install("cpu")
    replacement = torch.zeros
    assert builtins._get_builtin_table()[id(replacement)] == "aten::zeros"
    transfer.uninstall()
    assert dict(builtins._get_builtin_table()) == before
    assert torch.jit.script is torch.jit._script.script  # the original, put back in both homes
    assert not hasattr(torch.jit.script, "__wrapped__")


@pytest.mark.slow
def test_disabling_the_torchscript_area_shows_the_failure_it_fixes(tmp_path):
    """Without the area, TorchScript tries to compile the replaced factory from source."""
    code = "import torch.distributed.optim; print('imported')"
    ok = python("-c", code, env=clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET=1), timeout=300)
    assert ok.stdout.strip() == "imported"
    broken = python("-c", code, env=clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET=1,
                                              TRANSFER_DISABLE="torchscript"), timeout=300, check=False)
    assert broken.returncode != 0 and "imported" not in broken.stdout, broken.stderr


SCRIPTED_ON_VENDOR = textwrap.dedent("""
    import torch

    @torch.jit.script
    def make(n: int) -> torch.Tensor:
        return torch.zeros(n, device="cuda:1") + torch.arange(n, device="cuda:1")

    torch.cuda.set_device(1)
    out = make(3)
    print(out.device, out.tolist())
""")


@needs_standins
@pytest.mark.parametrize("vendor", ["sdaa", "gcu"])
def test_scripted_cuda_device_runs_on_the_vendor_device(vendor, tmp_path):
    script = tmp_path / "scripted.py"
    script.write_text(SCRIPTED_ON_VENDOR)
    proc = python(str(script), env=clean_env(TRANSFER_DEVICE=vendor, PYTHONPATH=vendor_path(vendor), TRANSFER_QUIET=1),
                  timeout=600)
    assert proc.stdout.strip() == f"{vendor}:1 [0.0, 1.0, 2.0]", proc.stderr


# ---------------------------------------------------------------- 2. missing CUDA classes

def test_missing_cuda_classes_stay_classes(cpu_target):
    from transfer.cpu import runtime as cpu_runtime

    classes = [r for r in cpu_target._active.registry.records()
               if r.name.startswith("cuda_namespace.") and inspect.isclass(r.original)]
    missing = [r.attribute for r in classes if not hasattr(cpu_runtime, r.attribute)]
    expected = {name for name in ("MemPool", "ExternalStream") if name in vars(torch.cuda)}
    assert expected >= {"ExternalStream"}  # torch.cuda.MemPool starts at 2.5
    assert expected <= set(missing), missing
    for name in missing:
        cls = getattr(torch.cuda, name)
        assert inspect.isclass(cls), name
        assert typing.Optional[cls] == typing.Optional[cls]  # usable in annotations evaluated at import
        if hasattr(type, "__or__"):  # X | None needs Python 3.10
            assert (cls | None) == (cls | None)
        assert not isinstance(object(), cls)
        with pytest.raises(UnsupportedCudaAPI, match=f"torch.cuda.{name} is not supported"):
            cls()

    class MyStream(torch.cuda.ExternalStream):  # subclassing works; constructing does not
        def __init__(self):
            super().__init__(0)

    with pytest.raises(UnsupportedCudaAPI):
        MyStream()
    # CUDA graphs are real classes on every target (transformers' `torch.cuda.CUDAGraph | None`)
    assert inspect.isclass(torch.cuda.CUDAGraph) and typing.Optional[torch.cuda.CUDAGraph]
    assert isinstance(torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph)


# ---------------------------------------------------------------- 3. cpu target: count, device_id

def test_cpu_target_defaults_to_two_devices(cpu_target, monkeypatch):
    from transfer.cpu import runtime as cpu_runtime

    assert cpu_runtime.DEFAULT_DEVICES == 2 and torch.cuda.device_count() == 2
    torch.cuda.set_device(1)
    assert torch.cuda.current_device() == 1
    torch.cuda.set_device(0)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert torch.cuda.device_count() == 4


LIGHTNING_INIT = textwrap.dedent("""
    import sys
    import torch
    import torch.distributed as dist

    port, device = sys.argv[1], sys.argv[2]
    torch.cuda.set_device(torch.device(device))
    try:
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                                device_id=torch.device(device))
    except Exception as exc:
        print("ERROR", type(exc).__name__, exc)
        raise SystemExit(1)
    t = torch.ones(2, device=device)
    dist.all_reduce(t)
    print(dist.get_backend(), t.device, t.tolist())
    dist.destroy_process_group()
""")


@pytest.mark.skipif("device_id" not in inspect.signature(torch.distributed.init_process_group).parameters,
                    reason="this torch's init_process_group has no device_id parameter, which Lightning passes")
@pytest.mark.slow
def test_lightning_device_id_on_the_cpu_target(tmp_path):
    script = tmp_path / "init.py"
    script.write_text(LIGHTNING_INIT)
    env = clean_env(TRANSFER_DEVICE="cpu", TRANSFER_QUIET=1)
    proc = python(str(script), str(free_port()), "cuda:1", env=env, timeout=300)
    assert proc.stdout.strip() == "gloo cpu [1.0, 1.0]", proc.stderr
    bad = python(str(script), str(free_port()), "cuda:5", env=env, timeout=300, check=False)
    assert bad.returncode != 0 and "TRANSFER_CPU_DEVICES" in bad.stdout + bad.stderr, bad.stderr


def test_cpu_device_id_is_dropped_only_after_checking_it(cpu_target):
    import torch.distributed as dist

    with pytest.raises(TransferError, match="invalid device ordinal cuda:7"):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:1", rank=0, world_size=1,
                                device_id=torch.device("cuda", 7))


# ---------------------------------------------------------------- 4. tccl: device set for every group

MESH_WITHOUT_SET_DEVICE = textwrap.dedent("""
    import os
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cuda", (1,))  # creates the process group with torch's own function
    sub = dist.new_group([0])
    t = torch.ones(2, device="cuda")
    dist.all_reduce(t, group=sub)
    print(mesh.device_type, t.device, t.tolist())
    dist.destroy_process_group()
""")


@needs_standins
@pytest.mark.parametrize("disable", ["", "distributed.set_device_before_init"])
def test_tccl_device_is_set_for_groups_torch_creates(disable, tmp_path):
    script = tmp_path / "mesh.py"
    script.write_text(MESH_WITHOUT_SET_DEVICE)
    stats = tmp_path / "stats"
    env = clean_env(TRANSFER_DEVICE="sdaa", PYTHONPATH=vendor_path("sdaa"), TRANSFER_QUIET=1, TRANSFER_DISABLE=disable,
                    SIM_ACCEL_STATS_DIR=str(stats),
                    RANK=0, WORLD_SIZE=1, MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port())
    env.pop("LOCAL_RANK", None)
    proc = python(str(script), env=env, timeout=600, check=False)
    if disable:  # the stand-in's tccl refuses, as the real one does (seed 000): the test can fail
        assert proc.returncode != 0 and "no sdaa device has been set" in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
        # the mesh is the target's (patches/device_mesh.py: FSDP2 and DTensor place shards by it)
        assert proc.stdout.split() == ["sdaa", "sdaa:0", "[1.0,", "1.0]"], proc.stdout
        [record] = [json.load(open(f)) for f in stats.glob("*.json")]
        assert record["backend"] == "tccl" and record["collectives"].get("allreduce", 0) >= 1, record
