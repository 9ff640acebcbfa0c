"""flash_attn / xformers as transfer provides them, against references written here from the
packages' DOCUMENTED semantics (flash_attn 2.7 interface docstrings, xformers' attn_bias docs),
in float64: softmax(softcap(QK^T * scale) + alibi + mask) V, never our implementation.

flash_attn's documented rules used below:
* a query at i sees keys in [i + sk - sq - left, i + sk - sq + right] (causal: right = 0);
  -1 is unbounded; so causal is aligned bottom-right when sq != sk;
* alibi adds -slope * |i + sk - sq - j|; softcap: softcap * tanh(s / softcap), before masking;
* "If the row of the mask is all zero, the output will be zero"; the kernel's lse for such a row
  is +inf (softmax.h: `sum == 0 -> INFINITY`);
* return_attn_probs: (out, softmax_lse [B, H, sq] float32, S_dmask), S_dmask negative where dropped.

The cpu target runs in-process; the vendor stand-ins run in subprocesses (tests/scripts/thirdparty/).
"""

import math
import os
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SCRIPTS, VENDORS, clean_env, needs_standins, run

SLOW = getattr(pytest.mark, "slow")
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def fa():
    import transfer

    transfer.uninstall()
    os.environ["TRANSFER_QUIET"] = "1"
    transfer.install("cpu")
    import flash_attn
    import flash_attn.bert_padding
    import xformers.ops

    yield flash_attn
    transfer.uninstall()


def reference(q, k, v, scale, causal=False, window=(-1, -1), softcap=0.0, slopes=None, keep=None, p=0.0,
              top_left=False, flash=True):
    """q [B, sq, H, D], k/v [B, sk, Hk, D] -> (out, lse [B, H, sq], probs [B, H, sq, sk]) in float64."""
    q, k, v = q.double(), k.double(), v.double()
    b, sq, h, _ = q.shape
    sk, hk = k.shape[1], k.shape[2]
    k, v = k.repeat_interleave(h // hk, dim=2), v.repeat_interleave(h // hk, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq).view(-1, 1)
    j = torch.arange(sk).view(1, -1)
    shift = 0 if top_left else sk - sq
    if slopes is not None:
        sl = slopes.double().view(slopes.shape[0] if slopes.dim() == 2 else 1, h, 1, 1)
        s = s - sl * (i + shift - j).abs()
    left, right = kernel_window(causal, window, sk) if flash else (window[0], 0 if causal else window[1])
    allowed = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        allowed &= j >= i + shift - left
    if right >= 0:
        allowed &= j <= i + shift + right
    s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    probs = torch.nan_to_num(torch.exp(s - lse.unsqueeze(-1)), nan=0.0)
    used = probs if keep is None else probs * keep / (1 - p)
    out = torch.einsum("bhij,bjhd->bihd", used, v)
    return out, torch.where(torch.isneginf(lse), torch.full_like(lse, math.inf), lse), probs


def kernel_probs(probs, d, dropout, causal):
    """What flash_attn returns with return_attn_probs, from the softmax: the kernel's un-normalized values. Per key
    block of the kernel (its _get_block_size_n), exp(s - m) with m the row's running maximum score, the kernel
    walking the blocks from the last: the probability over the largest probability of its block and those after
    (what flash-attention's tests undo with normalize_flash_attn_S)."""
    from flash_attn.flash_attn_interface import _get_block_size_n

    blocks = probs.abs().split(_get_block_size_n(probs.device, d, dropout, causal), dim=-1)
    running = torch.cummax(torch.stack([b.amax(-1) for b in blocks], -1).flip(-1), -1).values.flip(-1)
    per_key = torch.cat([m.unsqueeze(-1).expand_as(b) for m, b in zip(running.unbind(-1), blocks)], dim=-1)
    return torch.where(per_key > 0, probs / per_key, torch.zeros_like(probs))


def kernel_window(causal, window, sk):
    """flash_api.cpp's normalisation of window_size (mha_fwd lines 'if (window_size_left >= seqlen_k)
    window_size_left = -1; ... if (is_causal) window_size_right = 0;', then set_params_fprop: 'if
    (window_size_left < 0 && window_size_right >= 0) window_size_left = seqlen_k;' and the converse):
    what the CUDA kernel applies, which differs from the docstring's formula only for bounds >= sk."""
    left, right = window
    left = -1 if left >= sk else left
    right = -1 if right >= sk else right
    if causal:
        right = 0
    if left < 0 and right >= 0:
        left = sk
    if left >= 0 and right < 0:
        right = sk
    return left, right


shapes = st.fixed_dictionaries({
    "b": st.integers(1, 2), "sq": st.integers(1, 7), "sk": st.integers(1, 7),
    "heads": st.sampled_from([(1, 1), (2, 2), (4, 2), (4, 1)]), "d": st.sampled_from([4, 8]),
    "causal": st.booleans(), "left": st.integers(-1, 4), "right": st.integers(-1, 4),
    "softcap": st.sampled_from([0.0, 0.0, 3.0]), "alibi": st.booleans(), "scale": st.sampled_from([None, 0.3]),
    "seed": st.integers(0, 2**16),
})


def _inputs(c, grad=True):
    g = torch.Generator().manual_seed(c["seed"])
    h, hk = c["heads"]
    q = torch.randn(c["b"], c["sq"], h, c["d"], generator=g, dtype=torch.float64)
    k = torch.randn(c["b"], c["sk"], hk, c["d"], generator=g, dtype=torch.float64)
    v = torch.randn(c["b"], c["sk"], hk, c["d"], generator=g, dtype=torch.float64)
    slopes = torch.rand(c["b"], h, generator=g, dtype=torch.float64).float() if c["alibi"] else None
    return [t.requires_grad_(grad) for t in (q, k, v)], slopes


@given(c=shapes)
@FAST
def test_flash_attn_func_forward_backward_lse(fa, c):
    (q, k, v), slopes = _inputs(c)
    window = (c["left"], c["right"])
    scale = c["scale"] if c["scale"] is not None else c["d"] ** -0.5
    out, lse, probs = fa.flash_attn_func(q, k, v, softmax_scale=c["scale"], causal=c["causal"], window_size=window,
                                         softcap=c["softcap"], alibi_slopes=slopes, return_attn_probs=True)
    ref_out, ref_lse, ref_probs = reference(q, k, v, scale, c["causal"], window, c["softcap"], slopes)
    torch.testing.assert_close(out, ref_out, rtol=1e-7, atol=1e-9)
    assert lse.dtype == torch.float32 and lse.shape == (c["b"], c["heads"][0], c["sq"])
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(probs.double(), kernel_probs(ref_probs, c["d"], False, c["causal"]), rtol=1e-7,
                               atol=1e-9)
    # the SDPA path (no probabilities asked): forward and gradients
    w = torch.randn_like(ref_out)
    got = fa.flash_attn_func(q, k, v, softmax_scale=c["scale"], causal=c["causal"], window_size=window,
                             softcap=c["softcap"], alibi_slopes=slopes)
    torch.testing.assert_close(got, ref_out, rtol=1e-7, atol=1e-9)
    grads = torch.autograd.grad((got * w).sum(), (q, k, v))
    ref_grads = torch.autograd.grad((ref_out * w).sum(), (q, k, v))
    for a, e in zip(grads, ref_grads):
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-8)


def test_documented_causal_examples_and_empty_rows(fa):
    """The docstring's two masks (sq=2, sk=5 and sq=5, sk=2), rows of zeros where nothing is seen."""
    v = torch.eye(5, dtype=torch.float64).view(1, 5, 1, 5)
    q = torch.zeros(1, 2, 1, 5, dtype=torch.float64)
    out = fa.flash_attn_func(q, torch.zeros_like(v), v, causal=True)[0, :, 0]
    torch.testing.assert_close(out, torch.tensor([[.25, .25, .25, .25, 0], [.2, .2, .2, .2, .2]], dtype=torch.float64))
    v2 = torch.eye(2, dtype=torch.float64).view(1, 2, 1, 2)
    out, lse, _ = fa.flash_attn_func(torch.zeros(1, 5, 1, 2, dtype=torch.float64), torch.zeros_like(v2), v2,
                                     causal=True, return_attn_probs=True)
    torch.testing.assert_close(out[0, :, 0], torch.tensor([[0, 0], [0, 0], [0, 0], [1, 0], [.5, .5]],
                                                           dtype=torch.float64))
    assert torch.isinf(lse[0, 0, :3]).all() and (lse[0, 0, :3] > 0).all() and torch.isfinite(lse[0, 0, 3:]).all()
    q = torch.randn(1, 5, 1, 2, requires_grad=True)
    fa.flash_attn_func(q, torch.randn(1, 2, 1, 2), torch.randn(1, 2, 1, 2), causal=True).sum().backward()
    assert torch.isfinite(q.grad).all() and (q.grad[0, :3] == 0).all()  # no NaN from the empty rows


@given(lens=st.lists(st.tuples(st.integers(1, 6), st.integers(1, 6)), min_size=1, max_size=3), c=shapes)
@FAST
def test_varlen_matches_each_sequence(fa, lens, c):
    h, hk = c["heads"]
    g = torch.Generator().manual_seed(c["seed"])
    lq, lk = [a for a, _ in lens], [b for _, b in lens]
    q = torch.randn(sum(lq), h, c["d"], generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(sum(lk), hk, c["d"], generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(sum(lk), hk, c["d"], generator=g, dtype=torch.float64, requires_grad=True)
    slopes = torch.rand(len(lens), h, generator=g).float() if c["alibi"] else None
    cu_q = torch.tensor([0] + list(torch.tensor(lq).cumsum(0)), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(torch.tensor(lk).cumsum(0)), dtype=torch.int32)
    window, scale = (c["left"], c["right"]), c["d"] ** -0.5
    out, lse, probs = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=c["causal"],
                                            window_size=window, softcap=c["softcap"], alibi_slopes=slopes,
                                            return_attn_probs=True)
    plain = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=c["causal"], window_size=window,
                                      softcap=c["softcap"], alibi_slopes=slopes)
    refs, lses = [], []
    for i in range(len(lens)):
        qs, ks = slice(int(cu_q[i]), int(cu_q[i + 1])), slice(int(cu_k[i]), int(cu_k[i + 1]))
        # flash_attn normalises the window against max_seqlen_k (then per sequence as below)
        w = kernel_window(c["causal"], window, max(lk))
        o, l_, p_ = reference(q[qs][None], k[ks][None], v[ks][None], scale, False, w, c["softcap"], flash=False,
                              slopes=None if slopes is None else slopes[i:i + 1])
        refs.append(o[0])
        lses.append(l_[0])
        # flash_attn's layout of the probabilities: [batch, H, max_seqlen_q, max_seqlen_k], each block top-left
        padded = torch.zeros(h, max(lq), max(lk), dtype=torch.float64)
        padded[:, :lq[i], :lk[i]] = p_[0]
        torch.testing.assert_close(probs[i].double(), kernel_probs(padded, c["d"], False, c["causal"]), rtol=1e-6,
                                   atol=1e-9)
    ref = torch.cat(refs)
    torch.testing.assert_close(out, ref, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(plain, ref, rtol=1e-7, atol=1e-9)
    assert lse.shape == (h, sum(lq)) and lse.dtype == torch.float32
    torch.testing.assert_close(lse.double(), torch.cat(lses, dim=-1), rtol=1e-5, atol=1e-5)
    w_ = torch.randn_like(ref)
    for a, e in zip(torch.autograd.grad((plain * w_).sum(), (q, k, v)), torch.autograd.grad((ref * w_).sum(), (q, k, v))):
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-8)


def test_varlen_reads_no_lengths_on_the_host(fa, monkeypatch):
    """Below the size limit, varlen never calls .tolist()/.item() on cu_seqlens (no host sync)."""
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)

    class NoSync(torch.Tensor):
        def tolist(self):
            raise AssertionError("host sync")

        def item(self):
            raise AssertionError("host sync")

    q = torch.randn(7, 2, 8)
    out = fa.flash_attn_varlen_func(q, q, q, cu.as_subclass(NoSync), cu.as_subclass(NoSync), 4, 4, causal=True)
    assert out.shape == (7, 2, 8)


def test_dropout_pattern_and_statistics(fa):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 16, 2, 8, dtype=torch.float64) for _ in range(3))
    p = 0.3
    out, lse, s = fa.flash_attn_func(q, k, v, dropout_p=p, causal=True, return_attn_probs=True)
    keep = s >= 0
    ref, ref_lse, probs = reference(q, k, v, 8 ** -0.5, causal=True, keep=keep.double(), p=p)
    torch.testing.assert_close(out, ref, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(s.abs(), kernel_probs(probs, 8, True, True), rtol=1e-7, atol=1e-9)  # sign: dropout
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-5, atol=1e-5)  # dropout not in the LSE
    visible = probs > 0
    dropped = (~keep & visible).sum().item() / visible.sum().item()
    assert abs(dropped - p) < 0.08, dropped
    # SDPA path: a fresh mask per call, the seed reproduces it
    torch.manual_seed(1)
    a = fa.flash_attn_func(q, k, v, dropout_p=p)
    torch.manual_seed(1)
    assert torch.equal(a, fa.flash_attn_func(q, k, v, dropout_p=p))
    assert not torch.equal(a, fa.flash_attn_func(q, k, v, dropout_p=p))
    assert not torch.allclose(a, fa.flash_attn_func(q, k, v))


def test_packed_variants_and_kvcache(fa):
    torch.manual_seed(0)
    qkv = torch.randn(2, 5, 3, 4, 8, dtype=torch.float64)
    ref = reference(*qkv.unbind(2), 8 ** -0.5, causal=True)[0]
    torch.testing.assert_close(fa.flash_attn_qkvpacked_func(qkv, causal=True), ref)
    torch.testing.assert_close(fa.flash_attn_kvpacked_func(qkv[:, :, 0], qkv[:, :, 1:], causal=True), ref)
    cu = torch.tensor([0, 5, 10], dtype=torch.int32)
    packed = qkv.reshape(10, 3, 4, 8)
    torch.testing.assert_close(fa.flash_attn_varlen_qkvpacked_func(packed, cu, 5, causal=True), ref.reshape(10, 4, 8))
    # kv cache: two cached tokens, one new token appended in place, attention over the three
    k_cache = torch.zeros(2, 6, 4, 8, dtype=torch.float64)
    v_cache = torch.zeros(2, 6, 4, 8, dtype=torch.float64)
    k_all, v_all = torch.randn(2, 3, 4, 8, dtype=torch.float64), torch.randn(2, 3, 4, 8, dtype=torch.float64)
    k_cache[:, :2], v_cache[:, :2] = k_all[:, :2], v_all[:, :2]
    q = torch.randn(2, 1, 4, 8, dtype=torch.float64)
    out = fa.flash_attn_with_kvcache(q, k_cache, v_cache, k_all[:, 2:], v_all[:, 2:],
                                     cache_seqlens=torch.tensor([2, 2], dtype=torch.int32), causal=True)
    torch.testing.assert_close(k_cache[:, :3], k_all)
    torch.testing.assert_close(out, reference(q, k_all, v_all, 8 ** -0.5, causal=True)[0])


def test_bert_padding_round_trip_and_five_values(fa):
    from flash_attn.bert_padding import index_first_axis, pad_input, unpad_input

    x = torch.randn(2, 4, 3, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]])
    hidden, indices, cu, max_len, used = unpad_input(x, mask)
    assert hidden.shape == (5, 3) and cu.tolist() == [0, 2, 5] and cu.dtype == torch.int32 and max_len == 3
    assert used.tolist() == [2, 3] and indices.tolist() == [0, 1, 4, 5, 6]
    back = pad_input(hidden, indices, 2, 4)
    torch.testing.assert_close(back, x * mask[..., None])
    back.sum().backward()
    torch.testing.assert_close(x.grad, mask[..., None].float().expand_as(x))
    torch.testing.assert_close(index_first_axis(x.reshape(8, 3), indices), x.reshape(8, 3)[indices])


def test_rotary_matches_the_documented_rotation(fa):
    from flash_attn.layers.rotary import apply_rotary_emb

    torch.manual_seed(0)
    x = torch.randn(2, 5, 3, 8, dtype=torch.float64)
    angle = torch.randn(9, 2, dtype=torch.float64)  # rotary_dim 4 of headdim 8
    cos, sin = angle.cos(), angle.sin()
    for interleaved in (False, True):
        got = apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=2)
        c, s_ = cos[2:7].view(1, 5, 1, 2), sin[2:7].view(1, 5, 1, 2)
        if interleaved:  # GPT-J: pairs (0,1), (2,3)
            x0, x1 = x[..., 0:4:2], x[..., 1:4:2]
            rot = torch.stack((x0 * c - x1 * s_, x0 * s_ + x1 * c), -1).flatten(-2)
        else:  # GPT-NeoX: halves
            x0, x1 = x[..., :2], x[..., 2:4]
            rot = torch.cat((x0 * c - x1 * s_, x0 * s_ + x1 * c), -1)
        torch.testing.assert_close(got, torch.cat((rot, x[..., 4:]), -1))


def test_norms_match_their_formulas(fa):
    from flash_attn.ops.rms_norm import RMSNorm, dropout_add_rms_norm
    from flash_attn.ops.triton.layer_norm import layer_norm_fn, rms_norm_fn

    torch.manual_seed(0)
    x, res = torch.randn(4, 16, dtype=torch.float64), torch.randn(4, 16, dtype=torch.float64)
    w, b = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    norm = RMSNorm(16, eps=1e-5).double()
    norm.weight.data = w
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
    torch.testing.assert_close(norm(x), expected, rtol=1e-6, atol=1e-6)
    out, resid = rms_norm_fn(x, w, None, residual=res, eps=1e-5, prenorm=True)
    h = x + res
    torch.testing.assert_close(out, h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * w, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(resid, h)
    torch.testing.assert_close(layer_norm_fn(x, w, b, eps=1e-5),
                               torch.nn.functional.layer_norm(x, (16,), w, b, 1e-5), rtol=1e-6, atol=1e-6)
    out, resid = dropout_add_rms_norm(x, None, w, None, 0.0, 1e-5, prenorm=True, residual_in_fp32=True)
    assert resid.dtype == torch.float32  # residual_in_fp32 and no residual: a float32 residual stream


XF_BIASES = ["none", "tensor", "lower", "lower_br", "lower_br_local", "lower_bias"]


@given(kind=st.sampled_from(XF_BIASES), sq=st.integers(1, 6), sk=st.integers(1, 6), seed=st.integers(0, 999))
@FAST
def test_memory_efficient_attention_dense_biases(fa, kind, sq, sk, seed):
    import xformers.ops as xops

    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, sq, 3, 8, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, sk, 3, 8, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, sk, 3, 8, generator=g, dtype=torch.float64, requires_grad=True)
    tensor = torch.randn(2, 3, sq, sk, generator=g, dtype=torch.float64)
    bias, ref_kw, extra = {
        "none": (None, {}, None),
        "tensor": (tensor, {}, tensor),
        "lower": (xops.LowerTriangularMask(), {"causal": True, "top_left": True, "flash": False}, None),
        "lower_br": (xops.fmha.attn_bias.LowerTriangularFromBottomRightMask(), {"causal": True, "flash": False}, None),
        "lower_br_local": (xops.fmha.attn_bias.LowerTriangularFromBottomRightMask().make_local_attention(2),
                           {"causal": True, "window": (1, 0), "flash": False}, None),
        "lower_bias": (xops.LowerTriangularMask().add_bias(tensor), {"causal": True, "top_left": True}, tensor),
    }[kind]
    out = xops.memory_efficient_attention(q, k, v, attn_bias=bias)
    if extra is None:
        ref = reference(q, k, v, 8 ** -0.5, **ref_kw)[0]
    else:  # an additive bias: the reference with the bias folded into the scores via q's extra column
        s = torch.einsum("bihd,bjhd->bhij", q, k) * 8 ** -0.5 + extra
        i, j = torch.arange(sq).view(-1, 1), torch.arange(sk).view(1, -1)
        if ref_kw:
            s = s.masked_fill(j > i, float("-inf"))
        ref = torch.einsum("bhij,bjhd->bihd", torch.nan_to_num(torch.softmax(s, -1)), v)
    torch.testing.assert_close(out, ref, rtol=1e-7, atol=1e-9)
    w = torch.randn_like(ref)
    for a, e in zip(torch.autograd.grad((out * w).sum(), (q, k, v)), torch.autograd.grad((ref * w).sum(), (q, k, v))):
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-8)


@given(lens=st.lists(st.tuples(st.integers(1, 5), st.integers(1, 5)), min_size=1, max_size=3),
       kind=st.sampled_from(["plain", "causal", "causal_br"]), seed=st.integers(0, 999))
@FAST
def test_memory_efficient_attention_block_diagonal(fa, lens, kind, seed):
    from xformers.ops import fmha, memory_efficient_attention

    g = torch.Generator().manual_seed(seed)
    lq, lk = [a for a, _ in lens], [b for _, b in lens]
    bias = fmha.BlockDiagonalMask.from_seqlens(lq, lk)
    bias = {"plain": bias, "causal": bias.make_causal(), "causal_br": bias.make_causal_from_bottomright()}[kind]
    q = torch.randn(1, sum(lq), 2, 4, generator=g, dtype=torch.float64)
    k = torch.randn(1, sum(lk), 2, 4, generator=g, dtype=torch.float64)
    v = torch.randn(1, sum(lk), 2, 4, generator=g, dtype=torch.float64)
    out = memory_efficient_attention(q, k, v, attn_bias=bias)
    parts, a, c = [], 0, 0
    for n, m in zip(lq, lk):
        parts.append(reference(q[:, a:a + n], k[:, c:c + m], v[:, c:c + m], 0.5, causal=kind != "plain",
                               top_left=kind == "causal", flash=False)[0])
        a, c = a + n, c + m
    torch.testing.assert_close(out, torch.cat(parts, dim=1), rtol=1e-7, atol=1e-9)


def test_memory_efficient_attention_layouts(fa):
    import xformers
    import xformers.ops as xops

    assert xformers.__version__ == "0.0.29.post3"
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 5, 8, dtype=torch.float64) for _ in range(3))  # [B, M, K]: no head dim
    torch.testing.assert_close(xops.memory_efficient_attention(q, k, v, scale=0.1),
                               reference(q[:, :, None], k[:, :, None], v[:, :, None], 0.1)[0][:, :, 0])
    q5 = torch.randn(1, 4, 2, 3, 8, dtype=torch.float64)  # [B, M, G, H, K]: grouped heads, k/v shared per group
    k5 = torch.randn(1, 6, 2, 1, 8, dtype=torch.float64).expand(1, 6, 2, 3, 8)
    v5 = torch.randn(1, 6, 2, 1, 8, dtype=torch.float64).expand(1, 6, 2, 3, 8)
    got = xops.memory_efficient_attention(q5, k5, v5)
    ref = reference(q5.reshape(1, 4, 6, 8), k5.reshape(1, 6, 6, 8), v5.reshape(1, 6, 6, 8), 8 ** -0.5)[0]
    torch.testing.assert_close(got, ref.reshape(1, 4, 2, 3, 8))
    with pytest.raises(TypeError, match="not provided by transfer"):
        xops.memory_efficient_attention(q, k, v, attn_bias=object())


@needs_standins
@pytest.mark.parametrize("vendor", ["npu", "sdaa", "gcu"])
@SLOW
def test_on_the_vendor_standins(vendor, tmp_path):
    """The same checks on each stand-in's device, in a subprocess (npu: npu_fusion_attention)."""
    script = os.path.join(SCRIPTS, "thirdparty", "attention_on_device.py")
    env = clean_env(PYTHONPATH=os.path.join(VENDORS) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    TRANSFER_DEVICE=vendor, TRANSFER_QUIET="1")
    result = run([sys.executable, script, vendor], env=env, timeout=600)
    assert f"attention on {vendor}: all checks passed" in result.stdout, result.stdout
    if vendor == "npu":
        assert "npu_fusion_attention calls: " in result.stdout
        calls = int(result.stdout.split("npu_fusion_attention calls: ")[1].split()[0])
        assert calls > 0
