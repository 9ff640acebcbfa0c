"""CUDA graphs: torch.cuda.CUDAGraph / graph / make_graphed_callables.

CUDA's documented semantics are the oracle (PyTorch's "CUDA Graphs" notes): capture does not run the
captured work (an optimizer.step() inside it changes nothing until the first replay); replay re-runs
it on the same static tensors, so a replayed training step equals the eager step; errors for replay
without capture and for capturing twice. On the cpu target the ops are recorded and re-run
(transfer/cpu/graph_replay.py); on npu torch_npu's NPUGraph runs (the stand-in is as strict as torch_npu:
capture runs nothing, host reads raise); sdaa/gcu replay like the cpu target.
"""

import logging
import os

import pytest
import torch

from conftest import SCRIPTS, VENDORS, clean_env, needs_standins, python


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def _eager_step(model, optimizer, x, y):
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def test_replayed_training_step_equals_eager(cpu_target, caplog):
    model, reference = _model().cuda(), _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(12, 8, generator=g), torch.randint(0, 3, (12,), generator=g)) for _ in range(8)]
    for x, y in batches[:2]:  # warmup (momentum buffers exist before capture, as the docs require)
        _eager_step(model, optimizer, x.cuda(), y.cuda())
        _eager_step(reference, ref_opt, x, y)
    static_x, static_y = batches[0][0].clone().cuda(), batches[0][1].clone().cuda()
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    before = [p.detach().clone() for p in model.parameters()]
    with caplog.at_level(logging.WARNING, logger="transfer"):
        with torch.cuda.graph(graph):
            assert torch.cuda.is_current_stream_capturing()
            static_loss = torch.nn.functional.cross_entropy(model(static_x), static_y)
            static_loss.backward()
            optimizer.step()
    assert not torch.cuda.is_current_stream_capturing()
    # CUDA does not run captured work at capture time: the step has not happened yet
    assert all(torch.equal(b, p) for b, p in zip(before, model.parameters()))
    for x, y in batches[2:]:
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        want = _eager_step(reference, ref_opt, x, y)
        torch.testing.assert_close(static_loss, want)
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want)
    notices = [r.getMessage() for r in caplog.records if "capture records the ops" in r.getMessage()]
    assert len(notices) == 1


def test_captured_inference_updates_its_static_output_in_place(cpu_target):
    model = _model().cuda().eval()
    static_in = torch.zeros(4, 8, device="cuda")
    graph = torch.cuda.CUDAGraph()
    pool = torch.cuda.graph_pool_handle()
    with torch.no_grad(), torch.cuda.graph(graph, pool=pool):
        static_out = model(static_in)
    out_id = id(static_out)
    for seed in range(3):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(seed))
        static_in.copy_(x)
        graph.replay()
        assert id(static_out) == out_id
        torch.testing.assert_close(static_out, model(x))


def test_graph_errors_are_cudas(cpu_target):
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="replay without a preceding successful capture"):
        graph.replay()
    x = torch.ones(2, device="cuda")
    with torch.cuda.graph(graph):
        y = x * 2
    with pytest.raises(RuntimeError, match="already owns a captured graph"):
        graph.capture_begin()
    graph.replay()
    assert y.tolist() == [2.0, 2.0]
    graph.reset()
    with pytest.raises(RuntimeError, match="replay without a preceding successful capture"):
        graph.replay()


def test_non_capturable_adam_refuses_capture_as_on_cuda(cpu_target):
    """A non-capturable Adam reads its step count on the host: CUDA refuses that during capture (torch's
    health check first: "capturable is False"), and so does the replay recorder (a host read while capturing)."""
    model = _model().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    _eager_step(model, optimizer, torch.randn(2, 8, device="cuda"), torch.zeros(2, dtype=torch.long, device="cuda"))
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="not permitted when stream is capturing"):
        with torch.cuda.graph(graph):
            model(torch.ones(2, 8, device="cuda")).sum().backward()
            optimizer.step()


def test_make_graphed_callables_compute_what_the_callables_do(cpu_target):
    model = _model().cuda()
    sample = torch.randn(5, 8, device="cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(model, (sample,))
    x = torch.randn(5, 8, device="cuda")
    torch.testing.assert_close(graphed(x), _model()(x))
    hooked = _model()
    hooked.register_forward_hook(lambda *a: None)
    with pytest.raises(AssertionError, match="must not have hooks"):
        torch.cuda.make_graphed_callables(hooked, (sample,))


def test_uninstall_gives_back_cudas_graph_classes(cpu_target):
    import transfer

    ours = torch.cuda.CUDAGraph
    transfer.uninstall()
    import torch.cuda.graphs as graphs

    assert torch.cuda.CUDAGraph is graphs.CUDAGraph and torch.cuda.graph is graphs.graph and ours is not graphs.CUDAGraph


def _compare_with_eager(vendor):
    script = os.path.join(SCRIPTS, "thirdparty", "cuda_graph_train.py")
    env = clean_env(TRANSFER_DEVICE=vendor, PYTHONPATH=VENDORS)
    graphed = python(script, "--cuda-graph", "on", env=env, timeout=600)
    eager = python(script, "--cuda-graph", "off", env=env, timeout=600)
    pick = [ln for ln in graphed.stdout.splitlines() if ln.startswith(("losses", "rank 0: parameters"))]
    assert pick and pick == [ln for ln in eager.stdout.splitlines() if ln.startswith(("losses", "rank 0: parameters"))]
    assert f"on {vendor}:0" in graphed.stdout
    return graphed


@needs_standins
def test_graph_script_on_gcu_equals_eager():
    """gcu: transfer's replay (the stand-in has no graph API). npu (NPUGraph) and sdaa run the same script in
    tests/test_apex_e2e.py."""
    graphed = _compare_with_eager("gcu")
    assert "capture records the ops" in graphed.stderr, graphed.stderr


STRICT = r"""
import torch, torch_npu
x = torch.ones(4, device="npu")
g = torch.npu.NPUGraph()
try:
    g.capture_begin()
    raise SystemExit("captured on the default stream")
except RuntimeError as e:
    assert "non-default stream" in str(e), e
with torch.npu.graph(g):
    y = x * 2 + 1
    x.add_(10)
    try:
        y.sum().item()
        raise SystemExit("host read during capture")
    except RuntimeError as e:
        assert "not permitted when stream is capturing" in str(e), e
    try:
        torch.npu.synchronize()
        raise SystemExit("synchronize during capture")
    except RuntimeError as e:
        assert "not permitted when stream is capturing" in str(e), e
    host = torch.arange(3)  # CPU work runs at capture
assert x.tolist() == [1.0] * 4, x  # nothing ran at capture
assert host.tolist() == [0, 1, 2]
g.replay()
assert y.tolist() == [3.0] * 4 and x.tolist() == [11.0] * 4, (y, x)
g.replay()
assert y.tolist() == [23.0] * 4 and x.tolist() == [21.0] * 4, (y, x)
model = torch.nn.Linear(3, 2).npu()
graphed = torch.npu.make_graphed_callables(model, (torch.randn(4, 3, device="npu", requires_grad=True),))
inp = torch.randn(4, 3, device="npu", requires_grad=True)
out = graphed(inp)
out.sum().backward()
ref = torch.nn.Linear(3, 2)
ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
ref_in = inp.detach().cpu().requires_grad_()
ref(ref_in).sum().backward()
assert torch.allclose(out.cpu(), ref(ref_in).detach(), atol=1e-6) and torch.allclose(inp.grad.cpu(), ref_in.grad)
print("STRICT OK")
"""


@needs_standins
def test_npu_standin_graphs_are_as_strict_as_torch_npu():
    """Without transfer: the stand-in's NPUGraph records without running, refuses host reads and
    syncs during capture and default-stream captures (torch_npu's messages), replays on static memory."""
    proc = python("-c", STRICT, env=clean_env(PYTHONPATH=VENDORS), timeout=600)
    assert "STRICT OK" in proc.stdout, proc.stdout + proc.stderr
