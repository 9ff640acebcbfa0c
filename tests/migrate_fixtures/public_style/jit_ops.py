import torch
import triton
import triton.language as tl
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="scale_ext", cpp_sources="void scale(torch::Tensor x, double s);",
                   cuda_sources=open("csrc/fused_ops_kernel.cu").read(), functions=["scale"])


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return out
