"""torch's data parallelism in one process, the class and its functional form, on every target.

DCGAN's ``if input.is_cuda and self.ngpu > 1: output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))``
is reached under transfer (``is_cuda`` is True on the target), so it must compute what it computes on two
GPUs. The oracle is torch's documented semantics (torch/nn/parallel/*.py), restated here without transfer
(`cuda_data_parallel`): the batch split with ``Tensor.chunk``, one replica per chunk sharing the parameters
(their gradients sum), the first replica on the module's own buffers and the others on copies, so
BatchNorm normalises each chunk with its own statistics and its running statistics come from the first
chunk; the outputs concatenated on the output device. Not the bare module on the whole batch.
"""

import copy
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.nn as nn

from conftest import NO_STANDINS, SCRIPTS, STANDINS, python, target_env

sys.path.insert(0, os.path.join(SCRIPTS, "idioms"))
from dcgan_data_parallel import Discriminator, Generator, weights_init  # noqa: E402

DCGAN = os.path.join(SCRIPTS, "idioms", "dcgan_data_parallel.py")
PROBE = os.path.join(SCRIPTS, "data_parallel_probe.py")
NZ, NGF, NDF = 16, 8, 8
TARGETS = ("cpu", "npu", "sdaa", "gcu")


def cuda_data_parallel(module, x, n, dim=0):
    """What ``torch.nn.parallel.data_parallel(module, x, range(n))`` computes on n CUDA devices."""
    chunks = x.chunk(n, dim)
    outputs = [module(chunks[0])]
    for chunk in chunks[1:]:
        buffers = {name: b.clone() for name, b in module.named_buffers()}
        outputs.append(torch.func.functional_call(module, buffers, (chunk,)))
    return torch.cat(outputs, dim)


def dcgan(seed=0):
    torch.manual_seed(seed)
    netG, netD = Generator(2, NZ, NGF), Discriminator(2, NDF)
    netG.apply(weights_init)
    netD.apply(weights_init)
    return netG, netD


def reference_step(netG, netD, noise):
    """The probe's step on two CUDA devices, per `cuda_data_parallel`."""
    fake = cuda_data_parallel(netG.main, noise, 2)
    output = cuda_data_parallel(netD.main, fake, 2).view(-1, 1).squeeze(1)
    nn.BCELoss()(output, torch.ones_like(output)).backward()
    return fake, output


def assert_same(actual, expected, what):
    assert actual.shape == expected.shape and torch.equal(actual.cpu(), expected.detach()), what


# ------------------------------------------------------------------ in process, the cpu target

def test_functional_data_parallel_computes_the_two_gpu_split(cpu_target):
    netG, netD = dcgan()
    refG, refD = dcgan()
    noise = torch.randn(7, NZ, 1, 1)  # 7 over 2 devices: chunks of 4 and 3, as torch.chunk splits
    fake_ref, output_ref = reference_step(refG, refD, noise)
    netG.to("cuda:0")
    netD.to("cuda:0")
    fake = netG(noise.cuda())
    output = netD(fake)
    nn.BCELoss()(output, torch.ones_like(output)).backward()
    assert_same(fake, fake_ref, "generator output")
    assert_same(output, output_ref, "discriminator output")
    whole = copy.deepcopy(refG.main)(noise).detach()
    assert not torch.equal(fake.detach(), whole)  # BatchNorm per chunk: not the bare module on the whole batch
    for (name, p), q in zip([*netG.named_parameters(), *netD.named_parameters()], [*refG.parameters(),
                                                                                   *refD.parameters()]):
        assert_same(p.grad, q.grad, f"gradient of {name}")
    for (name, b), c in zip([*netG.named_buffers(), *netD.named_buffers()], [*refG.buffers(), *refD.buffers()]):
        assert_same(b, c, f"buffer {name} (the first chunk's running statistics)")


def test_data_parallel_class_over_two_devices_splits_as_on_cuda(cpu_target):
    netG, _ = dcgan()
    refG, _ = dcgan()
    noise = torch.randn(6, NZ, 1, 1)
    expected = cuda_data_parallel(refG.main, noise, 2)
    model = nn.DataParallel(netG.main, device_ids=[0, 1]).cuda()
    out = model(noise.cuda())
    assert_same(out, expected, "DataParallel output")
    for b, c in zip(netG.main.buffers(), refG.main.buffers()):
        assert_same(b, c, "running statistics")


class Scale(nn.Module):
    def forward(self, x, factor, shift=None, note="none"):
        assert isinstance(factor, float) and note == "kept"  # non-tensor arguments go to every replica as they are
        return x * factor + (shift if shift is not None else 0)


def test_data_parallel_splits_arguments_as_torch_does(cpu_target):
    x, shift = torch.arange(12.0).view(6, 2), torch.arange(6.0).view(6, 1)
    out = nn.parallel.data_parallel(Scale(), (x.cuda(), 2.0), [0, 1], module_kwargs={"shift": shift, "note": "kept"})
    assert torch.equal(out, x * 2.0 + shift)
    one = torch.ones(1, 2)  # a batch of one: one chunk, one replica
    assert torch.equal(nn.parallel.data_parallel(nn.Identity(), one.cuda(), [0, 1]), one)
    columns = nn.parallel.data_parallel(nn.Softmax(dim=1), x.cuda(), [0, 1], dim=1)  # split along dim 1
    assert torch.equal(columns, torch.cat([c.softmax(dim=1) for c in x.chunk(2, 1)], 1))


class Fails(nn.Module):
    def forward(self, x):
        if x[0, 0] > 0:
            raise ValueError("the second chunk")
        return x


def test_data_parallel_errors_are_cudas(cpu_target):
    x = torch.tensor([[-1.0], [1.0]])
    with pytest.raises(ValueError, match=r"Caught ValueError in replica 1 on device 1"):
        nn.parallel.data_parallel(Fails(), x.cuda(), [0, 1])
    with pytest.raises(RuntimeError, match=r"invalid device ordinal cuda:5"):
        nn.parallel.data_parallel(nn.Identity(), x.cuda(), [0, 5])
    with pytest.raises(RuntimeError, match=r"on device cpu \(device_ids\[0\]\) but found one of them on device: meta"):
        nn.parallel.data_parallel(nn.Linear(1, 1, device="meta"), x.cuda(), [0, 1])


# ------------------------------------------------------------------ the DCGAN script, every target


def _probe(target, tmp_path):
    netG, netD = dcgan(seed=1)
    source, result = tmp_path / "in.pt", tmp_path / "out.pt"
    noise = torch.randn(9, NZ, 1, 1)
    torch.save({"nz": NZ, "ngf": NGF, "ndf": NDF, "G": netG.state_dict(), "D": netD.state_dict(), "noise": noise},
               source)
    python(PROBE, str(source), str(result), env=target_env(target), timeout=600)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the probe's (clean_env: OMP_NUM_THREADS=1), so kernels sum in the same order
    try:
        fake, output = reference_step(netG, netD, noise)
    finally:
        torch.set_num_threads(threads)
    return torch.load(result), fake, output, netG, netD


def _dcgan(target, tmp_path):
    stats = tmp_path / "stats"
    proc = python(DCGAN, "--cuda", "--ngpu", "2", "--outf", str(tmp_path / "out"), "--manualSeed", "1",
                  env=target_env(target, SIM_ACCEL_STATS_DIR=stats), timeout=600)
    return proc, stats


@pytest.mark.slow
@pytest.mark.parametrize("target", [t if t == "cpu" else pytest.param(t, marks=pytest.mark.skipif(
    not STANDINS, reason=NO_STANDINS)) for t in TARGETS])
def test_dcgan_with_two_gpus_on_every_target(target, tmp_path):
    """The probe's step equals CUDA's to the bit; the script as its users run it (--cuda --ngpu 2) trains on
    both devices (the stand-ins' allocator saw devices 0 and 1), and its discriminator learns."""
    import json

    with ThreadPoolExecutor(2) as pool:
        probe = pool.submit(_probe, target, tmp_path)
        script = pool.submit(_dcgan, target, tmp_path)
        (result, fake, output, netG, netD), (proc, stats) = probe.result(), script.result()

    device = "cpu" if target == "cpu" else f"{target}:0"
    assert (result["fake_device"], result["output_device"]) == (device, device)
    assert_same(result["fake"], fake, "generator output")
    assert_same(result["output"], output, "discriminator output")
    for name, p in [*(("G." + n, p) for n, p in netG.named_parameters()),
                    *(("D." + n, p) for n, p in netD.named_parameters())]:
        assert_same(result["grads"][name], p.grad, f"gradient of {name}")
    for name, b in [*(("G." + n, b) for n, b in netG.named_buffers()),
                    *(("D." + n, b) for n, b in netD.named_buffers())]:
        assert_same(result["buffers"][name], b, f"buffer {name}")

    steps = re.findall(r"\[(\d)/2\]\[(\d)/8\] Loss_D: ([\d.]+) Loss_G: ([\d.]+) D\(x\): ([\d.]+)", proc.stdout)
    assert len(steps) == 16, proc.stdout + proc.stderr
    first, last = float(steps[0][4]), float(steps[-1][4])
    assert last > first + 0.2, f"the discriminator did not learn: D(x) {first} -> {last}\n{proc.stdout}"
    assert f"parameters on {device} and {device}" in proc.stdout, proc.stdout
    state = torch.load(tmp_path / "out" / "netG_epoch_1.pth", map_location="cpu")
    assert all(torch.isfinite(t).all() for t in state.values())
    if target != "cpu":
        [record] = [json.load(open(stats / f)) for f in os.listdir(stats)]
        assert record["device_indices"] == [0, 1], record  # each replica on its own device, as on CUDA
