"""Stand-in for ``torch_npu.contrib``: only its ``transfer_to_npu`` submodule (see that module).

The real package also holds Ascend drop-in functions and modules (``npu_functional``,
``npu_modules``); they are not simulated.
"""
