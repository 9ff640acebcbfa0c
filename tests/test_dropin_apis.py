"""The drop-ins' second ring of APIs (what trainers import after the attention functions), against
references written here from each package's documented semantics, on the cpu target in-process."""

import math

import pytest
import torch


@pytest.fixture
def dropins(cpu_target):
    return cpu_target


def test_rotary_in_place_on_a_leaf_matches_the_reference(dropins):
    """flash_attn's RotaryEmbedding rotates qkv in place, also a leaf that requires grad (its tests do)."""
    from flash_attn.layers.rotary import RotaryEmbedding, apply_rotary_emb, apply_rotary_emb_torch

    torch.manual_seed(0)
    qkv = torch.randn(2, 5, 3, 2, 8, dtype=torch.float64, requires_grad=True)
    ref = qkv.detach().clone().requires_grad_()
    out = RotaryEmbedding(8)(qkv)
    assert out.data_ptr() == qkv.data_ptr()
    t = torch.arange(5, dtype=torch.float64)
    freqs = torch.outer(t, 1.0 / (10000.0 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8)))
    cos, sin = freqs.cos(), freqs.sin()

    def rotate(x):  # the documented GPT-NeoX rotation: halves (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos)
        x1, x2 = x[..., :4], x[..., 4:]
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)

    expected = torch.stack((rotate(ref[:, :, 0]), rotate(ref[:, :, 1]), ref[:, :, 2]), dim=2)
    torch.testing.assert_close(out, expected.to(out.dtype), rtol=1e-6, atol=1e-6)
    grad = torch.randn_like(expected)
    out.backward(grad.to(out.dtype))
    expected.backward(grad)
    torch.testing.assert_close(qkv.grad, ref.grad.to(qkv.dtype), rtol=1e-6, atol=1e-6)
    x = torch.randn(2, 5, 2, 8, dtype=torch.float64)
    torch.testing.assert_close(apply_rotary_emb(x, cos, sin), rotate(x))
    torch.testing.assert_close(apply_rotary_emb_torch(x, cos, sin), rotate(x))


def test_flash_attn_interface_names_its_tests_import(dropins):
    from flash_attn.flash_attn_interface import USE_TRITON_ROCM, _get_block_size_n

    assert USE_TRITON_ROCM is False
    # upstream's table for the device's capability ((8, 0): A100's sm80)
    assert [_get_block_size_n("cuda", d, dropout, False) for d, dropout in ((32, False), (64, True), (128, True))] \
        == [128, 64, 32]


def test_rotary_emb_extension_module(dropins):
    import rotary_emb

    x1, x2, c, s = (torch.randn(3, 4) for _ in range(4))
    o1, o2 = torch.empty(3, 4), torch.empty(3, 4)
    rotary_emb.apply_rotary(x1, x2, c, s, o1, o2, False)
    torch.testing.assert_close((o1, o2), (x1 * c - x2 * s, x1 * s + x2 * c))
    rotary_emb.apply_rotary(x1, x2, c, s, o1, o2, True)
    torch.testing.assert_close((o1, o2), (x1 * c + x2 * s, -x1 * s + x2 * c))
    for name, fix in (("xentropy_cuda_lib", "CrossEntropyLoss"), ("dropout_layer_norm", "dropout_add_layer_norm")):
        with pytest.raises(ModuleNotFoundError, match=fix):
            __import__(name)


def test_xformers_ops_second_ring(dropins):
    import torch.nn.functional as F
    from xformers.ops import (MemoryEfficientAttentionFlashAttentionOp, SwiGLU, index_select_cat,
                              memory_efficient_attention, scaled_index_add)
    from xformers.ops.fmha import cutlass
    from xformers.ops.fmha.attn_bias import LocalAttentionFromBottomRightMask

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 6, 2, 8, dtype=torch.float64, device="cuda") for _ in range(3))
    plain = memory_efficient_attention(q, k, v)
    torch.testing.assert_close(memory_efficient_attention(q, k, v, op=MemoryEfficientAttentionFlashAttentionOp), plain)
    torch.testing.assert_close(memory_efficient_attention(q, k, v, op=cutlass.FwOp), plain)
    # LocalAttentionFromBottomRightMask(l, r): query i sees key j when -l <= j - (nk - nq) - i <= r
    i, j = torch.arange(6).view(-1, 1), torch.arange(6).view(1, -1)
    keep = ((j - i) >= -2) & ((j - i) <= 1)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    scores = (qt @ kt.transpose(-1, -2)) / math.sqrt(8)
    expected = (scores.masked_fill(~keep, float("-inf")).softmax(-1) @ vt).transpose(1, 2)
    torch.testing.assert_close(memory_efficient_attention(q, k, v, attn_bias=LocalAttentionFromBottomRightMask(2, 1)),
                               expected)
    ffn = SwiGLU(8, 16, bias=True).double()
    x = torch.randn(3, 8, dtype=torch.float64)
    w1, w2 = ffn.w12.weight.chunk(2)
    b1, b2 = ffn.w12.bias.chunk(2)
    torch.testing.assert_close(ffn(x), F.linear(F.silu(F.linear(x, w1, b1)) * F.linear(x, w2, b2),
                                                 ffn.w3.weight, ffn.w3.bias))
    assert sorted(ffn.state_dict()) == ["w12.bias", "w12.weight", "w3.bias", "w3.weight"]
    base, src, scale = torch.zeros(4, 2, 3), torch.randn(2, 2, 3), torch.randn(3)
    expected_add = torch.index_add(base, 0, torch.tensor([3, 1]), src * scale, alpha=0.5)
    out = scaled_index_add(base, torch.tensor([3, 1]), src, scale, alpha=0.5)
    assert out is base and torch.equal(base, expected_add)
    sources, indices = [torch.randn(3, 2), torch.randn(4, 5)], [torch.tensor([2, 0]), torch.tensor([1])]
    assert torch.equal(index_select_cat(sources, indices),
                       torch.cat([s[i].flatten() for s, i in zip(sources, indices)]))


def test_xformers_operator_interface_as_its_tests_drive_it(dropins):
    """xformers' operator interface (its own tests call it): Inputs, FwOp.apply -> (out, Context with the
    log-sum-exp), BwOp.apply -> Gradients, the non-autograd forward/backward pair, capabilities; a [B, M, K]
    query with a [B, Mq, Mk] tensor bias; unbind views re-stacked without a copy; scaled_index_add rounding once."""
    import xformers.ops as xops
    from xformers.ops import fmha

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 5, 3, 8, dtype=torch.float64, device="cuda", requires_grad=True) for _ in range(3))
    bias = fmha.attn_bias.LowerTriangularMask()
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    scores = (q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2) / math.sqrt(8)).masked_fill(~causal, -math.inf)
    ref = (scores.softmax(-1) @ v.transpose(1, 2)).transpose(1, 2)
    inp = fmha.Inputs(q, k, v, bias)
    out, ctx = fmha.cutlass.FwOp.apply(inp, needs_gradient=True)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(ctx.lse, scores.logsumexp(-1).float())
    grad = torch.randn(out.shape, dtype=out.dtype, device="cuda")
    expected = torch.autograd.grad(ref, (q, k, v), grad)
    g = fmha.cutlass.BwOp.apply(ctx, inp, grad)
    torch.testing.assert_close((g.dq, g.dk, g.dv), expected)
    out2, lse = xops.memory_efficient_attention_forward_requires_grad(q, k, v, bias)
    torch.testing.assert_close(xops.memory_efficient_attention_backward(grad, out2, lse, q, k, v, bias), expected)
    assert fmha.cutlass.FwOp in fmha.ALL_FW_OPS and fmha.flash.BwOp in fmha.ALL_BW_OPS
    inp32 = fmha.Inputs(*(t.detach().float() for t in (q, k, v)), bias)
    assert fmha.cutlass.FwOp.not_supported_reasons(inp32) == []
    assert any("dtype" in r for r in fmha.cutlass.FwOp.not_supported_reasons(inp))  # as xformers: no float64
    assert any("dtype" in r for r in fmha.flash.FwOp.not_supported_reasons(inp32))  # FlashAttention: fp16/bf16
    # [B, M, K] with a tensor bias [B, Mq, Mk]: one head, the bias added to the scores
    qb, kb, vb = (torch.randn(2, 4, 8, dtype=torch.float64) for _ in range(3))
    tb = torch.randn(2, 4, 4, dtype=torch.float64)
    torch.testing.assert_close(xops.memory_efficient_attention(qb, kb, vb, tb),
                               (qb @ kb.transpose(-1, -2) / math.sqrt(8) + tb).softmax(-1) @ vb)
    x = torch.randn(3, 4, 5)
    parts = xops.unbind(x, 1)
    stacked = xops.stack_or_none(parts, 1)
    assert torch.equal(stacked, x) and stacked.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert xops.stack_or_none([parts[0], parts[1].clone()], 1) is None
    # scaled_index_add in float16: the float32 sum rounded once (its kernel), not float16 products
    inp16, src16, sc16 = (torch.randn(*s, dtype=torch.float16) for s in ((4, 2, 64), (2, 2, 64), (64,)))
    index = torch.tensor([3, 0])
    expected16 = torch.index_add(inp16.float(), 0, index, src16.float() * sc16.float(), alpha=0.73).half()
    assert torch.equal(xops.scaled_index_add(inp16.clone(), index, src16, sc16, 0.73), expected16)


@pytest.mark.parametrize("kind", ["open", "causal", "local"])
def test_xformers_padded_keys_masks_as_decoding_uses_them(dropins, kind):
    """KV-cache decoding's layout: packed queries, keys padded per sequence to one length. xformers: a query of
    block i sees block i's keys in use [i*pad, i*pad + len_i), never the padding; causal "with offset" from the
    block's bottom-right corner (query r of nq sees key c when c <= r + len_i - nq); local within a window."""
    from xformers.ops import fmha, memory_efficient_attention

    bias_types = {"open": fmha.attn_bias.BlockDiagonalPaddedKeysMask,
                  "causal": fmha.attn_bias.BlockDiagonalCausalWithOffsetPaddedKeysMask,
                  "local": fmha.attn_bias.BlockDiagonalCausalLocalAttentionPaddedKeysMask}
    q_lens, k_lens, pad, window = [1, 3, 2], [4, 5, 2], 6, 3
    if kind == "local":
        bias = bias_types[kind].from_seqlens_local(q_lens, pad, k_lens, window)
    else:
        bias = bias_types[kind].from_seqlens(q_seqlen=q_lens, kv_padding=pad, kv_seqlen=k_lens)
    torch.manual_seed(0)
    q = torch.randn(1, sum(q_lens), 2, 8, dtype=torch.float64, device="cuda")
    k, v = (torch.randn(1, len(k_lens) * pad, 2, 8, dtype=torch.float64, device="cuda") for _ in range(2))
    k[:, 5], v[:, 5] = float("nan"), float("nan")  # padding of block 0: never read
    expected, mask = [], torch.full((sum(q_lens), len(k_lens) * pad), float("-inf"), dtype=torch.float64)
    for b, (nq, nk) in enumerate(zip(q_lens, k_lens)):
        qs, ks = sum(q_lens[:b]), b * pad
        r, c = torch.arange(nq).view(-1, 1), torch.arange(nk).view(1, -1)
        keep = torch.ones(nq, nk, dtype=torch.bool)
        if kind != "open":
            keep &= c <= r + nk - nq
        if kind == "local":
            keep &= c > r + nk - nq - window
        mask[qs:qs + nq, ks:ks + nk] = torch.zeros(nq, nk, dtype=torch.float64).masked_fill(~keep, float("-inf"))
        qb, kb, vb = (t[0, s:s + n].transpose(0, 1) for t, s, n in ((q, qs, nq), (k, ks, nk), (v, ks, nk)))
        scores = (qb @ kb.transpose(-1, -2) / math.sqrt(8)).masked_fill(~keep, float("-inf"))
        expected.append((scores.softmax(-1) @ vb).transpose(0, 1))
    torch.testing.assert_close(memory_efficient_attention(q, k, v, attn_bias=bias), torch.cat(expected)[None])
    torch.testing.assert_close(bias.materialize((2, sum(q_lens), len(k_lens) * pad), dtype=torch.float64),
                               mask.expand(2, -1, -1))
    with pytest.raises(ValueError, match="k shapes wrong"):
        bias.materialize((sum(q_lens), 5))
    # as xformers 0.0.29: fmha re-exports only AttentionBias, BlockDiagonalMask, LowerTriangularMask, VARLEN_BIASES
    assert not hasattr(fmha, "BlockDiagonalCausalWithOffsetPaddedKeysMask") and bias_types["open"] in fmha.VARLEN_BIASES


def test_missing_names_say_what_is_provided(dropins):
    import xformers.ops

    with pytest.raises(ImportError, match="transfer's xformers provides .*SwiGLU"):
        from xformers.ops import NoSuchOp  # noqa: F401
    assert getattr(xformers.ops, "NoSuchOp", None) is None  # availability checks still get an AttributeError
    with pytest.raises(ImportError, match="transfer's apex provides FusedAdagrad"):
        from apex.optimizers import FusedMagic  # noqa: F401
    with pytest.raises(ImportError, match="prep_param_lists"):
        from apex.fp16_utils import FP32_Optimizer  # noqa: F401


def test_apex_second_ring(dropins):
    from apex.contrib.clip_grad import clip_grad_norm_
    from apex.mlp import MLP
    from apex.optimizers import FusedAdagrad
    from apex.parallel import LARC

    torch.manual_seed(0)
    mlp = MLP([4, 8, 3]).double().cuda()  # apex: every layer a linear then the activation, the last included
    x = torch.randn(5, 4, dtype=torch.float64, device="cuda")
    expected = torch.relu(torch.relu(x @ mlp.weight_0.t() + mlp.bias_0) @ mlp.weight_1.t() + mlp.bias_1)
    torch.testing.assert_close(mlp(x), expected)
    assert [n for n, _ in mlp.named_parameters()] == ["weight_0", "bias_0", "weight_1", "bias_1"]
    # FusedAdagrad, L2 mode: g += wd p; h += g^2; p -= lr g / (sqrt(h) + eps)
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    p.grad = torch.tensor([0.5, 0.25])
    FusedAdagrad([p], lr=0.1, eps=1e-10, weight_decay=0.1).step()
    g = torch.tensor([0.5 + 0.1, 0.25 - 0.2])
    torch.testing.assert_close(p.detach(), torch.tensor([1.0, -2.0]) - 0.1 * g / (g.abs() + 1e-10))
    # LARC (clip): grad *= min(trust * |p| / |g| / lr, 1), then the wrapped step
    w = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    w.grad = torch.tensor([30.0, 40.0])
    LARC(torch.optim.SGD([w], lr=0.1), trust_coefficient=0.02).step()
    local = 0.02 * 5.0 / (50.0 + 1e-8) / 0.1
    torch.testing.assert_close(w.detach(), torch.tensor([3.0, 4.0]) - 0.1 * local * torch.tensor([30.0, 40.0]))
    q = torch.nn.Parameter(torch.ones(3))
    q.grad = torch.full((3,), 2.0)
    assert float(clip_grad_norm_([q], 1.0)) == pytest.approx(math.sqrt(12))
    torch.testing.assert_close(q.grad, torch.full((3,), 2.0 / (math.sqrt(12) + 1e-6)))


def test_amp_c_update_scale_hysteresis(dropins):
    import amp_C

    scale, growth, hyst = torch.tensor([8.0]), torch.tensor([0], dtype=torch.int32), torch.tensor([2], dtype=torch.int32)
    inf, ok = torch.tensor([1.0]), torch.tensor([0.0])
    amp_C.update_scale_hysteresis(scale, growth, hyst, inf, 2.0, 0.5, 2, 2)
    assert (scale.item(), growth.item(), hyst.item()) == (8.0, 0, 1)  # the first overflow spends hysteresis
    amp_C.update_scale_hysteresis(scale, growth, hyst, inf, 2.0, 0.5, 2, 2)
    assert (scale.item(), growth.item(), hyst.item()) == (4.0, 0, 0)  # then the scale backs off
    amp_C.update_scale_hysteresis(scale, growth, hyst, ok, 2.0, 0.5, 2, 2)
    assert (scale.item(), growth.item(), hyst.item()) == (4.0, 1, 2)
    amp_C.update_scale_hysteresis(scale, growth, hyst, ok, 2.0, 0.5, 2, 2)
    assert (scale.item(), growth.item(), hyst.item()) == (8.0, 0, 2)  # growth_interval clean steps: grows


def test_apex_amp_init_handle(dropins, monkeypatch):
    """apex's old API: amp.init() turns O1 casts on for the process; handle.scale_loss scales the loss."""
    from apex import amp

    handle = amp.init(loss_scale=4.0)
    try:
        lin = torch.nn.Linear(4, 4).cuda()
        y = lin(torch.randn(2, 4, device="cuda"))
        assert y.dtype in (torch.float16, torch.bfloat16)  # the cpu target's half (bfloat16 unless asked)
        opt = torch.optim.SGD(lin.parameters(), lr=0.1)
        loss = y.float().sum()
        with handle.scale_loss(loss, opt) as scaled:
            assert float(scaled) == pytest.approx(4.0 * float(loss))
            scaled.backward()
        expected = torch.full_like(lin.bias, 2.0)  # d(sum y)/d bias, unscaled
        torch.testing.assert_close(lin.bias.grad, expected)
    finally:
        handle._deactivate()
    assert lin(torch.randn(2, 4, device="cuda")).dtype == torch.float32
    assert not amp.init(enabled=False).is_active()


def test_flash_attn_cross_entropy_and_fused_dense(dropins):
    """flash_attn's CrossEntropyLoss: the kernel's formula (smoothing over all classes, ignore_index rows 0,
    mean over the rows kept, z-loss lse_square_scale * lse^2); fused_dense: linear / act(linear) / linear."""
    import torch.nn.functional as F
    from flash_attn.losses.cross_entropy import CrossEntropyLoss
    from flash_attn.ops.fused_dense import FusedDense, FusedMLP

    torch.manual_seed(0)
    logits = torch.randn(6, 10, dtype=torch.float64)
    labels = torch.tensor([1, 2, -100, 3, 9, 0])
    loss = CrossEntropyLoss(label_smoothing=0.1)(logits, labels)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, F.cross_entropy(logits, labels, label_smoothing=0.1).float())
    per_row, z = CrossEntropyLoss(reduction="none", lse_square_scale=1e-2, return_z_loss=True)(logits, labels)
    lse = torch.logsumexp(logits, -1)
    kept = labels != -100
    expected = torch.where(kept, lse - logits.gather(1, labels.clamp(min=0)[:, None])[:, 0] + 1e-2 * lse**2, 0.0)
    torch.testing.assert_close(per_row, expected.float())
    torch.testing.assert_close(z, torch.where(kept, 1e-2 * lse**2, 0.0).float())
    x = torch.randn(3, 4, dtype=torch.float64)
    dense = FusedDense(4, 5, return_residual=True).double()
    out, residual = dense(x)
    assert residual is x
    torch.testing.assert_close(out, x @ dense.weight.t() + dense.bias)
    mlp = FusedMLP(4, 8, activation="sqrelu").double()
    torch.testing.assert_close(mlp(x), F.linear(F.relu(F.linear(x, mlp.fc1.weight, mlp.fc1.bias)) ** 2,
                                                mlp.fc2.weight, mlp.fc2.bias))
    with pytest.raises(ModuleNotFoundError, match="torch.nn.MultiheadAttention"):
        import flash_attn.modules.block  # noqa: F401


@pytest.mark.parametrize("options", [{}, {"use_flash_attn": True, "causal": True, "rotary_emb_dim": 8},
                                     {"num_heads_kv": 2, "use_flash_attn": True, "rotary_emb_dim": 8},
                                     {"cross_attn": True}])
def test_flash_attn_mha(dropins, options):
    """flash_attn.modules.mha.MHA against attention written out from its documented layout: Wqkv's output is
    (3 | h + 2 h_kv, h, d), rotary on q and k (GPT-NeoX halves), softmax(q k^T / sqrt(d)) v, out_proj."""
    from flash_attn.layers.rotary import apply_rotary_emb_torch
    from flash_attn.modules.mha import MHA

    torch.manual_seed(0)
    mha = MHA(32, 4, **options).double()
    x = torch.randn(2, 5, 32, dtype=torch.float64, requires_grad=True)
    out = mha(x)
    h, d, hk = 4, 8, mha.num_heads_kv
    if options.get("cross_attn"):
        q, kv = mha.Wq(x).view(2, 5, h, d), mha.Wkv(x).view(2, 5, 2, hk, d)
    else:
        qkv = mha.Wqkv(x)
        q, kv = qkv[..., :h * d].view(2, 5, h, d), qkv[..., h * d:].view(2, 5, 2, hk, d)
    k, v = kv[:, :, 0], kv[:, :, 1]
    if options.get("rotary_emb_dim"):
        t = torch.arange(5, dtype=torch.float64)
        freqs = torch.outer(t, 1.0 / (10000.0 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8)))
        q, k = apply_rotary_emb_torch(q, freqs.cos(), freqs.sin()), apply_rotary_emb_torch(k, freqs.cos(), freqs.sin())
    k, v = k.repeat_interleave(h // hk, 2), v.repeat_interleave(h // hk, 2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)
    if options.get("causal"):
        scores = scores.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    expected = mha.out_proj(torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(2, 5, 32))
    torch.testing.assert_close(out, expected)
    grad = torch.randn_like(out)
    (got,) = torch.autograd.grad(out, x, grad)
    (want,) = torch.autograd.grad(expected, x, grad)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("options", [{"use_flash_attn": True, "rotary_emb_dim": 16},  # the kvcache fast path
                                     {"use_flash_attn": True, "rotary_emb_dim": 8, "num_heads_kv": 2},
                                     {"use_flash_attn": False, "rotary_emb_dim": 8}])
def test_flash_attn_mha_generation_with_inference_params(dropins, options):
    """flash-attention's generation: a prompt, then one token per step with InferenceParams; each step's output
    is what the causal forward over the whole sequence gives at that position (what a KV cache must not change)."""
    from flash_attn.modules.mha import MHA
    from flash_attn.utils.generation import InferenceParams

    torch.manual_seed(0)
    mha = MHA(64, 4, causal=True, layer_idx=0, **options).double().cuda().eval()
    x = torch.randn(2, 8, 64, dtype=torch.float64, device="cuda")
    with torch.no_grad():
        full = mha(x)
        params = InferenceParams(max_seqlen=16, max_batch_size=2)
        steps = [mha(x[:, :5], inference_params=params)]
        params.seqlen_offset += 5
        for t in range(5, 8):
            steps.append(mha(x[:, t:t + 1], inference_params=params))
            params.seqlen_offset += 1
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    assert params.key_value_memory_dict[0].shape == (2, 16, 2, mha.num_heads_kv, 16)


def test_kvcache_rotary_positions_count_the_left_padding(dropins):
    """flash_attn_with_kvcache: the new keys are rotated at positions cache_seqlens, counted from the cache's
    start with cache_leftpad included (flash-attention's kernel and its test_flash_attn_kvcache)."""
    from flash_attn import flash_attn_with_kvcache
    from flash_attn.layers.rotary import apply_rotary_emb_torch

    torch.manual_seed(0)
    k_cache, v_cache = torch.zeros(1, 16, 2, 8), torch.zeros(1, 16, 2, 8)
    q, k, v = torch.randn(1, 1, 2, 8), torch.randn(1, 1, 2, 8), torch.randn(1, 1, 2, 8)
    angle = torch.rand(16, 4) * 2 * math.pi
    seqlens, leftpad = torch.tensor([6], dtype=torch.int32), torch.tensor([2], dtype=torch.int32)
    flash_attn_with_kvcache(q, k_cache, v_cache, k, v, rotary_cos=angle.cos(), rotary_sin=angle.sin(),
                            cache_seqlens=seqlens, cache_leftpad=leftpad, rotary_interleaved=False)
    expected = apply_rotary_emb_torch(k, angle.cos()[6:7], angle.sin()[6:7])
    torch.testing.assert_close(k_cache[:, 6:7], expected)
