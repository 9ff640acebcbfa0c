"""On the cpu target CUDA's random streams are CUDA's: the CPU stream stays the CPU's.

CUDA seeding, device factories and dropout never touch the CPU generator (on a real GPU torch.randperm
after torch.manual_seed(0) is the same with or without torch.cuda.manual_seed / manual_seed_all:
tests/oracle/cuda_recorded.json, "cuda_seeding_leaves_the_cpu_stream"); each virtual device has a
generator of its own; RNG states round-trip and checkpoints resume; activation checkpointing recomputes
the same dropout; a random op left on the CPU stream is named once (docs/limits.md).
"""

import inspect
import logging

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from transfer.patches.rng import _like_takes_generator


def _cpu_stream():
    return torch.randperm(10).tolist()


def _plain_stream():
    torch.manual_seed(0)
    return _cpu_stream()


def test_cuda_seeding_and_state_calls_leave_the_cpu_stream(cpu_target):
    """[recorded on a GPU] torch.cuda.manual_seed / manual_seed_all / seed / seed_all / get_rng_state /
    set_rng_state(_all) act on the CUDA generators only."""
    plain = _plain_stream()
    torch.manual_seed(0)
    torch.cuda.manual_seed(123)
    torch.cuda.manual_seed_all(5)
    torch.cuda.seed()
    torch.cuda.seed_all()
    torch.cuda.set_rng_state(torch.cuda.get_rng_state())
    torch.cuda.set_rng_state_all(torch.cuda.get_rng_state_all())
    assert _cpu_stream() == plain


def test_device_factories_draw_from_the_device_generator(cpu_target):
    """torch.randn(..., device='cuda') & co. draw from the CUDA generator, not the CPU stream;
    the same CUDA seed repeats the draws, another seed does not."""
    plain = _plain_stream()
    torch.manual_seed(0)
    torch.randn(100, device="cuda")
    torch.rand(3, device="cuda:1")
    torch.randint(0, 10, (5,), device=torch.device("cuda"))
    torch.randperm(20, device="cuda")
    torch.normal(0.0, 1.0, size=(3,), device="cuda")
    if _like_takes_generator(torch.rand_like):  # older torch: *_like draw from the CPU stream (docs/limits.md)
        torch.rand_like(torch.ones(2), device="cuda")
    assert _cpu_stream() == plain
    torch.cuda.manual_seed(3)
    a = torch.rand(5, device="cuda")
    torch.cuda.manual_seed(3)
    b = torch.rand(5, device="cuda")
    torch.cuda.manual_seed(4)
    c = torch.rand(5, device="cuda")
    assert torch.equal(a, b) and not torch.equal(a, c)
    g = torch.Generator(device="cuda").manual_seed(3)  # an explicit generator is used as given
    assert torch.equal(torch.rand(5, device="cuda", generator=g), a)


def test_each_device_has_its_own_generator(cpu_target, monkeypatch):
    monkeypatch.setenv("TRANSFER_CPU_DEVICES", "2")
    torch.manual_seed(7)  # seeds every device, as torch.manual_seed does on CUDA
    torch.cuda.manual_seed(5)  # the current device (0) only
    assert (torch.initial_seed(), torch.cuda.initial_seed()) == (7, 5)
    with torch.cuda.device(1):
        assert torch.cuda.initial_seed() == 7
        on_1 = torch.rand(3, device="cuda")
    torch.manual_seed(7)
    assert torch.equal(torch.rand(3, device="cuda:1"), on_1)  # 'cuda:1' draws from device 1's generator
    generators = torch.cuda.default_generators
    assert len(generators) == 2 and all(isinstance(g, torch.Generator) for g in generators)
    assert generators[0].initial_seed() == 7 and generators[1].initial_seed() == 7
    states = torch.cuda.get_rng_state_all()
    assert len(states) == 2 and {s.dtype for s in states} == {torch.uint8}
    state = torch.cuda.get_rng_state()
    assert (state.dtype, state.device.type, state.dim()) == (torch.uint8, "cpu", 1)


def test_a_repeated_device_draw_follows_the_current_device(cpu_target, monkeypatch):
    """The same `device='cuda'` call in a loop (the factories' memo of the last device argument)
    draws from the current device's generator each time, as on CUDA, and leaves the CPU stream."""
    monkeypatch.setenv("TRANSFER_CPU_DEVICES", "2")
    plain = _plain_stream()
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(11)
    drawn = []
    for device in (0, 0, 1, 1, 0):
        torch.cuda.set_device(device)
        drawn.append(torch.randn(3, device="cuda"))
    torch.cuda.set_device(0)
    torch.cuda.manual_seed_all(11)
    want = {0: [torch.randn(3, device="cuda:0") for _ in range(3)],
            1: [torch.randn(3, device="cuda:1") for _ in range(2)]}
    expected = [want[0][0], want[0][1], want[1][0], want[1][1], want[0][2]]
    assert all(torch.equal(a, b) for a, b in zip(drawn, expected))
    assert _cpu_stream() == plain


def test_rng_state_round_trips_and_checkpoint_resume(cpu_target, tmp_path):
    torch.manual_seed(0)
    torch.rand(3, device="cuda")
    checkpoint = {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all()}
    torch.save(checkpoint, tmp_path / "rng.pt")
    first = (torch.randperm(6).tolist(), torch.rand(3, device="cuda"), torch.rand(3, device="cuda:1"))
    loaded = torch.load(tmp_path / "rng.pt", weights_only=False)
    torch.set_rng_state(loaded["cpu"])
    torch.cuda.set_rng_state_all(loaded["cuda"])
    again = (torch.randperm(6).tolist(), torch.rand(3, device="cuda"), torch.rand(3, device="cuda:1"))
    assert first[0] == again[0] and torch.equal(first[1], again[1]) and torch.equal(first[2], again[2])
    state = torch.cuda.get_rng_state()
    with torch.random.fork_rng(devices=[0]):
        torch.rand(4, device="cuda")
    assert torch.equal(torch.cuda.get_rng_state(), state)
    torch.manual_seed(0)  # restoring the CUDA states alone does not rewind the CPU stream
    saved = torch.cuda.get_rng_state_all()
    first = _cpu_stream()
    torch.cuda.set_rng_state_all(saved)
    torch.cuda.set_rng_state(saved[0])
    assert _cpu_stream() != first


def _sampler_orders(train_step):
    from torch.utils.data import DataLoader, RandomSampler, random_split

    torch.manual_seed(0)
    orders = []
    for _ in range(3):
        orders.append(list(RandomSampler(range(12))))
        train_step()
    loader = DataLoader(list(range(8)), batch_size=4, shuffle=True)
    orders.append([batch.tolist() for batch in loader])
    orders.append([list(s.indices) for s in random_split(range(10), [7, 3])])
    return orders


def test_dropout_in_a_training_loop_leaves_the_data_order(cpu_target):
    """On CUDA dropout, Dropout2d and SDPA's dropout draw from the CUDA generator, so the epochs'
    shuffles (RandomSampler seeds itself from the CPU stream), the DataLoader order and
    random_split are those of a run without them."""
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.ReLU(), nn.Linear(8, 8)).cuda()
    conv = nn.Sequential(nn.Conv2d(2, 2, 1), nn.Dropout2d(0.5), nn.AlphaDropout(0.2)).cuda()

    def step():
        x = torch.ones(4, 8, device="cuda")
        q = model(x).view(1, 1, 4, 8)
        attention = F.scaled_dot_product_attention(q, q, q, dropout_p=0.3)
        (attention.sum() + conv(torch.ones(1, 2, 3, 3, device="cuda")).sum()).backward()

    assert _sampler_orders(step) == _sampler_orders(lambda: None)


@pytest.mark.parametrize("reentrant", [True, False])
def test_activation_checkpointing_recomputes_the_same_dropout(cpu_target, reentrant):
    """torch.utils.checkpoint restores the device's RNG state for the recomputation (torch docs:
    preserve_rng_state), so gradients equal the plain run's, and the CPU stream is untouched."""
    from torch.utils.checkpoint import checkpoint

    layer = nn.Linear(8, 8).cuda()

    def block(x):
        return F.dropout(layer(x), 0.5, True) * x

    plain = _plain_stream()
    torch.manual_seed(0)
    x = torch.randn(4, 8, device="cuda", requires_grad=True)
    state = torch.cuda.get_rng_state()
    block(x).sum().backward()
    expected, x.grad = x.grad.clone(), None
    after_plain = torch.cuda.get_rng_state()
    torch.cuda.set_rng_state(state)
    checkpoint(block, x, use_reentrant=reentrant).sum().backward()
    assert torch.equal(x.grad, expected)
    assert torch.equal(torch.cuda.get_rng_state(), after_plain)  # the recomputation does not advance it
    assert _cpu_stream() == plain  # x, the masks and the recomputation drew on the device only


def test_a_random_op_on_a_device_tensor_is_named_once(cpu_target, caplog):
    """What still differs (docs/limits.md): x.normal_() on a tensor standing for a CUDA tensor
    draws from the CPU stream. The first such call in the script's code says so, naming the line;
    torch's own host-side draws (RandomSampler) and later calls stay quiet."""
    caplog.set_level(logging.WARNING, logger="transfer")
    list(torch.utils.data.RandomSampler(range(4)))
    d = torch.ones(3).cuda()
    assert not caplog.records
    d.normal_()
    line = inspect.currentframe().f_lineno - 1
    d.uniform_()
    torch.rand_like(d)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1, messages
    assert "Tensor.normal_" in messages[0] and f"{__file__}:{line}" in messages[0] and "CPU stream" in messages[0]
