"""install / uninstall / status: identity, idempotence, thread safety, switches."""

import threading

import pytest
import torch

import transfer
from transfer.errors import UnknownDeviceError, UnsupportedCudaAPI


def snapshot(records):
    return {(id(r.owner), r.attribute): (r.owner, r.attribute, vars(r.owner).get(r.attribute, "<absent>"))
            for r in records}


def test_uninstall_restores_every_identical_object(monkeypatch):
    monkeypatch.setenv("TRANSFER_QUIET", "1")
    transfer.uninstall()
    native = torch.cuda.is_available()  # torch's own answer on this machine
    # Record what each patched attribute holds before install, from a first install's list.
    transfer.install("cpu")
    from transfer import _active

    targets = [(r.owner, r.attribute) for r in _active.registry.records()]
    transfer.uninstall()
    before = {(id(o), a): vars(o).get(a, "<absent>") for o, a in targets}
    assert len(targets) > 100
    transfer.install("cpu")
    assert torch.cuda.is_available() and torch.ones(1).is_cuda
    transfer.uninstall()
    after = {(id(o), a): vars(o).get(a, "<absent>") for o, a in targets}
    changed = [key for key in before if before[key] is not after[key]]
    assert changed == []
    assert torch.cuda.is_available() is native
    assert "is_cuda" not in torch.Tensor.__dict__ and not torch.ones(1).is_cuda
    with pytest.raises(RuntimeError):
        torch.batch_norm_stats(torch.ones(2, 2), 1e-5)  # CPU kernels are unregistered again


def test_install_is_idempotent_and_rejects_a_second_target(cpu_target):
    first = transfer.status()
    again = transfer.install("cpu")
    assert again["patches"] == first["patches"]
    assert transfer.install()["device"] == "cpu"  # 'auto' accepts what is active
    with pytest.raises(transfer.TransferError, match="uninstall"):
        transfer.install("sdaa")


def test_install_is_thread_safe(monkeypatch):
    monkeypatch.setenv("TRANSFER_QUIET", "1")
    transfer.uninstall()
    results, errors = [], []
    barrier = threading.Barrier(8)

    def worker():
        barrier.wait()
        try:
            results.append(transfer.install("cpu")["patches"])
        except Exception as exc:  # pragma: no cover - the assertion shows it
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        assert len(results) == 8 and all(r == results[0] for r in results)
        assert len(results[0]) == len(set(results[0]))  # nothing patched twice
    finally:
        transfer.uninstall()


def test_disable_skips_named_patches_and_areas(install_cpu):
    info = install_cpu(TRANSFER_DISABLE="tensor.is_cuda,factories")
    assert "tensor.to" in info["patches"] and "tensor.is_cuda" not in info["patches"]
    assert not any(p.startswith("factories.") for p in info["patches"])
    assert info["disabled"] == ["factories", "tensor.is_cuda"]
    assert not torch.ones(1).is_cuda
    assert torch.ones(1).cuda().device.type == "cpu"


def test_disabling_a_collective_leaves_both_of_its_homes_alone(install_cpu):
    """`dist.all_reduce` is `distributed_c10d.all_reduce` in torch, and libraries call either: a user who
    disables `collectives.all_reduce` gets torch's function in both places, as before install."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    transfer.uninstall()
    original, reduce = dist.all_reduce, dist.reduce
    assert c10d.all_reduce is original
    info = install_cpu(TRANSFER_DISABLE="collectives.all_reduce")
    assert dist.all_reduce is original and c10d.all_reduce is original
    assert not any(p.startswith("collectives.all_reduce.") or p == "collectives.all_reduce" for p in info["patches"])
    assert {"collectives.reduce", "collectives.reduce.c10d"} <= set(info["patches"])  # the others stay
    assert dist.reduce is not reduce and c10d.reduce is not reduce


def test_strict_mode_turns_warnings_into_errors(install_cpu):
    install_cpu(TRANSFER_STRICT=1)
    with pytest.raises(UnsupportedCudaAPI, match="max_memory_allocated"):
        torch.cuda.max_memory_allocated()
    with pytest.raises(UnsupportedCudaAPI, match="TRANSFER_STRICT"):
        torch.cuda.nvtx.range_push("step")


def test_unknown_device_lists_choices():
    with pytest.raises(UnknownDeviceError) as info:
        transfer.install("tpu")
    message = str(info.value)
    from transfer.profiles import CHOICES

    for choice in CHOICES:
        assert choice in message


#: Every TRANSFER_* value that cannot work: (variable, value, what the one line says).
BAD_VALUES = [
    ("TRANSFER_LOG", "{file}", "is a file, not a directory"),
    ("TRANSFER_LOG", "/proc/transfer-nope", "cannot create the log directory"),
    ("TRANSFER_REPORT", "{tmp}/no-such-folder/report.json", "does not exist"),
    ("TRANSFER_REPORT", "{tmp}", "is a directory"),
    ("TRANSFER_CPU_DEVICES", "two", "is not a device count"),
    ("TRANSFER_CPU_DEVICES", "0", "is not a device count"),
    ("TRANSFER_PLAN", "nup", "is not a target"),
    ("TRANSFER_QUIET", "ture", "is not a yes/no value"),
    ("TRANSFER_CPU_AMP_DTYPE", "half", "is not a choice"),
    ("TRANSFER_DEVICE", "nup", "Did you mean 'npu'?"),
]


@pytest.mark.parametrize("name, value, said", BAD_VALUES, ids=[f"{n}={v}" for n, v, _ in BAD_VALUES])
def test_every_bad_transfer_value_stops_the_install_with_one_line_naming_it(monkeypatch, tmp_path, name, value, said):
    """One line naming the variable, the value and the fix; torch left untouched. TRANSFER_LOG=<a file>
    used to raise FileExistsError from deep inside the install, TRANSFER_CPU_DEVICES=two was ignored
    (2 devices), and TRANSFER_REPORT's missing folder raised at exit."""
    (tmp_path / "t.log").write_text("")
    value = value.format(file=tmp_path / "t.log", tmp=tmp_path)
    transfer.uninstall()
    monkeypatch.setenv("TRANSFER_QUIET", "1")
    monkeypatch.setenv("TRANSFER_LOG", str(tmp_path / "log")) if name == "TRANSFER_PLAN" else None
    monkeypatch.setenv(name, value)
    before = torch.cuda.is_available
    with pytest.raises(transfer.TransferError) as info:
        transfer.install(None if name == "TRANSFER_DEVICE" else "cpu")
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{name}={value!r}") and said in message, message
    assert "unset" in message or "Choose one of" in message  # the fix
    assert torch.cuda.is_available is before and not transfer.status()["active"]


def test_off_installs_nothing():
    transfer.uninstall()
    before = {name: getattr(torch.cuda, name) for name in ("is_available", "device_count", "set_device")}
    native = torch.cuda.is_available()
    info = transfer.install("off")
    assert info == {"active": False, "reason": "TRANSFER_DEVICE=off"}
    assert transfer.status() == info
    assert {name: getattr(torch.cuda, name) for name in before} == before  # the very same functions
    assert torch.cuda.is_available() is native and "is_cuda" not in torch.Tensor.__dict__


def test_report_lists_translations_with_call_sites(cpu_target):
    torch.zeros(2, device="cuda:0")
    torch.ones(2).to("cuda")
    text = transfer.report()
    assert "torch.zeros: 'cuda:0' -> cpu" in text
    assert "Tensor.to: 'cuda' -> cpu" in text
    assert __file__ in text
