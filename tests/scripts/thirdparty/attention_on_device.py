"""flash_attn and xformers on a vendor device, against a float64 CPU reference written from the
packages' documented semantics. Usage: python attention_on_device.py <device type>.
Run under TRANSFER_DEVICE=<device> with the stand-ins on PYTHONPATH (tests/test_thirdparty_attention.py)."""

import sys

import torch

device = sys.argv[1]
counter = {"calls": 0}
if device == "npu":
    import torch_npu

    real = torch_npu.npu_fusion_attention

    def counting(*args, **kwargs):
        counter["calls"] += 1
        return real(*args, **kwargs)

    torch_npu.npu_fusion_attention = counting

from flash_attn import flash_attn_func, flash_attn_varlen_func  # noqa: E402
from xformers.ops import LowerTriangularMask, memory_efficient_attention  # noqa: E402


def reference(q, k, v, causal=False, window=(-1, -1), softcap=0.0, top_left=False):
    q, k, v = q.double().cpu(), k.double().cpu(), v.double().cpu()
    h, hk = q.shape[2], k.shape[2]
    k, v = k.repeat_interleave(h // hk, 2), v.repeat_interleave(h // hk, 2)
    sq, sk = q.shape[1], k.shape[1]
    s = torch.einsum("bihd,bjhd->bhij", q, k) / q.shape[-1] ** 0.5
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i, j = torch.arange(sq).view(-1, 1), torch.arange(sk).view(1, -1)
    shift = 0 if top_left else sk - sq
    left, right = window[0], 0 if causal else window[1]
    ok = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        ok &= j >= i + shift - left
    if right >= 0:
        ok &= j <= i + shift + right
    s = s.masked_fill(~ok, float("-inf"))
    p = torch.nan_to_num(torch.softmax(s, -1), nan=0.0)
    return torch.einsum("bhij,bjhd->bihd", p, v)


torch.manual_seed(0)
cases = [dict(sq=6, sk=6, causal=True), dict(sq=3, sk=7, causal=True), dict(sq=7, sk=3, causal=True),
         dict(sq=6, sk=9, window=(2, 1)), dict(sq=5, sk=5, causal=True, window=(2, -1)), dict(sq=4, sk=6),
         dict(sq=5, sk=5, causal=True, softcap=2.0)]
for case in cases:
    q = torch.randn(2, case["sq"], 4, 8)
    k, v = torch.randn(2, case["sk"], 2, 8), torch.randn(2, case["sk"], 2, 8)
    qd, kd, vd = (t.to(f"cuda:1").requires_grad_() for t in (q, k, v))  # a CUDA script's device
    assert qd.device.type == device, qd.device
    out = flash_attn_func(qd, kd, vd, causal=case.get("causal", False), window_size=case.get("window", (-1, -1)),
                          softcap=case.get("softcap", 0.0))
    assert out.device == qd.device, out.device
    ref = reference(q, k, v, case.get("causal", False), case.get("window", (-1, -1)), case.get("softcap", 0.0))
    torch.testing.assert_close(out.detach().cpu().double(), ref, atol=2e-5, rtol=1e-4, msg=str(case))
    out.sum().backward()
    assert qd.grad.device == qd.device and torch.isfinite(qd.grad.cpu()).all()

lens_q, lens_k = [3, 5], [4, 5]
cu_q = torch.tensor([0, 3, 8], dtype=torch.int32, device="cuda")
cu_k = torch.tensor([0, 4, 9], dtype=torch.int32, device="cuda")
q, k, v = torch.randn(8, 4, 8), torch.randn(9, 2, 8), torch.randn(9, 2, 8)
out = flash_attn_varlen_func(q.cuda(), k.cuda(), v.cuda(), cu_q, cu_k, 5, 5, causal=True)
ref = torch.cat([reference(q[None, 0:3], k[None, 0:4], v[None, 0:4], True)[0],
                 reference(q[None, 3:8], k[None, 4:9], v[None, 4:9], True)[0]])
torch.testing.assert_close(out.cpu().double(), ref, atol=2e-5, rtol=1e-4)

x = torch.randn(2, 6, 3, 8)
got = memory_efficient_attention(x.cuda(), x.cuda(), x.cuda(), attn_bias=LowerTriangularMask())
torch.testing.assert_close(got.cpu().double(), reference(x, x, x, causal=True, top_left=True), atol=2e-5, rtol=1e-4)
if device == "npu":
    print(f"npu_fusion_attention calls: {counter['calls']}")
print(f"attention on {device}: all checks passed")
