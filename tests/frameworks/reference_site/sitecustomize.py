"""The DeepSpeed reference jobs' start-up (tests/frameworks/test_engines_deepspeed.py): DeepSpeed's CPU accelerator
takes float16, as CUDA's does.

DeepSpeed's CPU accelerator declines fp16 ("Type fp16 is not supported on your device") where oneDNN has no
native float16 (no AVX512-FP16/AMX-FP16: most CI and laptop CPUs), so the fp16 reference ran on some machines
and not others. torch computes float16 on every CPU; the reference is the same job as on CUDA, which takes fp16.
"""

try:
    from deepspeed.accelerator import cpu_accelerator
except ImportError:  # a process that is not DeepSpeed's (nothing to do)
    pass
else:
    cpu_accelerator.CPU_Accelerator.is_fp16_supported = lambda self: True
