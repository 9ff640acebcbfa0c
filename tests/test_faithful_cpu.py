"""Issue 17, items 1, 2 and 4: the cpu target computes what CUDA computes, or says why not.

Every expected value is CUDA's: torch's documented semantics, or what a real H100 did
(/work/shared/FACTS.md, "CUDA's own behaviour, recorded on a real GPU"). The cpu target runs
in-process (the `cpu_target` fixture); the same CUDA script runs on the cpu target and on every
stand-in in subprocesses (`test_cuda_script_moves_and_streams`).

1. Host-to-device moves copy: ``y = x.cuda(); y.add_(1)`` leaves ``x`` as it was [GPU record].
2. Random streams: CUDA seeding, device factories and dropout never touch the CPU generator
   [GPU record: torch.randperm after torch.manual_seed(0) is the same with or without
   torch.cuda.manual_seed / manual_seed_all]; each device has a generator of its own.
4. torch's own ``is_cuda`` reads: every site in the installed torch is classified, and the
   sites whose CUDA branch would treat host memory as CUDA memory see the real answer.
"""

import inspect
import json
import logging
import os

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import NO_STANDINS, STANDINS, VENDORS, clean_env, python
from transfer.patches.rng import _like_takes_generator

TensorBase = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase  # torch < 2.3: _TensorBase
HOST = [0.0, 1.0, 2.0, 3.0]


def host():
    return torch.arange(4, dtype=torch.float32)


# ------------------------------------------------------------------ 1. copies

MOVES = {
    "x.cuda()": lambda x: x.cuda(),
    "x.cuda(0)": lambda x: x.cuda(0),
    "x.cuda(non_blocking=True)": lambda x: x.cuda(non_blocking=True),
    "x.to('cuda')": lambda x: x.to("cuda"),
    "x.to('cuda:1')": lambda x: x.to("cuda:1"),
    "x.to('cuda', non_blocking=True)": lambda x: x.to("cuda", non_blocking=True),
    "x.to(device='cuda')": lambda x: x.to(device="cuda"),
    "x.to(torch.device('cuda', 0))": lambda x: x.to(torch.device("cuda", 0)),
    "x.to(0)": lambda x: x.to(0),
    "x.to('cuda', torch.float32)": lambda x: x.to("cuda", torch.float32),
    "x.to('cuda', copy=False)": lambda x: x.to("cuda", copy=False),
    "x.to('cuda', torch.float32, False, False)": lambda x: x.to("cuda", torch.float32, False, False),
    "x.pin_memory()": lambda x: x.pin_memory(),
    "torch.as_tensor(x, device='cuda')": lambda x: torch.as_tensor(x, device="cuda"),
    "torch.asarray(x, device='cuda')": lambda x: torch.asarray(x, device="cuda"),
}


@pytest.mark.parametrize("move", list(MOVES))
def test_host_to_device_moves_copy(cpu_target, move):
    """CUDA: a move from host memory to the device is a new tensor; changing it leaves x alone."""
    x = host()
    y = MOVES[move](x)
    y.add_(1)
    assert y is not x and x.tolist() == HOST and y.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_numpy_data_moved_to_cuda_is_a_copy(cpu_target):
    """torch.as_tensor / torch.asarray of a NumPy array with device='cuda': the array is host memory,
    the result device memory; without a device they share memory (torch's docs), as natively."""
    for make in (lambda a: torch.as_tensor(a, device="cuda"), lambda a: torch.asarray(a, device="cuda"),
                 lambda a: torch.as_tensor(a, dtype=torch.float64, device="cuda")):
        array = np.arange(3.0)
        make(array).add_(1)
        assert array.tolist() == [0.0, 1.0, 2.0]
    array = np.arange(3.0)
    torch.as_tensor(array).add_(1)
    assert array.tolist() == [1.0, 2.0, 3.0]  # no device: shared, as natively
    x = host()
    assert torch.as_tensor(x) is x and torch.as_tensor(x, device="cpu") is x
    x.requires_grad_()  # a move is differentiable on CUDA (a copy in the graph): gradients reach x
    (x.cuda() * 2 + x.to("cuda") * 3 + torch.as_tensor(x, device="cuda")).sum().backward()
    assert x.grad.tolist() == [6.0] * 4


@pytest.mark.parametrize("how", ["model.cuda()", "model.to('cuda')", "model.to(0)", "model.to(device='cuda:1')"])
def test_module_moves_copy_data_and_keep_parameters(cpu_target, how):
    """Module.cuda/Module.to: in place on the module, the Parameter objects stay (an optimizer built
    before the move keeps training them), their data is a copy: a tensor the script built the
    weights from (nn.Embedding.from_pretrained shares it) is not trained along."""
    pretrained = torch.arange(6.0).reshape(3, 2)
    model = nn.Embedding.from_pretrained(pretrained, freeze=False)
    weight = model.weight
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    assert eval(how, {"model": model}) is model
    assert model.weight is weight and model.weight.is_cuda
    model(torch.tensor([0, 1], device="cuda")).sum().backward()
    optimizer.step()
    assert pretrained.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    assert model.weight.tolist() == [[-1.0, 0.0], [1.0, 2.0], [4.0, 5.0]]  # trained: the optimizer's parameter
    with pytest.raises(RuntimeError, match="cuda:5"):  # TRANSFER_CPU_DEVICES unset: 2 devices
        model.to("cuda:5")


# ------------------------------------------------------------------ 2. random streams

def _cpu_stream():
    return torch.randperm(10).tolist()


def _plain_stream():
    torch.manual_seed(0)
    return _cpu_stream()


def test_cuda_seeding_and_state_calls_leave_the_cpu_stream(cpu_target):
    """[GPU record] torch.cuda.manual_seed / manual_seed_all / seed / seed_all / get_rng_state /
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
    if _like_takes_generator(torch.rand_like):  # older torch: *_like draw from the CPU stream (Known limits)
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
    """What still differs (README, Known limits): x.normal_() on a tensor standing for a CUDA tensor
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


# ------------------------------------------------------------------ 4. torch's own is_cuda reads

def test_every_is_cuda_read_in_torch_is_classified_and_documented():
    """`python -m transfer.patches.torch_sites` lists every `.is_cuda` read in the installed torch; each
    has a decision, and docs/torch-is-cuda-sites.md is the table (regenerate it with
    `python -m transfer.patches.torch_sites --markdown > docs/torch-is-cuda-sites.md`)."""
    from transfer.patches import torch_sites

    sites = list(torch_sites.scan())
    assert len(sites) > 20
    missing = [s for s in sites if torch_sites.decision(s) is None]
    assert not missing, f"classify these in transfer/patches/torch_sites.py SITES: {missing}"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "docs", "torch-is-cuda-sites.md"), encoding="utf-8") as fh:
        assert fh.read() == torch_sites.markdown(), "docs/torch-is-cuda-sites.md is stale"


def test_cuda_array_interface_is_not_offered_for_host_memory(cpu_target):
    """torch/_tensor.py offers __cuda_array_interface__ when `self.is_cuda`: on CUDA for device
    memory only (hasattr of a host tensor is False). On the cpu target it handed host pointers to
    consumers (CuPy, Numba) as CUDA memory; now torch's own read sees the real answer: a host
    tensor has none (as on CUDA) and a tensor standing for a CUDA tensor raises torch's own error,
    while the script's `x.is_cuda` still answers True at the native getter's cost."""
    h, d = torch.ones(2), torch.ones(2, device="cuda")
    assert not hasattr(h, "__cuda_array_interface__") and "__cuda_array_interface__" not in dir(h)
    with pytest.raises(AttributeError, match="non-CUDA tensor"):
        d.__cuda_array_interface__
    assert d.is_cuda and h.is_cuda  # the script's view: every tensor of the cpu target is "on CUDA"
    assert inspect.getattr_static(torch.Tensor, "is_cuda") is TensorBase.__dict__["is_cpu"]  # a C getter


def test_cuda_branches_that_compute_what_cuda_computes_stay(cpu_target):
    """Decision CUDA: torch._numpy's lstsq uses the 'gels' driver for CUDA tensors, CUDA's only
    driver; the cpu target gives CUDA's answer (a rank-deficient system: gels != gelsd), while a
    NATIVE site in the same process sees the real is_cuda."""
    tnp = pytest.importorskip("torch._numpy")  # torch >= 2.1
    assert not hasattr(torch.ones(1, device="cuda"), "__cuda_array_interface__")
    a = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0001]])
    b = np.array([1.0, 2.0, 3.0])
    got = tnp.linalg.lstsq(tnp.asarray(a), tnp.asarray(b), rcond=None)[0].tensor
    gels = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b).unsqueeze(1), driver="gels").solution.squeeze(1)
    assert torch.allclose(got.double(), gels)


def test_uninstall_restores_torchs_code():
    import transfer
    from transfer.patches import torch_is_cuda

    code = torch.Tensor.__cuda_array_interface__.fget.__code__
    transfer.uninstall()
    os.environ["TRANSFER_QUIET"] = "1"
    transfer.install("cpu")
    try:
        assert torch.Tensor.__cuda_array_interface__.fget.__code__ is not code
        assert torch_is_cuda  # the area that renamed it
    finally:
        transfer.uninstall()
    assert torch.Tensor.__cuda_array_interface__.fget.__code__ is code
    assert not hasattr(torch.Tensor, "_transfer_native_is_cuda")


# ------------------------------------------------------------------ the same CUDA script on every target

CUDA_SCRIPT = r'''
import json
import torch
import torch.nn as nn
import torch.nn.functional as F

out = {}
x = torch.arange(4.0)
moved = [x.cuda(), x.to("cuda"), x.to("cuda:0", non_blocking=True), x.to(device="cuda"), x.pin_memory(),
         torch.as_tensor(x, device="cuda")]
for y in moved:
    y.add_(1)
out["host_after_moves"] = x.tolist()
model = nn.Linear(2, 2)
data = model.weight.data
before = data.tolist()
model.cuda()
with torch.no_grad():
    model.weight.mul_(0)
out["host_weights_unchanged"] = data.tolist() == before

torch.manual_seed(0)
plain = torch.randperm(10).tolist()
torch.manual_seed(0)
torch.cuda.manual_seed(123)
torch.cuda.manual_seed_all(5)
torch.randn(100, device="cuda")
torch.randint(0, 10, (5,), device="cuda")
F.dropout(torch.ones(64, device="cuda"), 0.5)
out["cpu_stream_kept"] = torch.randperm(10).tolist() == plain
torch.cuda.manual_seed(3)
a = torch.rand(5, device="cuda")
torch.cuda.manual_seed(3)
out["device_seed_repeats"] = torch.equal(a, torch.rand(5, device="cuda"))
torch.manual_seed(7)
torch.cuda.manual_seed(5)
out["initial_seeds"] = [torch.initial_seed(), torch.cuda.initial_seed()]
print("RESULT " + json.dumps(out))
'''

CUDA_ANSWERS = {"host_after_moves": [0.0, 1.0, 2.0, 3.0], "host_weights_unchanged": True,
                "cpu_stream_kept": True, "device_seed_repeats": True, "initial_seeds": [7, 5]}


@pytest.mark.parametrize("target", ["cpu", *(pytest.param(v, marks=pytest.mark.slow) for v in ("npu", "sdaa", "gcu"))])
def test_cuda_script_moves_and_streams(target, tmp_path):
    """A CUDA script, unmodified, through the environment way in: the answers CUDA gives
    [GPU record for the moves and the seeding; torch docs for the rest]. The stand-ins are real
    devices, so they copy and keep separate generators natively: they show the same answers."""
    if target != "cpu" and not STANDINS:
        pytest.skip(NO_STANDINS)
    script = tmp_path / "train.py"
    script.write_text(CUDA_SCRIPT)
    env = clean_env(TRANSFER_DEVICE=target, TRANSFER_QUIET=1, TRANSFER_CPU_DEVICES=2, SIM_ACCEL_DEVICE_COUNT=2)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if target != "cpu":
        env["PYTHONPATH"] = os.pathsep.join([VENDORS] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = python(str(script), env=env, timeout=600)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    assert json.loads(line[len("RESULT "):]) == CUDA_ANSWERS, proc.stderr
