"""torch_npu's torch.compile registrations, as torch_npu 2.13.0 makes them (read in the PyPI wheel:
``torch_npu/utils/_dynamo.py``, ``torch_npu/utils/_dynamo_device.py``, ``torch_npu/dynamo/__init__.py``,
``torch_npu/_inductor/__init__.py``, entry points ``torch_dynamo_backends``).

When ``torch._dynamo`` is first imported (torch_npu puts a finder on ``sys.meta_path`` for it; so does this
stand-in) or at once if it already is:

* the device interface ``NpuInterface`` for ``npu`` and ``npu:0`` .. ``npu:31``
  (``torch._dynamo.device_interface.register_interface_for_device``; torch >= 2.2);
* the dynamo backends ``npu`` (TorchAir's GE graph compiler in the real one; without torchair it returns
  the graph as is) and ``npugraphs`` (graph trees: NPU graph capture of inductor-compiled graphs);
  ``npugraph_ex`` needs TorchAir: not registered here.

What the stand-in's backends are built on: the stand-in device has no compiler, and inductor's CPU code
generator cannot address its memory, so ``npu`` and ``npugraphs`` run their graphs through AOTAutograd
with the graphs executed op by op (dynamo's ``aot_eager``), registered the vendor's way under the
vendor's names. They count the graphs they compile (``COMPILED``; ``SIM_ACCEL_STATS_DIR``'s file
``compiled_graphs``) so a test sees that the vendor's compiler ran.

Not modelled: torch_npu registers inductor code generation for ``npu`` (``register_backend_for_device``
with ``NPUCombinedScheduling``) inside its inductor wrapper, and only when Triton-Ascend is installed
("triton-ascend is not installed. Please install it first." otherwise); the stand-in never does, as a
torch_npu without Triton-Ascend.
"""

import importlib.abc
import importlib.util
import sys
from collections import Counter

import torch

COMPILED = Counter()  # backend name -> graphs compiled


def _backend(name):
    def compile_graph(gm, example_inputs, **kwargs):
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        COMPILED[name] += 1

        def run_op_by_op(graph, _inputs):
            return make_boxed_func(graph)

        return aot_autograd(fw_compiler=run_op_by_op, bw_compiler=run_op_by_op)(gm, example_inputs)

    compile_graph.__name__ = f"_{name}_backend"
    return compile_graph


def _interface(npu):
    from torch._dynamo.device_interface import DeviceInterface

    class NpuInterface(DeviceInterface):
        device = torch.device
        Event = npu.Event
        Stream = npu.Stream

        class Worker:
            @staticmethod
            def set_device(device):
                npu.set_device(device)

            @staticmethod
            def current_device():
                return npu.current_device()

            @staticmethod
            def get_device_properties(device=None):
                return npu.get_device_properties(device if device is not None else npu.current_device())

        current_device = staticmethod(npu.current_device)
        set_device = staticmethod(npu.set_device)
        device_count = staticmethod(npu.device_count)
        stream = staticmethod(npu.stream)
        current_stream = staticmethod(npu.current_stream)
        set_stream = staticmethod(npu.set_stream)
        synchronize = staticmethod(npu.synchronize)
        get_device_properties = staticmethod(npu.get_device_properties)
        get_raw_stream = staticmethod(lambda device=None: 0)

        @staticmethod
        def is_available():
            return npu.device_count() > 0

        @staticmethod
        def get_compute_capability(device=None):  # torch_npu: the chip's name, not a CUDA capability
            return npu.get_device_name(device)

        @staticmethod
        def exchange_device(device):
            current = npu.current_device()
            npu.set_device(device)
            return current

        @staticmethod
        def maybe_exchange_device(device):
            return device

        @staticmethod
        def is_bf16_supported(including_emulation=False):
            return npu.is_bf16_supported()

    return NpuInterface


def _register(npu):
    from torch._dynamo.backends import registry

    # the registered backends: _COMPILER_FNS from torch 2.2, _BACKENDS before (register_backend asserts a new name)
    known = getattr(registry, "_COMPILER_FNS", None)
    if known is None:
        known = getattr(registry, "_BACKENDS", {})
    for name in ("npu", "npugraphs"):
        if name not in known:
            registry.register_backend(compiler_fn=_backend(name), name=name)
    try:
        from torch._dynamo.device_interface import register_interface_for_device
    except ImportError:  # torch < 2.2: no device interfaces
        return
    interface = _interface(npu)
    register_interface_for_device("npu", interface)
    for i in range(32):
        register_interface_for_device(f"npu:{i}", interface)


class _AfterDynamoImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """torch_npu's _DynamoPostImportFinder: runs the registration once torch._dynamo is imported."""

    def __init__(self, npu):
        self.npu = npu
        self.loader = None

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch._dynamo" or self.loader is not None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        self.loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        _register(self.npu)


def extend(npu):
    if "torch._dynamo" in sys.modules:
        _register(npu)
    else:
        sys.meta_path.insert(0, _AfterDynamoImport(npu))
