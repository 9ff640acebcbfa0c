"""Single-process checks of one simulated vendor: ``device_checks.py VENDOR``.

Run by tests/test_vendor_standins.py in a subprocess (importing a stand-in
renames PrivateUse1 for the whole process, so never inside pytest itself).
Each check is a function below; the script runs all of them, printing a
line per check, and ends with ``REPORT {"check": "ok" | "<traceback>"}``.
"""

import importlib
import io
import json
import os
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

VENDOR = sys.argv[1]
OTHERS = [v for v in ("npu", "sdaa", "gcu", "mlu", "musa", "supa") if v != VENDOR]

pkg = importlib.import_module(f"torch_{VENDOR}")
BACKEND = pkg.SPEC.backend
mod = getattr(torch, VENDOR)
D1, D2, D3 = (torch.device(VENDOR, i) for i in (1, 2, 3))

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


@check
def distributed_single_rank():
    # First, before anything calls set_device: tccl must refuse, the others not.
    def init():
        dist.init_process_group(BACKEND, store=dist.HashStore(), rank=0, world_size=1)

    if VENDOR == "sdaa":
        try:
            init()
        except RuntimeError as exc:
            assert "set_device must be called before init_process_group" in str(exc), exc
        else:
            raise AssertionError("tccl accepted init_process_group before set_device")
        mod.set_device(1)
    init()
    assert dist.get_backend() == BACKEND
    t = torch.ones(3, device=D1)
    dist.all_reduce(t)
    assert t.device == D1 and t.tolist() == [1.0, 1.0, 1.0]
    dist.destroy_process_group()
    mod.set_device(0)


@check
def registration():
    assert torch._C._get_privateuse1_backend_name() == VENDOR
    assert getattr(torch, VENDOR) is mod is getattr(pkg, VENDOR)
    assert sys.modules[f"torch.{VENDOR}"] is mod
    assert mod.device_count() == int(os.environ.get("SIM_ACCEL_DEVICE_COUNT", "4"))
    assert mod.is_available()
    x = torch.ones(2)
    assert getattr(x, VENDOR)(1).device == D1
    assert getattr(x.to(D1), f"is_{VENDOR}") and not getattr(x, f"is_{VENDOR}")
    m = getattr(nn.Linear(2, 2), VENDOR)(3)
    assert m.weight.device == D3
    assert dist.Backend.default_device_backend_map[VENDOR] == BACKEND
    assert BACKEND in dist.Backend.backend_list
    if hasattr(torch, "accelerator"):  # torch >= 2.6
        assert torch.accelerator.current_accelerator().type == VENDOR


@check
def tensors_on_index_1_and_3():
    for dev in (D1, D3):
        base = torch.arange(12.0).reshape(3, 4)
        x = base.to(dev)
        assert x.device == dev and x.get_device() == dev.index
        assert torch.equal(x.cpu(), base)
        assert x.untyped_storage().device == dev
        v = x.t()
        v[0, 1] = 100.0  # write through a view
        assert x[1, 0].item() == 100.0
        s = x[1:, ::2]
        s.mul_(2)
        assert x.cpu()[2].tolist() == [16.0, 9.0, 20.0, 11.0]
        assert x.view(12)[5].item() == 5.0 and x.reshape(2, 6).shape == (2, 6)
        assert x.unsqueeze(0).expand(2, 3, 4).sum().item() == 2 * x.sum().item()
        x.add_(1).clamp_(max=50.0)
        assert x.max().item() == 50.0
        assert x[x > 20].numel() == 2
        z = torch.zeros(2, 3, device=dev) + torch.ones(3, device=dev)
        assert z.device == dev and z.sum().item() == 6.0
        r = torch.arange(5, device=dev, dtype=torch.int64)
        assert r.tolist() == [0, 1, 2, 3, 4] and r.dtype == torch.int64
        h = x.half().float()
        assert h.device == dev
    a = torch.randn(4, 5, device=D1)
    b = a.to(D3)  # cross-device copy
    assert b.device == D3 and torch.equal(a.cpu(), b.cpu())
    assert a.data_ptr() != b.data_ptr()
    c = torch.empty(4, 5, device=D1)
    c.copy_(b)
    assert torch.equal(c.cpu(), a.cpu())
    d = torch.empty(5, 4, device=D3)
    d.copy_(a.t())  # non-contiguous source, other device
    assert torch.equal(d.cpu(), a.cpu().t())
    e = torch.randn(3, 3).t().to(D1)
    assert torch.equal(e.cpu(), e.cpu().clone())
    assert torch.matmul(a, a.t()).device == D1
    assert torch.allclose(torch.matmul(a, a.t()).cpu(), a.cpu() @ a.cpu().t())


@check
def printing():
    x = torch.tensor([[1.5, 2.0], [3.0, -4.25]], device=D1)
    text = repr(x)
    assert f"device='{VENDOR}:1'" in text and "-4.2500" in text, text
    assert f"device='{VENDOR}:3'" in str(torch.zeros(2, dtype=torch.long, device=D3))
    assert "[]" in repr(torch.empty(0, device=D1))


@check
def save_and_load():
    model = nn.Linear(3, 2).to(D1)
    data = {"w": torch.randn(3, 4, device=D1), "m": model.state_dict(), "t": torch.arange(3, device=D3)}
    buf = io.BytesIO()
    torch.save(data, buf)
    buf.seek(0)
    back = torch.load(buf)
    assert back["w"].device == D1 and back["t"].device == D3
    assert torch.equal(back["w"].cpu(), data["w"].cpu())
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    assert on_cpu["w"].device.type == "cpu"
    cpu_buf = io.BytesIO()
    torch.save({"x": torch.arange(6.0).reshape(2, 3)}, cpu_buf)
    cpu_buf.seek(0)
    moved = torch.load(cpu_buf, map_location=f"{VENDOR}:1")
    assert moved["x"].device == D1 and moved["x"].sum().item() == 15.0
    buf.seek(0)
    remapped = torch.load(buf, map_location={f"{VENDOR}:1": f"{VENDOR}:2"})
    assert remapped["w"].device == D2
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.pt")
        torch.save(model.state_dict(), path)
        fresh = nn.Linear(3, 2).to(D3)
        fresh.load_state_dict(torch.load(path, map_location=f"{VENDOR}:3"))
        assert fresh.weight.device == D3
        assert torch.equal(fresh.weight.cpu(), model.weight.cpu())


def _make_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * 4 * 4, 16), nn.BatchNorm1d(16), nn.ReLU(),
        nn.Dropout(0.0), nn.Linear(16, 5))


def _train(device, opt_name):
    model = _make_model().to(device)
    params = model.parameters()
    opt = {
        "adam": lambda: torch.optim.Adam(params, lr=1e-2, foreach=True),
        "adamw": lambda: torch.optim.AdamW(params, lr=1e-2, foreach=True),
        "sgd": lambda: torch.optim.SGD(params, lr=1e-2, momentum=0.9, foreach=True),
    }[opt_name]()
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        x = torch.randn(8, 3, 8, 8, generator=g).to(device)
        y = torch.randint(0, 5, (8,), generator=g).to(device)
        out = model(x)
        loss = F.cross_entropy(out, y) + F.mse_loss(out[:, 0], y.float())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, opt


@check
def training_matches_cpu():
    for opt_name in ("adam", "adamw", "sgd"):
        ref, _ = _train("cpu", opt_name)
        got, opt = _train(D1, opt_name)
        for k, v in ref.state_dict().items():
            w = got.state_dict()[k]
            assert w.device == D1, (k, w.device)
            assert torch.allclose(v.double(), w.cpu().double(), rtol=1e-6, atol=1e-7), (opt_name, k)
        for state in opt.state.values():
            for name, value in state.items():
                if torch.is_tensor(value) and value.dim() > 0:
                    assert value.device == D1, (opt_name, name, value.device)


@check
def fused_adamw_on_device():
    # AdamW(fused=True), nanoGPT's optimizer on CUDA: torch_npu registers aten::_fused_adamw_ for its device
    # (the 2.1 and 2.13 wheels); torch has a CPU kernel from 2.4, which the CPU fallback runs. Where neither
    # has one the op has no kernel (what torch_sdaa / torch_gcu register is not known).
    cpu_kernel = torch._C._dispatch_has_kernel_for_dispatch_key("aten::_fused_adamw_", "CPU")
    torch.manual_seed(0)
    ref = nn.Linear(4, 3)
    got = nn.Linear(4, 3).to(D1)
    got.load_state_dict(ref.state_dict())
    opts = (torch.optim.AdamW(ref.parameters(), lr=0.1, weight_decay=0.1, foreach=False),
            torch.optim.AdamW(got.parameters(), lr=0.1, weight_decay=0.1, fused=True))
    x = torch.randn(8, 4)
    try:
        for _ in range(3):
            for model, opt, inp in zip((ref, got), opts, (x, x.to(D1))):
                opt.zero_grad()
                model(inp).pow(2).sum().backward()
                opt.step()
    except NotImplementedError:
        assert VENDOR != "npu" and not cpu_kernel, traceback.format_exc()
        return
    assert VENDOR == "npu" or cpu_kernel, "a fused AdamW kernel the plug-in is not known to have"
    for a, b in zip(ref.parameters(), got.parameters()):
        assert b.device == D1, b.device
        torch.testing.assert_close(b.cpu(), a.detach())


@check
def dropout_and_rng_use_device_generator():
    x = torch.ones(64, 64)
    mod.set_device(1)
    mod.manual_seed(7)
    on_dev = F.dropout(x.to(D1), p=0.5, training=True)
    torch.manual_seed(7)
    on_cpu = F.dropout(x, p=0.5, training=True)
    assert torch.equal(on_dev.cpu(), on_cpu)
    state = mod.get_rng_state(1)
    assert state.device.type == "cpu" and state.dtype == torch.uint8
    a = torch.rand(5, device=D1)
    mod.set_rng_state(state, 1)
    b = torch.rand(5, device=D1)
    assert torch.equal(a.cpu(), b.cpu())
    mod.manual_seed_all(3)
    assert mod.initial_seed() == 3
    assert len(mod.get_rng_state_all()) == mod.device_count()
    assert len(mod.default_generators) == mod.device_count()
    assert mod.default_generators[2].device == D2
    mod.set_device(0)


# torch < 2.3 has no device-generic torch.amp.GradScaler: the stand-ins' amp module has autocast only there
# (tests/vendors/README.md, "Old torch").
GRAD_SCALER = hasattr(torch.amp, "GradScaler")
# torch < 2.4's headers have no autocast op lists: autocast is accepted there but casts nothing
# (tests/vendors/README.md, "Old torch"); < 2.3 has no device-generic GradScaler.
AUTOCAST_CASTS = hasattr(torch, "get_autocast_dtype")


def autocast_state():
    """(enabled, dtype) of autocast on the device: torch's own API, or (< 2.4) the device module's."""
    if AUTOCAST_CASTS:
        return torch.is_autocast_enabled(VENDOR), torch.get_autocast_dtype(VENDOR)
    return mod.is_autocast_enabled(), mod.get_autocast_dtype()


@check
def autocast_on_device():
    lin = nn.Linear(8, 4).to(D1)
    x = torch.randn(2, 8, device=D1)
    cast = torch.bfloat16 if AUTOCAST_CASTS else torch.float32
    with torch.autocast(device_type=VENDOR, dtype=torch.bfloat16):
        assert autocast_state() == (True, torch.bfloat16)
        y = lin(x)
        s = torch.softmax(y, dim=-1)
    assert not autocast_state()[0]
    assert y.dtype == cast and s.dtype == torch.float32, (y.dtype, s.dtype)
    with mod.amp.autocast(dtype=torch.bfloat16):
        y2 = lin(x)
    assert y2.dtype == cast
    assert lin(x).dtype == torch.float32
    if not hasattr(mod.amp, "GradScaler"):
        return
    scaler = mod.amp.GradScaler()
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    with torch.autocast(device_type=VENDOR, dtype=torch.bfloat16):
        loss = lin(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() > 0


@check
def grad_scaler_kernels():
    """GradScaler's two ops on the device (torch < 2.3: the stand-in's own kernels)."""
    grads = [torch.tensor([2.0, 4.0], device=D1), torch.tensor([8.0], device=D1)]
    found_inf = torch.zeros(1, device=D1)
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, torch.full((1,), 0.5, device=D1))
    assert grads[0].cpu().tolist() == [1.0, 2.0] and grads[1].cpu().tolist() == [4.0]
    assert found_inf.item() == 0.0
    grads.append(torch.tensor([float("inf")], device=D1))
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, torch.ones(1, device=D1))
    assert found_inf.item() == 1.0
    scale, tracker = torch.full((1,), 4.0, device=D1), torch.zeros(1, dtype=torch.int32, device=D1)
    torch._amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2)
    assert (scale.item(), tracker.item()) == (2.0, 0)  # backed off
    found_inf.zero_()
    torch._amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2)
    assert (scale.item(), tracker.item()) == (2.0, 1)
    torch._amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2)
    assert (scale.item(), tracker.item()) == (4.0, 0)  # grown after 2 clean steps


@check
def masked_index_on_device():
    """x[mask] with a device mask (SyncBatchNorm does it; torch < 2.3's fallback needed help)."""
    x = torch.arange(6.0, device=D2)
    assert x[x >= 2].cpu().tolist() == [2.0, 3.0, 4.0, 5.0] and x[x >= 2].device == D2
    x[x < 2] = -1.0
    assert x.cpu().tolist() == [-1.0, -1.0, 2.0, 3.0, 4.0, 5.0]


@check
def events_and_streams():
    start = mod.Event(enable_timing=True)
    end = mod.Event(enable_timing=True)
    start.record()
    time.sleep(0.05)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert 40.0 <= ms <= 5000.0, ms
    assert end.query() and isinstance(end, mod.Event)
    untimed_a, untimed_b = mod.Event(), mod.Event()
    untimed_a.record()
    untimed_b.record()
    try:
        untimed_a.elapsed_time(untimed_b)
    except (RuntimeError, ValueError) as exc:
        assert "enable_timing" in str(exc), exc
    else:
        raise AssertionError("elapsed_time without enable_timing did not raise")
    s = mod.Stream(device=D1)
    assert s.device == D1 and s != mod.default_stream(1)
    with mod.stream(s):
        assert mod.current_stream(1) == s
        y = torch.ones(3, device=D1) * 2
    assert mod.current_stream(1) == mod.default_stream(1)
    s.synchronize()
    assert s.query()
    mod.synchronize()
    mod.synchronize(3)


@check
def memory_statistics():
    mod.empty_cache()
    mod.reset_peak_memory_stats(2)
    before = mod.memory_allocated(2)
    x = torch.empty(1 << 20, device=D2)  # 4 MiB
    after = mod.memory_allocated(2)
    assert after - before >= 4 * 1024 * 1024, (before, after)
    assert mod.max_memory_allocated(2) >= after
    assert mod.memory_reserved(2) >= after
    stats = mod.memory_stats(2)
    assert stats["allocated_bytes.all.current"] == after
    assert mod.memory_allocated(1) != after or mod.memory_allocated(1) == 0
    del x
    assert mod.memory_allocated(2) == before
    assert mod.max_memory_allocated(2) >= before + 4 * 1024 * 1024
    reserved = mod.memory_reserved(2)
    mod.empty_cache()
    assert mod.memory_reserved(2) < reserved
    mod.reset_peak_memory_stats(2)
    assert mod.max_memory_allocated(2) == mod.memory_allocated(2)
    free, total = mod.mem_get_info(2)
    assert 0 < free <= total == mod.get_device_properties(2).total_memory


@check
def device_module_api():
    for name in pkg.SPEC.api:
        assert hasattr(mod, name), name
    assert set(mod.__all__) <= set(dir(mod))
    props = mod.get_device_properties(1)
    assert props.name == mod.get_device_name(1) and props.total_memory > 0
    assert props.multi_processor_count > 0
    assert mod.is_bf16_supported() is True
    assert isinstance(mod.is_initialized(), bool)
    assert torch.bfloat16 in mod.get_amp_supported_dtype()
    graphs = ("NPUGraph", "graph", "graph_pool_handle", "make_graphed_callables")  # torch_npu's graph API
    for absent in ("nvtx", "CUDAGraph", "jiterator") + (() if VENDOR == "npu" else graphs):
        assert not hasattr(mod, absent), absent
    if VENDOR == "npu":
        assert all(hasattr(mod, name) for name in graphs)
    if pkg.SPEC.capability == "properties":  # gcu, mlu, musa: the vendor's own numbering, from the properties
        assert mod.get_device_capability(1) == (props.major, props.minor)
        assert mod.is_current_stream_capturing() is False
    elif VENDOR == "npu":
        os.environ.pop("TORCH_NPU_DEVICE_CAPABILITY", None)
        assert mod.get_device_capability() is None
        os.environ["TORCH_NPU_DEVICE_CAPABILITY"] = "8.0"
        assert mod.get_device_capability() == (8, 0)
        assert mod.is_current_stream_capturing() is False
        assert dist.is_hccl_available()
    else:
        assert not hasattr(mod, "get_device_capability")
        assert hasattr(mod, "is_current_stream_capturing") == ("is_current_stream_capturing" in pkg.SPEC.api)
    assert mod.get_amp_supported_dtype() == [getattr(torch, n) for n in pkg.SPEC.amp_dtypes]
    with mod.device(2):
        assert mod.current_device() == 2
        assert torch.empty(1, device=VENDOR).device == D2
    assert mod.current_device() == 0
    t3 = torch.ones(1, device=D3)
    if "device_of" in pkg.SPEC.api:  # torch_supa has none
        with mod.device_of(t3):
            assert mod.current_device() == 3
    else:
        assert not hasattr(mod, "device_of")
    mod.set_device(f"{VENDOR}:1")
    assert mod.current_device() == 1 and torch.zeros(1, device=VENDOR).device == D1
    mod.set_device(0)
    try:
        torch.ones(1, device=torch.device(VENDOR, mod.device_count()))
    except Exception as exc:
        assert "Invalid device index" in str(exc) or "invalid device" in str(exc).lower(), exc
    else:
        raise AssertionError("a tensor on a device index beyond the count was created")


@check
def parameters_keep_identity_across_module_to():
    # As on CUDA (and torch_npu, which registers _has_compatible_shallow_copy_type for npu):
    # Module.to keeps the Parameter objects, so an optimizer built before the move trains the
    # model, and tied weights stay one Parameter.
    assert torch._has_compatible_shallow_copy_type(torch.zeros(1), torch.zeros(1, device=D1))
    assert torch._has_compatible_shallow_copy_type(torch.zeros(1, device=D1), torch.zeros(1))
    assert torch._has_compatible_shallow_copy_type(torch.zeros(1, device=D1), torch.zeros(1, device=D2))
    torch.manual_seed(0)
    emb = nn.Embedding(7, 4)
    model = nn.Sequential(emb, nn.Linear(4, 7, bias=False))
    model[1].weight = emb.weight  # tied, as in language models
    before = [id(p) for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model.to(D1)
    assert [id(p) for p in model.parameters()] == before
    assert model[1].weight is model[0].weight and model[0].weight.device == D1
    x = torch.arange(7, device=D1)
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), x)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.1, losses
    model.to(D2)
    assert [id(p) for p in model.parameters()] == before and emb.weight.grad.device == D2
    model.cpu()
    assert [id(p) for p in model.parameters()] == before and emb.weight.device.type == "cpu"


@check
def lstm_and_gru_train():
    # ATen's LSTM/GRU cells call _thnn_fused_{lstm,gru}_cell for device inputs; results and
    # gradients must match the CPU kernels, and a model must learn.
    for cls in (nn.LSTM, nn.GRU):
        torch.manual_seed(0)
        ref = cls(4, 6, num_layers=2, batch_first=True)
        dev = cls(4, 6, num_layers=2, batch_first=True)
        dev.load_state_dict(ref.state_dict())
        dev.to(D1)
        x = torch.randn(3, 5, 4)
        y_ref, _ = ref(x)
        y_dev, _ = dev(x.to(D1))
        assert y_dev.device == D1
        torch.testing.assert_close(y_dev.cpu(), y_ref, atol=1e-6, rtol=1e-5)
        y_ref.pow(2).sum().backward()
        y_dev.pow(2).sum().backward()
        for (name, a), b in zip(ref.named_parameters(), dev.parameters()):
            torch.testing.assert_close(b.grad.cpu(), a.grad, atol=1e-5, rtol=1e-4, msg=f"{cls.__name__}.{name}")
        if cls is nn.LSTM and torch.backends.mkldnn.is_available():
            # the CPU's nn.LSTM takes oneDNN's whole-layer kernel, and so does the device (rnn.cpp): bit for bit
            assert torch.equal(y_dev.cpu(), y_ref), (y_dev.cpu() - y_ref).abs().max()
            for (name, a), b in zip(ref.named_parameters(), dev.parameters()):
                assert torch.equal(b.grad.cpu(), a.grad), name
        cell = {nn.LSTM: nn.LSTMCell, nn.GRU: nn.GRUCell}[cls](4, 6, bias=False)  # the bias-less fused cell
        cell_dev = {nn.LSTM: nn.LSTMCell, nn.GRU: nn.GRUCell}[cls](4, 6, bias=False)
        cell_dev.load_state_dict(cell.state_dict())
        cell_dev.to(D1)
        x = torch.randn(2, 4)
        cell(x)[0].sum().backward()
        cell_dev(x.to(D1))[0].sum().backward()
        torch.testing.assert_close(cell_dev.weight_ih.grad.cpu(), cell.weight_ih.grad, atol=1e-6, rtol=1e-5)
        # a small sequence task: predict the previous token
        torch.manual_seed(1)
        emb, rnn, head = nn.Embedding(5, 8), cls(8, 16, batch_first=True), nn.Linear(16, 5)
        params = [*emb.parameters(), *rnn.parameters(), *head.parameters()]
        optimizer = torch.optim.Adam(params, lr=0.05)
        for m in (emb, rnn, head):
            m.to(D1)
        tokens = torch.randint(0, 5, (16, 12), device=D1)
        for _ in range(40):
            optimizer.zero_grad()
            out, _ = rnn(emb(tokens))
            loss = F.cross_entropy(head(out[:, 1:]).reshape(-1, 5), tokens[:, :-1].reshape(-1))
            loss.backward()
            optimizer.step()
        assert loss.item() < 0.5, (cls.__name__, loss.item())  # chance: ln 5 = 1.61


# Inputs in the layouts real models hand to norms: a channels_last conv output (diffusion UNets), a
# permuted and a transposed tensor, a strided slice. Each is made the same way from the same values on the
# CPU and on the device, so both run their kernels on the same layout.
def _layouts(shape):
    n, c, h, w = shape
    torch.manual_seed(3)
    bases = {"contiguous": torch.randn(n, c, h, w), "channels_last": torch.randn(n, c, h, w),
             "permuted": torch.randn(n, c, w, h), "transposed": torch.randn(c, n, h, w),
             "sliced": torch.randn(n, c, h, 2 * w)}
    shape_it = {
        "contiguous": lambda t: t,
        "channels_last": lambda t: t.contiguous(memory_format=torch.channels_last),
        "permuted": lambda t: t.permute(0, 1, 3, 2),
        "transposed": lambda t: t.transpose(0, 1),
        "sliced": lambda t: t[..., ::2],
    }
    return {name: (lambda device, name=name: shape_it[name](bases[name].to(device)).detach()) for name in bases}


def _same_forward_backward(name, ref, dev, make_input, exact):
    """ref (CPU) and dev (on D1) compute the same outputs, gradients and running statistics: bit for bit where
    `exact` (the device runs the CPU's kernels: a math composite instead, as native_layer_norm and
    native_group_norm once ran here, differs in the last bits), else within float32 rounding: torch's own
    formulas hand a non-CPU device other layouts than the CPU (the backward of native_group_norm makes its
    input and gradient contiguous on every device but the CPU, as CUDA's kernel gets them), so the CPU kernels
    the stand-in runs may reduce in another order."""
    same = (lambda a, b, msg: torch.testing.assert_close(a, b, rtol=0, atol=0, msg=msg)) if exact else \
        (lambda a, b, msg: torch.testing.assert_close(a, b, msg=msg))
    xr, xd = make_input("cpu").requires_grad_(), make_input(D1).requires_grad_()
    assert xd.stride() == xr.stride(), (name, xd.stride(), xr.stride())
    yr, yd = ref(xr), dev(xd)
    assert yd.device == D1, (name, yd.device)
    same(yd.cpu(), yr, lambda m: f"{name}: output: {m}")
    g = torch.randn(yr.shape)
    yr.backward(g)
    yd.backward(g.to(D1))
    same(xd.grad.cpu(), xr.grad, lambda m: f"{name}: input gradient: {m}")
    for (pname, a), b in zip(ref.named_parameters(), dev.parameters()):
        same(b.grad.cpu(), a.grad, lambda m: f"{name}: {pname} gradient: {m}")
    for (bname, a), b in zip(ref.named_buffers(), dev.buffers()):
        same(b.cpu(), a, lambda m: f"{name}: {bname}: {m}")


def _pair(make):
    torch.manual_seed(5)
    ref = make()
    for p in ref.parameters():  # not the default ones and zeros: a wrong affine step must show
        with torch.no_grad():
            p.copy_(torch.randn(p.shape))
    dev = make()
    dev.load_state_dict(ref.state_dict())
    return ref, dev.to(D1)


@check
def norms_on_non_contiguous_inputs():
    # Issue 34: nn.GroupNorm on a channels_last input raised "view size is not compatible with input
    # tensor's size and stride" (math_group_norm's view, which won over the fallback on this device).
    # Every norm, forward and backward, on every layout, equals the CPU's.
    norms = {
        "GroupNorm": lambda: nn.GroupNorm(8, 32),
        "GroupNorm(no affine)": lambda: nn.GroupNorm(4, 32, affine=False),
        "BatchNorm2d": lambda: nn.BatchNorm2d(32),
        "BatchNorm2d(eval)": lambda: nn.BatchNorm2d(32).eval(),
        "InstanceNorm2d": lambda: nn.InstanceNorm2d(32, affine=True, track_running_stats=True),
        "LayerNorm(channels)": lambda: _ChannelsLast(nn.LayerNorm(32)),
        "LayerNorm(h, w)": lambda: nn.LayerNorm([5, 6]),
    }
    if hasattr(nn, "RMSNorm"):  # torch >= 2.4
        norms["RMSNorm(channels)"] = lambda: _ChannelsLast(nn.RMSNorm(32))
        norms["RMSNorm(h, w)"] = lambda: nn.RMSNorm([5, 6])
    for layout, make_input in _layouts((2, 32, 5, 6)).items():
        for name, make in norms.items():
            ref, dev = _pair(make)
            _same_forward_backward(f"{name} on a {layout} input", ref, dev, make_input, exact=layout == "contiguous")
    x3 = torch.randn(32, 2, 7)  # (N, C, L), transposed
    ref, dev = _pair(lambda: nn.GroupNorm(8, 32))
    _same_forward_backward("GroupNorm on a transposed 3-d input", ref, dev, lambda d: x3.to(d).transpose(0, 1),
                           exact=False)
    # The SyncBatchNorm kernels (CUDA-only in ATen, the stand-in's own): channels_last input, CUDA's contract
    # (statistics in float, output in the input's memory format), against float64 math.
    x = _layouts((4, 8, 3, 5))["channels_last"]("cpu")
    xd = x.to(D1)
    mean, invstd = torch.batch_norm_stats(xd, 1e-5)
    x64 = x.double()
    ref_mean, ref_var = x64.mean((0, 2, 3)), x64.var((0, 2, 3), unbiased=False)
    torch.testing.assert_close(mean.cpu().double(), ref_mean, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(invstd.cpu().double(), (ref_var + 1e-5).rsqrt(), atol=1e-5, rtol=1e-5)
    w, b = torch.randn(8).to(D1), torch.randn(8).to(D1)
    y = torch.batch_norm_elemt(xd, w, b, mean, invstd, 1e-5)
    assert y.device == D1 and y.is_contiguous(memory_format=torch.channels_last), y.stride()
    ref_y = (x64 - ref_mean.view(1, -1, 1, 1)) * (ref_var + 1e-5).rsqrt().view(1, -1, 1, 1)
    ref_y = ref_y * w.cpu().double().view(1, -1, 1, 1) + b.cpu().double().view(1, -1, 1, 1)
    torch.testing.assert_close(y.cpu().double(), ref_y, atol=1e-5, rtol=1e-5)
    dy = _layouts((4, 8, 3, 5))["permuted"](D1)
    sum_dy, sum_dy_xmu, gw, gb = torch.batch_norm_backward_reduce(dy, xd, mean, invstd, w, True, True, True)
    torch.testing.assert_close(sum_dy.cpu().double(), dy.cpu().double().sum((0, 2, 3)), atol=1e-5, rtol=1e-5)
    counts = torch.full((1,), float(x.numel() // 8), device=D1)
    gi = torch.batch_norm_backward_elemt(dy, xd, mean, invstd, w, sum_dy, sum_dy_xmu, counts.int())
    assert gi.device == D1 and gi.is_contiguous(memory_format=torch.channels_last), gi.stride()
    xr = x64.clone().requires_grad_()
    yr = (xr - xr.mean((0, 2, 3), keepdim=True)) * (xr.var((0, 2, 3), unbiased=False, keepdim=True) + 1e-5).rsqrt()
    (yr * w.cpu().double().view(1, -1, 1, 1)).backward(dy.cpu().double())
    torch.testing.assert_close(gi.cpu().double(), xr.grad, atol=1e-5, rtol=1e-5)


class _ChannelsLast(nn.Module):
    """A norm over the channels of an NCHW tensor, as ConvNeXt-style blocks apply LayerNorm (permute in,
    permute back): the norm sees a permuted, non-contiguous input."""

    def __init__(self, norm):
        super().__init__()
        self.norm = norm

    def forward(self, x):
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


@check
def fallback_keeps_aliasing_and_bookkeeping():
    # The fallback runs CPU kernels on CPU aliases of the device memory: in-place and out= writes land in
    # the device tensor itself, out= tensors of the wrong size are resized as on the CPU, results live on
    # the inputs' device index and count in its memory statistics, random ops draw from the device generator.
    a = torch.arange(6.0, device=D3)
    view = a[1:4]
    same = a.add_(1)
    assert same is a and a.cpu().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] and view.cpu().tolist() == [2.0, 3.0, 4.0]
    view.mul_(10)  # through a view with an offset
    assert a.cpu().tolist() == [1.0, 20.0, 30.0, 40.0, 5.0, 6.0]
    out = torch.empty(3, device=D3)
    ptr = out.data_ptr()
    ret = torch.add(view, 1, out=out)
    assert ret is out and out.data_ptr() == ptr and out.cpu().tolist() == [21.0, 31.0, 41.0]
    small = torch.empty(0, device=D3)
    torch.mul(a, 2, out=small)  # resized, as on the CPU
    assert small.shape == (6,) and small.device == D3 and small.cpu().tolist() == [2.0, 40.0, 60.0, 80.0, 10.0, 12.0]
    big = torch.zeros(8, device=D3)
    torch.mul(a, 2, out=big)  # resized down, as on the CPU (with its warning)
    assert big.shape == (6,) and big.cpu().tolist() == small.cpu().tolist()
    t = torch.zeros(2, 3, device=D3).t()  # an out= tensor with other strides: the CPU kernel's rule
    torch.add(torch.ones(3, 2, device=D3), 1, out=t)
    assert t.stride() == (1, 3) and t.cpu().tolist() == [[2.0, 2.0]] * 3
    x = torch.ones(4, device=D3)
    try:
        x.unsqueeze(0).expand(3, 4).add_(1)  # written-to memory overlapping: the CPU's error
    except RuntimeError as exc:
        assert "single memory location" in str(exc), exc
    else:
        raise AssertionError("an in-place op on an expanded tensor was accepted")
    ys = torch._foreach_add([a, x], 1.0)  # a list result
    assert [y.device for y in ys] == [D3, D3] and ys[1].cpu().tolist() == [2.0] * 4
    torch._foreach_mul_([x], 3.0)  # a list mutated in place
    assert x.cpu().tolist() == [3.0] * 4
    values, indices = torch.sort(torch.tensor([3.0, 1.0, 2.0], device=D3))
    assert values.device == indices.device == D3 and indices.cpu().tolist() == [1, 2, 0]
    assert torch.tensor([1.0, 2.0], device=D3).sum().item() == 3.0
    mod.empty_cache()
    before = mod.memory_allocated(3)
    m = torch.randn(256, 256, device=D3)
    product = m @ m  # mm's result: host memory of the CPU kernel, counted on the device
    assert mod.memory_allocated(3) >= before + 2 * 256 * 256 * 4, (before, mod.memory_allocated(3))
    assert torch.equal(product.cpu(), m.cpu() @ m.cpu())
    del product, m
    assert mod.memory_allocated(3) == before
    g = mod.default_generators[3]  # an explicit generator argument (torch 2.1 cannot construct a device one)
    g.manual_seed(7)
    first = torch.randn(5, device=D3, generator=g)
    g.manual_seed(7)
    assert torch.equal(torch.randn(5, device=D3, generator=g).cpu(), first.cpu())
    mod.manual_seed_all(11)
    r1 = torch.rand(5, device=D3).cpu()
    mod.manual_seed_all(11)
    torch.rand(3)  # the CPU generator's stream is another one, as on CUDA
    assert torch.equal(torch.rand(5, device=D3).cpu(), r1)
    mod.synchronize()


@check
def vendor_names_frameworks_import():
    # The torch_npu names transformers / MMEngine / accelerate import (the real wheel has them);
    # the other vendors do not publish them.
    amp = importlib.import_module(f"torch.{VENDOR}.amp")  # torch.<name> is a package in the real plug-ins
    assert amp is mod.amp
    if GRAD_SCALER:
        assert amp.GradScaler is mod.amp.GradScaler
    if "BoolTensor" in pkg.SPEC.api:  # typed tensor classes (MMEngine: Union[torch.BoolTensor, torch.npu.BoolTensor])
        import typing

        assert typing.Union[torch.BoolTensor, mod.BoolTensor] is not None
        assert isinstance(torch.ones(2, dtype=torch.bool, device=D1), mod.BoolTensor)
        assert not isinstance(torch.ones(2, dtype=torch.bool), mod.BoolTensor)
        assert not isinstance(torch.ones(2, device=D1), mod.LongTensor)
        made = mod.FloatTensor(2, 3)
        assert made.shape == (2, 3) and made.dtype == torch.float32 and made.device.type == VENDOR
        assert mod.LongTensor([1, 2]).tolist() == [1, 2]
    else:
        assert not hasattr(mod, "BoolTensor")
    if VENDOR != "npu":
        for absent in ("set_compile_mode", "utils"):
            assert not hasattr(mod, absent), absent
        assert not hasattr(pkg, "npu_fusion_attention")
        return
    import torch_npu.npu.utils as npu_utils
    if GRAD_SCALER:
        from torch.npu.amp import GradScaler  # noqa: F401  (MMEngine's import)
    assert importlib.import_module("torch.npu.utils") is npu_utils
    from torch_npu import npu_fusion_attention
    from torch_npu.optim import NpuFusedAdamW

    mod.set_compile_mode(jit_compile=False)
    assert mod.is_jit_compile_false() is True and "set_compile_mode" in mod.__all__
    assert npu_utils.current_device() == mod.current_device() and npu_utils.get_cann_version()
    assert npu_utils.get_soc_version() >= 220  # MMEngine: full-precision support on Ascend 910B and later
    assert issubclass(NpuFusedAdamW, torch.optim.AdamW) and issubclass(NpuFusedAdamW, pkg.optim.NpuFusedOptimizerBase)
    torch.manual_seed(0)
    b, s, n, d = 2, 6, 2, 4
    q, k, v = (torch.randn(b, s, n, d) for _ in range(3))
    ref = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True).transpose(1, 2)
    mask = torch.triu(torch.ones(2048, 2048, device=D1), diagonal=1).bool()  # transformers' mask
    qd, kd, vd = (t.to(D1).requires_grad_() for t in (q, k, v))
    out = npu_fusion_attention(qd, kd, vd, n, "BSND", atten_mask=mask, scale=d**-0.5, sparse_mode=3)
    assert len(out) == 7 and out[0].device == D1 and out[1].shape == (b, n, s, 8)
    torch.testing.assert_close(out[0].cpu(), ref, atol=1e-5, rtol=1e-4)
    out[0].sum().backward()
    assert qd.grad.device == D1 and torch.isfinite(qd.grad.cpu()).all()
    bsh = npu_fusion_attention(qd.reshape(b, s, n * d), kd.reshape(b, s, n * d), vd.reshape(b, s, n * d), n,
                               "BSH", atten_mask=mask[:s, :s], scale=d**-0.5)[0]
    torch.testing.assert_close(bsh.cpu().view(b, s, n, d), ref, atol=1e-5, rtol=1e-4)
    try:
        npu_fusion_attention(qd, kd, vd, n, "TND")
    except RuntimeError as exc:
        assert "actual_seq_qlen" in str(exc)
    else:
        raise AssertionError("TND layout accepted without actual_seq_qlen")
    # TND: two packed sequences [0, 2) and [2, 6), causal from each one's bottom-right corner
    tnd = npu_fusion_attention(q[0].to(D1), k[0].to(D1), v[0].to(D1), n, "TND", atten_mask=mask, scale=d**-0.5,
                               sparse_mode=3, actual_seq_qlen=[2, 6], actual_seq_kvlen=[2, 6])[0]
    parts = [F.scaled_dot_product_attention(*(t[0, a:e].transpose(0, 1) for t in (q, k, v)), is_causal=True)
             for a, e in ((0, 2), (2, 6))]
    torch.testing.assert_close(tnd.cpu(), torch.cat([p.transpose(0, 1) for p in parts]), atol=1e-5, rtol=1e-4)
    # sparse_mode applies only with atten_mask (the op's tiling); 2-4 need the compressed 2048x2048 mask
    full = npu_fusion_attention(qd, kd, vd, n, "BSND", scale=d**-0.5, sparse_mode=3)[0]
    plain = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)
    torch.testing.assert_close(full.detach().cpu(), plain, atol=1e-5, rtol=1e-4)
    try:
        npu_fusion_attention(qd, kd, vd, n, "BSND", atten_mask=mask[:s, :s], scale=d**-0.5, sparse_mode=3)
    except RuntimeError as exc:
        assert "2048" in str(exc)
    else:
        raise AssertionError("sparse_mode=3 accepted an uncompressed mask")


@check
def pinned_memory():
    x = torch.randn(16)
    p = x.pin_memory()  # for the device, even where torch's default is CUDA (< 2.5)
    assert p.is_pinned() and not x.is_pinned()
    assert x.pin_memory(VENDOR).is_pinned(VENDOR)
    y = p.to(D1, non_blocking=True)
    assert torch.equal(y.cpu(), x)


@check
def second_vendor_refused():
    for other in OTHERS:
        try:
            importlib.import_module(f"torch_{other}")
        except ImportError as exc:
            assert "one accelerator vendor package" in str(exc).lower() or "only one" in str(exc).lower(), exc
        else:
            raise AssertionError(f"torch_{other} imported after torch_{VENDOR}")


def main():
    report = {}
    for fn in CHECKS:
        start = time.monotonic()
        try:
            fn()
            report[fn.__name__] = "ok"
        except BaseException:
            report[fn.__name__] = traceback.format_exc()
        print(f"{fn.__name__}: {'ok' if report[fn.__name__] == 'ok' else 'FAILED'} "
              f"({time.monotonic() - start:.2f}s)", flush=True)
        if report[fn.__name__] != "ok":
            print(report[fn.__name__], flush=True)
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
