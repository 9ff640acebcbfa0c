from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="fused_ops",
    ext_modules=[CUDAExtension("fused_ops_cuda", ["csrc/fused_ops.cpp", "csrc/fused_ops_kernel.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
