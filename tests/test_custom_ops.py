"""Custom operators registered for CUDA, and CUDA C++ extension builds.

A kernel registered for the CUDA dispatch keys runs on the target (on CUDA it runs for CUDA tensors; the
script's "cuda" tensors are the target's); a kernel registered natively for the target wins; uninstall
removes what transfer registered. Building CUDA sources fails at once with an error naming the files and
what the target offers instead. Without transfer every op call below fails with torch's
NotImplementedError ("Could not run ... with arguments from the 'CPU' backend"). The stand-ins run
tests/scripts/thirdparty/custom_op_model.py in tests/test_apex_e2e.py.
"""

import itertools
import os
import warnings

import pytest
import torch

from conftest import NO_STANDINS, STANDINS, VENDORS, clean_env, python

_names = itertools.count()


def namespace():
    return f"tcops{os.getpid()}_{next(_names)}"


def test_library_impl_for_cuda_runs_on_the_target(cpu_target):
    ns = namespace()
    lib = torch.library.Library(ns, "DEF")
    lib.define("scale(Tensor x, float s) -> Tensor")
    lib.impl("scale", lambda x, s: x * s, "CUDA")
    x = torch.randn(4, device="cuda")
    torch.testing.assert_close(getattr(torch.ops, ns).scale(x, 3.0), x * 3.0)


def test_autograd_cuda_and_cuda_keyed_library(cpu_target):
    ns = namespace()
    lib = torch.library.Library(ns, "DEF")
    lib.define("square(Tensor x) -> Tensor")
    impl = torch.library.Library(ns, "IMPL", "CUDA")  # a library whose default key is CUDA
    impl.impl("square", lambda x: x * x)

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            with torch._C._AutoDispatchBelowAutograd():
                return getattr(torch.ops, ns).square(x)

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 2 * x * grad * 10  # distinguishable from the true gradient: proves this kernel ran

    lib.impl("square", Square.apply, "AutogradCUDA")
    x = torch.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    y = getattr(torch.ops, ns).square(x)
    y.sum().backward()
    assert y.tolist() == [1.0, 4.0] and x.grad.tolist() == [20.0, 40.0]


def test_torch_library_impl_register_kernel_and_custom_op(cpu_target):
    ns = namespace()
    torch.library.define(f"{ns}::plus1", "(Tensor x) -> Tensor")

    @torch.library.impl(f"{ns}::plus1", "cuda")
    def _(x):
        return x + 1

    assert getattr(torch.ops, ns).plus1(torch.zeros(2, device="cuda")).tolist() == [1.0, 1.0]
    if not hasattr(torch.library, "custom_op"):  # torch < 2.4
        return

    @torch.library.custom_op(f"{ns}::twice", mutates_args=(), device_types="cuda")
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @twice.register_fake
    def _(x):
        return torch.empty_like(x)

    twice.register_autograd(lambda ctx, g: g * 2)
    x = torch.ones(3, device="cuda", requires_grad=True)
    twice(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
    compiled = torch.compile(lambda t: twice(t) + 1, fullgraph=True, backend="eager")
    assert compiled(torch.ones(2, device="cuda")).tolist() == [3.0, 3.0]

    @torch.library.custom_op(f"{ns}::neg", mutates_args=())
    def neg(x: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the default kernel must not run for 'cuda' tensors")

    torch.library.register_kernel(f"{ns}::neg", "cuda", lambda x: -x)
    assert neg(torch.ones(1, device="cuda")).tolist() == [-1.0]


def test_a_native_kernel_for_the_target_wins(cpu_target):
    ns = namespace()
    lib = torch.library.Library(ns, "DEF")
    lib.define("which(Tensor x) -> Tensor")
    lib.impl("which", lambda x: torch.full_like(x, 1.0), "CPU")
    lib.impl("which", lambda x: torch.full_like(x, 2.0), "CUDA")
    assert getattr(torch.ops, ns).which(torch.zeros(1, device="cuda")).item() == 1.0  # CPU kernel registered first
    lib.define("later(Tensor x) -> Tensor")
    lib.impl("later", lambda x: torch.full_like(x, 2.0), "CUDA")
    lib.impl("later", lambda x: torch.full_like(x, 1.0), "CPU")  # registered afterwards: replaces the translation
    assert getattr(torch.ops, ns).later(torch.zeros(1, device="cuda")).item() == 1.0


def test_cuda_overrides_of_torchs_own_operators_stay_cuda_s(cpu_target):
    """A CUDA kernel for an aten op overrides CUDA's implementation (torch 2.14's own Triton bmm router is
    one): it is not copied to the target's key, where it would run CUDA code on the target's tensors.
    `_fused_dropout` has a CUDA kernel only, so a copy would be the only CPU kernel."""
    from transfer.cpu.kernels import destroy  # Library._destroy where torch has it (2.2+)

    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_fused_dropout", "CPU")
    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel" on a CUDA build
            lib.impl("_fused_dropout", lambda x, p, generator=None: (x, x > 0), "CUDA")
        assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::_fused_dropout", "CUDA")
        assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_fused_dropout", "CPU")
    finally:
        destroy(lib)


def test_uninstall_removes_the_translated_kernels(cpu_target):
    import transfer

    ns = namespace()
    lib = torch.library.Library(ns, "DEF")
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x + 1, "CUDA")
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"{ns}::f", "CPU")
    transfer.uninstall()
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(f"{ns}::f", "CPU")
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"{ns}::f", "CUDA")  # the script's own registration stays
    with pytest.raises(NotImplementedError, match="'CPU' backend"):
        getattr(torch.ops, ns).f(torch.zeros(1))


def test_cuda_extension_builds_fail_clearly(cpu_target, tmp_path):
    from transfer.errors import UnsupportedCudaAPI
    from torch.utils import cpp_extension

    kernel = tmp_path / "fused_kernel.cu"
    kernel.write_text("__global__ void k() {}\n")
    with pytest.raises(UnsupportedCudaAPI) as info:
        cpp_extension.load("fused", [str(tmp_path / "binding.cpp"), str(kernel)])
    message = str(info.value)
    assert "fused_kernel.cu" in message and "cpu target" in message and "CppExtension" in message
    assert info.traceback[-1].path.name == "custom_ops.py"  # raised before any build step ran
    with pytest.raises(UnsupportedCudaAPI, match="cuda_sources"):
        cpp_extension.load_inline("inl", cpp_sources="", cuda_sources="__global__ void k() {}")
    with pytest.raises(UnsupportedCudaAPI, match="CUDAExtension 'ext': CUDA sources csrc/attn.cu"):
        cpp_extension.CUDAExtension("ext", ["csrc/binding.cpp", "csrc/attn.cu"])
    assert cpp_extension.CppExtension("ok", ["a.cpp"]).name == "ok"  # C++-only builds are untouched


@pytest.mark.skipif(not STANDINS, reason=NO_STANDINS)
def test_cuda_extension_error_names_the_vendor_path():
    code = ("from torch.utils import cpp_extension\n"
            "try:\n    cpp_extension.CUDAExtension('ext', ['k.cu'])\n"
            "except NotImplementedError as e:\n    print(e)\n")
    proc = python("-c", code, env=clean_env(TRANSFER_DEVICE="npu", PYTHONPATH=VENDORS, TRANSFER_QUIET=1), timeout=600)
    assert "k.cu" in proc.stdout and "Ascend C" in proc.stdout and "PrivateUse1" in proc.stdout, proc.stdout
