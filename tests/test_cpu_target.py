"""The cpu target in-process: each patch area against real torch calls."""

import importlib
import inspect
import io
import logging
from unittest import mock

import pytest
import torch
import torch.nn as nn

import transfer
from transfer.errors import TransferError, UnsupportedCudaAPI

from conftest import dynamo_traces_wrapper_checks

TensorBase = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase  # torch < 2.3: _TensorBase


def test_tensor_calls_land_on_cpu(cpu_target):
    x = torch.arange(4.0)
    assert x.cuda() is not x  # a host-to-device move is a copy, as on CUDA (test_cpu_copies.py)
    assert x.cuda(0).device.type == "cpu"
    assert x.to("cuda", non_blocking=True) is not x
    assert x.to(torch.device("cuda", 0)).device.type == "cpu"
    assert x.to("cuda:0", torch.float64).dtype == torch.float64
    assert x.to(device="cuda:0", dtype=torch.float16).dtype == torch.float16
    assert x.to(0).device.type == "cpu"
    assert x.to(torch.float16).dtype == torch.float16
    assert x.new_zeros(2, device="cuda").device.type == "cpu"
    assert x.pin_memory() is not x
    assert x.is_cuda and not torch.ones(1, device="meta").is_cuda


# Tensor.to argument forms: (CUDA spelling, hand-port spelling). The wrapper
# forwards by arity and drops the non_blocking keyword; each must behave as
# the native call does, identity and errors included. A move to CUDA is a
# copy (as on CUDA), so its hand port says copy=True.
TO_FORMS = [
    (("cuda",), {}, ("cpu",), {"copy": True}),
    (("cuda:1",), {}, ("cpu",), {"copy": True}),
    ((torch.device("cuda", 0),), {}, (torch.device("cpu"),), {"copy": True}),
    (("cuda",), {"non_blocking": True}, ("cpu",), {"non_blocking": True, "copy": True}),
    (("cuda",), {"copy": True}, ("cpu",), {"copy": True}),
    (("cuda",), {"copy": False}, ("cpu",), {"copy": True}),
    (("cuda", torch.float64), {}, ("cpu", torch.float64), {}),
    (("cuda", torch.float32), {}, ("cpu", torch.float32), {"copy": True}),
    (("cuda", torch.float32, True, False), {}, ("cpu", torch.float32, True, True), {}),
    (("cuda", torch.float64, True), {}, ("cpu", torch.float64, True), {}),
    (("cuda",), {"dtype": torch.float16, "non_blocking": True}, ("cpu",), {"dtype": torch.float16, "non_blocking": True}),
    ((), {"device": "cuda:0", "dtype": torch.float16}, (), {"device": "cpu", "dtype": torch.float16}),
    ((), {"device": "cuda"}, (), {"device": "cpu", "copy": True}),
    (("cpu",), {}, ("cpu",), {}),
    ((), {"dtype": torch.float64}, (), {"dtype": torch.float64}),
    ((torch.float16,), {}, (torch.float16,), {}),
    ((torch.float16,), {"non_blocking": True}, (torch.float16,), {"non_blocking": True}),
    ((torch.float16, False, True), {}, (torch.float16, False, True), {}),
    ((), {}, (), {}),
    (("cuda",), {"memory_format": torch.channels_last}, ("cpu",), {"memory_format": torch.channels_last}),
    (("cuda",), {"memory_format": torch.preserve_format}, ("cpu",), {"memory_format": torch.preserve_format,
                                                                    "copy": True}),
]


@pytest.mark.parametrize("cuda_args, cuda_kwargs, cpu_args, cpu_kwargs", TO_FORMS)
def test_tensor_to_forms_behave_as_the_native_call(cpu_target, monkeypatch, cuda_args, cuda_kwargs,
                                                  cpu_args, cpu_kwargs):
    monkeypatch.setenv("TRANSFER_CPU_DEVICES", "2")
    x = torch.arange(16.0).reshape(1, 1, 4, 4)
    got = x.to(*cuda_args, **cuda_kwargs)
    want = TensorBase.to(x, *cpu_args, **cpu_kwargs)
    assert (got is x) == (want is x)
    assert (got.dtype, got.device, got.is_contiguous(), got.stride()) == \
        (want.dtype, want.device, want.is_contiguous(), want.stride())
    assert torch.equal(got.float(), want.float())


def test_tensor_to_other_tensor_and_bad_arguments_behave_as_native(cpu_target):
    x, y = torch.arange(4.0), torch.zeros(2, dtype=torch.float64)
    assert x.to(y).dtype == torch.float64 and x.to(y, non_blocking=True).dtype == torch.float64
    for args, kwargs in [(("cuda_model.pt",), {}), ((), {"bogus": 1}), ((object(),), {})]:
        with pytest.raises((RuntimeError, TypeError)) as shim_error:
            x.to(*args, **kwargs)
        with pytest.raises(type(shim_error.value)):
            TensorBase.to(x, *args, **kwargs)


def test_device_memo_is_safe_across_threads(cpu_target, monkeypatch):
    """The last (argument, translation) pair is one tuple: threads alternating
    different arguments never get another argument's translation."""
    import threading

    monkeypatch.setenv("TRANSFER_CPU_DEVICES", "2")
    x = torch.ones(2)
    specs = [("cuda:0", torch.float64), (torch.device("cuda", 1), torch.float16), ("cuda", torch.bfloat16)]
    failures = []

    def hammer(spec, dtype):
        for _ in range(3000):
            got = x.to(spec, dtype)
            if got.dtype != dtype or got.device.type != "cpu":
                failures.append((spec, got.dtype))
            if x.to(spec) is x:
                failures.append((spec, "alias"))

    threads = [threading.Thread(target=hammer, args=s) for s in specs * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    with pytest.raises(cpu_target.TransferError, match="cuda:5"):
        x.to("cuda:5")  # the memo never answers for an argument it has not seen


def test_factories_and_default_device(cpu_target):
    for make in (lambda: torch.zeros(3, device="cuda"), lambda: torch.randn(2, 2, device="cuda:0"),
                 lambda: torch.full((2,), 1.0, device=torch.device("cuda")), lambda: torch.arange(3, device=0),
                 lambda: torch.zeros_like(torch.ones(2), device="cuda"), lambda: torch.tensor([1], device="cuda"),
                 lambda: torch.fft.fftfreq(4, device="cuda"), lambda: torch.eye(2, device="cuda:0")):
        assert make().device.type == "cpu"
    with torch.device("cuda"):
        assert torch.ones(1).device.type == "cpu"
    g = torch.Generator(device="cuda")
    assert isinstance(g, torch.Generator) and g.device.type == "cpu"
    assert isinstance(torch.default_generator, torch.Generator)
    torch.set_default_device("cuda")
    try:
        assert torch.empty(1).device.type == "cpu"
    finally:
        torch.set_default_device(None)


def test_module_moves(cpu_target):
    model = nn.Linear(2, 2)
    assert model.cuda() is model and next(model.parameters()).is_cuda
    assert model.to("cuda:0", torch.float64).weight.dtype == torch.float64
    empty = nn.Linear(2, 2, device="meta").to_empty(device="cuda")
    assert empty.weight.device.type == "cpu"
    lstm = nn.LSTM(4, 4).cuda()  # flatten_parameters must not take the cudnn path
    out, _ = lstm(torch.randn(3, 1, 4).cuda())
    assert out.shape == (3, 1, 4)


def test_cuda_namespace(cpu_target, monkeypatch):
    assert torch.cuda.is_available() and torch.cuda.device_count() == 2  # DEFAULT_DEVICES
    monkeypatch.setenv("TRANSFER_CPU_DEVICES", "3")
    assert torch.cuda.device_count() == 3
    torch.cuda.set_device("cuda:2")
    assert torch.cuda.current_device() == 2
    with torch.cuda.device(1):
        assert torch.cuda.current_device() == 1
    assert torch.cuda.current_device() == 2
    torch.cuda.set_device(0)
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.cuda.set_device(5)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    assert torch.cuda.get_device_properties(0).total_memory > 0
    assert torch.cuda.is_bf16_supported()
    torch.cuda.manual_seed(7)
    a = torch.randn(3, device="cuda")
    torch.manual_seed(7)  # the device generator is a CPU generator seeded alike here
    assert torch.equal(a, torch.randn(3))
    state = torch.cuda.get_rng_state()
    b = torch.rand(2, device="cuda")
    torch.cuda.set_rng_state(state)
    assert torch.equal(b, torch.rand(2, device="cuda"))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.randn(200, 200) @ torch.randn(200, 200)
    end.record()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) > 0
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda.current_stream().wait_stream(s)


def test_replacements_keep_what_torch_reads(install_cpu):
    wrapped = [n for n in torch.cuda.__all__ if hasattr(getattr(torch.cuda, n, None), "__wrapped__")]
    classes = [n for n in torch.cuda.__all__ if isinstance(getattr(torch.cuda, n, None), type)]
    install_cpu()
    missing = [n for n in wrapped if not hasattr(getattr(torch.cuda, n), "__wrapped__")]
    assert not missing, f"torch.cuda.{missing} lost __wrapped__ (torch 2.14's dynamo reads use_mem_pool's)"
    not_classes = [n for n in classes if not isinstance(getattr(torch.cuda, n), type)]
    assert not not_classes, f"torch.cuda.{not_classes} are no longer classes (dynamo tests isinstance)"
    assert not isinstance(object(), tuple(getattr(torch.cuda, n) for n in classes))
    importlib.import_module("torch._dynamo.variables.torch")  # imports on every torch


def test_torch_accelerator_names_no_accelerator_and_adam_steps(cpu_target):
    """A CUDA build without a GPU names CUDA its accelerator; the cpu target answers as a CPU build."""
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    if accelerator is not None:
        assert not accelerator.is_available() and accelerator.device_count() == 0
        if "check_available" in inspect.signature(accelerator.current_accelerator).parameters:  # torch >= 2.7
            assert accelerator.current_accelerator() is None
            assert accelerator.current_accelerator(check_available=True) is None
    model = nn.Linear(4, 2).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)  # its step asks torch.accelerator
    before = model.weight.detach().clone()
    model(torch.randn(3, 4, device="cuda")).sum().backward()
    optimizer.step()
    assert not torch.equal(before, model.weight)


def test_unsupported_api_raises_a_clear_error(cpu_target):
    with pytest.raises(UnsupportedCudaAPI) as info:
        torch.cuda.ExternalStream(0)
    assert "torch.cuda.ExternalStream" in str(info.value) and "cpu target" in str(info.value)


def test_placeholders_warn_once(cpu_target, caplog):
    with caplog.at_level(logging.WARNING, logger="transfer"):
        assert torch.cuda.max_memory_allocated() == 0
        assert torch.cuda.max_memory_allocated() == 0
        torch.cuda.nvtx.range_push("x")
        torch.cuda.nvtx.range_pop()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("max_memory_allocated" in m for m in messages) == 1
    assert sum("nvtx" in m for m in messages) == 1


def test_autocast_and_grad_scaler(cpu_target):
    model, x = nn.Linear(8, 8), torch.randn(4, 8)
    with torch.cuda.amp.autocast():
        assert model(x).dtype == torch.bfloat16  # fp16 policy on the cpu target
    with torch.autocast(device_type="cuda", dtype=torch.float16):
        assert model(x).dtype == torch.bfloat16
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert model(x).dtype == torch.bfloat16
    scaler = torch.cuda.amp.GradScaler()
    device_generic = hasattr(torch.amp, "GradScaler")  # torch < 2.3: torch.cuda.amp.GradScaler only
    assert scaler.is_enabled() and (not device_generic or scaler._device == "cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    scaler.scale(model(x).float().sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert not torch.equal(before, model.weight)
    assert scaler._scale.device.type == "cpu" and scaler.get_scale() == 65536.0
    model.weight.grad.fill_(float("inf"))  # an overflow: the step is skipped, the scale backs off
    after = model.weight.detach().clone()
    scaler.step(opt)
    scaler.update()
    assert torch.equal(after, model.weight) and scaler.get_scale() == 32768.0
    if device_generic:
        scaler2 = torch.amp.GradScaler("cuda")
        assert scaler2._device == "cpu"


def test_fp16_policy_can_be_kept(install_cpu):
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            pass
    except RuntimeError:  # torch < 2.3: CPU autocast is bfloat16 only; asking to keep fp16 is a clear error
        with pytest.raises(TransferError, match="TRANSFER_CPU_AMP_DTYPE=float16: .* no float16 CPU autocast"):
            install_cpu(TRANSFER_CPU_AMP_DTYPE="float16")
        assert not transfer.status()["active"]
        return
    install_cpu(TRANSFER_CPU_AMP_DTYPE="float16")
    with torch.autocast("cuda", dtype=torch.float16):
        assert nn.Linear(2, 2)(torch.randn(1, 2)).dtype == torch.float16


def saved(obj, location="cpu"):
    buf = io.BytesIO()
    with mock.patch("torch.serialization.location_tag", lambda storage: location):
        torch.save(obj, buf)
    buf.seek(0)
    return buf


def test_checkpoints_saved_on_cuda_load_in_every_map_location_form(cpu_target, tmp_path):
    state = {"w": torch.arange(3.0), "cuda_version": "12.1"}
    for map_location in (None, "cuda:0", "cuda", torch.device("cuda", 0), {"cuda:0": "cuda:0"},
                         lambda storage, loc: storage.cuda(0), lambda storage, loc: storage, "cpu"):
        loaded = torch.load(saved(state, "cuda:0"), map_location=map_location)
        assert torch.equal(loaded["w"], state["w"]) and loaded["w"].device.type == "cpu"
        assert loaded["cuda_version"] == "12.1"  # values are never rewritten
    path = tmp_path / "cuda_runs" / "cuda_model.pt"
    path.parent.mkdir()
    torch.save(state, path)
    assert torch.equal(torch.load(str(path), map_location="cuda:0")["w"], state["w"])


def test_dataloader_pin_memory_is_quiet(cpu_target, recwarn):
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2, pin_memory=True)
    assert [b[0].tolist() for b in loader] == [[0.0, 1.0], [2.0, 3.0]]
    assert not [w for w in recwarn if "pin_memory" in str(w.message)]


def test_data_parallel_equals_bare_module(cpu_target):
    torch.manual_seed(0)
    bare = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(6, 4)
    expected = bare(x)
    dp = nn.DataParallel(bare).cuda()
    assert torch.equal(dp(x.cuda()), expected)


def _step(x):
    y = x.to("cuda", non_blocking=True) * 2 + torch.zeros(4, device="cuda")
    return y.cuda() + torch.ones(4, device=torch.device("cuda", 0))


def test_torch_compile_with_translated_calls(cpu_target):
    import torch._dynamo

    x = torch.arange(4.0)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(_step, backend="eager")(x), _step(x))


def test_torch_compile_fullgraph_with_translated_calls(cpu_target):
    """fullgraph=True raises at the first graph break, naming its reason: no break is allowed."""
    import torch._dynamo

    if not dynamo_traces_wrapper_checks():  # torch 2.0's dynamo
        pytest.skip("this torch's dynamo cannot trace frozenset membership or dict.get, which the translation "
                    "wrappers use: translated calls are graph breaks, so fullgraph=True raises")
    x = torch.arange(4.0)
    torch._dynamo.reset()
    compiled = torch.compile(_step, fullgraph=True, backend="eager")
    assert torch.equal(compiled(x), _step(x))


def test_file_paths_are_never_rewritten(cpu_target, tmp_path):
    path = str(tmp_path / "cuda_checkpoint.pt")
    torch.save({"a": 1}, path)
    assert torch.load(path)["a"] == 1
    assert torch.ones(1).to("cuda").device.type == "cpu"
    with pytest.raises(RuntimeError):
        torch.ones(1).to("cuda_model.pt")  # not a device: torch's own error, untouched


@pytest.mark.slow
@pytest.mark.parametrize("mode", [pytest.param(None, marks=pytest.mark.compat), "reduce-overhead"])
def test_torch_compile_default_backend_trains(cpu_target, mode, monkeypatch, tmp_path):
    """Inductor reads torch.cuda.get_device_properties(); the cpu answer must satisfy it. mode=
    "reduce-overhead" (CUDA graphs on CUDA, computing what eager computes) asks for CUDA's caching
    allocator too (torch >= 2.13), which a CPU build of torch has not. On a CUDA build of torch without
    a GPU (the compat suite's torches), torch 2.14's inductor asks CUDA's device interface whether triton
    can run: it must say no, as natively there. Inductor's caches are private to the test: a cached
    graph would skip the compile this test is about."""
    import torch._dynamo
    import torch._inductor.config as inductor_config

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    no_cache = {name: value for name, value in (("force_disable_caches", True), ("fx_graph_cache", False))
                if hasattr(inductor_config, name)}
    with inductor_config.patch(no_cache):
        _compiled_model_trains_as_eager(mode)


def _compiled_model_trains_as_eager(mode):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1)).cuda()
    reference = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, fullgraph=True, mode=mode)
    x = torch.randn(4, 8, device="cuda")
    compiled(x).sum().backward()
    reference(x).sum().backward()
    for got, want in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(got.grad, want.grad, atol=1e-6)
    for _ in range(3):  # CUDA graphs record on a later call than the first
        assert torch.allclose(compiled(x), reference(x), atol=1e-6)


def test_torch_asking_for_the_capability_itself_is_silent(cpu_target, caplog, tmp_path):
    """dist.broadcast calls torch.cuda.get_device_capability(t.device) for every tensor whose
    is_cuda is True; that is torch's call, not the user's: no placeholder warning for it."""
    import torch.distributed as dist

    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        with caplog.at_level(logging.WARNING, logger="transfer"):
            dist.broadcast(torch.ones(2, device="cuda"), src=0)
            objects = [{"lr": 0.1}]
            dist.broadcast_object_list(objects, src=0)
        assert objects == [{"lr": 0.1}]
        assert not [r for r in caplog.records if "get_device_capability" in r.getMessage()]
        with caplog.at_level(logging.WARNING, logger="transfer"):
            assert torch.cuda.get_device_capability() == (8, 0)
            assert torch.cuda.get_device_capability("cuda:0") == (8, 0)
        assert sum("get_device_capability" in r.getMessage() for r in caplog.records) == 1
    finally:
        dist.destroy_process_group()


def test_compiled_is_cuda_matches_eager_and_recompiles_after_uninstall(cpu_target):
    """Dynamo answers x.is_cuda from metadata, not the descriptor: patched too."""
    def pick(x):
        return x + 1 if x.is_cuda else x - 1

    x = torch.zeros(2, device="cuda")
    compiled = torch.compile(pick, fullgraph=True, backend="eager")
    assert x.is_cuda and torch.equal(compiled(x), pick(x)) and compiled(x)[0] == 1
    assert "dynamo.is_cuda" in cpu_target.status()["patches"]
    cpu_target.uninstall()
    # Stock torch again: a CPU tensor is not CUDA, and the code compiled under
    # the shim (with its answer baked in) is gone.
    assert not x.is_cuda and compiled(x)[0] == -1


def test_record_stream_with_a_cuda_stream_is_accepted(cpu_target):
    """Tensor.record_stream(torch.cuda stream) of a device tensor, as DeepSpeed's ZeRO does before freeing a
    buffer: accepted (CUDA's allocator would only hold the block until the stream's work is done); a stream
    torch itself cannot take still raises torch's error. Stock torch refuses the cuda stream object."""
    x = torch.ones(3).cuda()
    assert x.record_stream(torch.cuda.current_stream()) is None
    assert x.record_stream(torch.cuda.Stream()) is None
    assert torch.equal(x, torch.ones(3))
    with pytest.raises((TypeError, RuntimeError)):
        x.record_stream("not a stream")


def test_lazy_modules_move_before_their_first_forward(cpu_target):
    """`nn.LazyLinear(4).to("cuda")` / `.cuda()` before the first forward, as on CUDA: the uninitialized
    parameters move (torch lets them through Tensor.to/.cuda only) and materialize on the device."""
    for move in (lambda m: m.to(torch.device("cuda")), lambda m: m.cuda()):
        model = move(nn.LazyLinear(4))
        assert isinstance(model.weight, nn.parameter.UninitializedParameter)
        out = model(torch.ones(2, 3).cuda())
        assert out.is_cuda and model.weight.shape == (4, 3) and model.weight.is_cuda
    transfer = cpu_target
    transfer.uninstall()
    allowed = nn.parameter.UninitializedTensorMixin._allowed_methods
    assert torch.Tensor.to in allowed and all(type(m).__module__ != "transfer.patches.tensor" for m in allowed)
