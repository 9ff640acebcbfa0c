"""torch's own reads of ``Tensor.is_cuda``: where they are, and what each gets under transfer.

Under transfer ``x.is_cuda`` is the target's own getter (``is_cpu`` on the cpu
target, ``is_npu``... on a vendor), so a script's ``if x.is_cuda:`` takes its
CUDA branch. torch's own Python code reads ``is_cuda`` too, and there the
CUDA branch can mean CUDA memory, CUDA kernels or CUDA graphs. Each function of
torch that reads it is listed in `SITES` with a decision:

* ``NATIVE``: the CUDA branch would treat the target's memory as CUDA memory
  or run CUDA-only code; the function reads the tensor's real ``is_cuda``
  (False off CUDA), exactly as torch does natively for a CPU or vendor tensor.
  `transfer.patches.torch_sites` arranges that, for these functions only, by
  renaming the attribute their bytecode loads (``is_cuda`` ->
  ``_transfer_native_is_cuda``, torch's own C getter); every other read,
  the script's included, keeps the target's getter and its cost.
* ``CUDA``: the CUDA branch computes what CUDA computes (the oracle): kept.
* ``SAME``: both branches compute the same thing on the target: kept.
* ``SCRIPT``: the answer is the script's view of its own tensors (a
  ``.is_cuda`` property of a torch class, a check before translating): kept.
* ``TOOLING``: CUDA-only tooling a script on the target cannot reach
  (sanitizer, NCCL bindings, repro scripts): kept.
* ``OTHER``: not a read of ``Tensor.is_cuda`` (a storage's, a module's, a
  context object's attribute of that name): nothing to decide.

`scan()` finds the sites in an installed torch by parsing its sources (no
import), so the table can be checked against any torch version:
``python -m transfer.patches.torch_sites`` lists them with their decisions and names
every site the table lacks (tests/test_torch_is_cuda_sites.py fails on one).
docs/torch-is-cuda-sites.md is this table in prose.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple

NATIVE, CUDA, SAME, SCRIPT, TOOLING, OTHER = "native", "cuda", "same", "script", "tooling", "other"
DECISIONS = (NATIVE, CUDA, SAME, SCRIPT, TOOLING, OTHER)

#: The name the renamed reads load: torch's own C getter, installed on torch.Tensor under it.
NATIVE_NAME = "_transfer_native_is_cuda"


class Site(NamedTuple):
    path: str  # relative to torch's package directory, '/'-separated
    qualname: str  # the enclosing function (or class body / module: '<module>')
    line: int
    text: str  # the source line, stripped


# (path, qualname) -> (decision, reason). Keyed by function, not line: lines move between versions.
SITES: Dict[Tuple[str, str], Tuple[str, str]] = {
    # -- native: the CUDA branch would use host or vendor memory as CUDA memory / run CUDA-only code
    ("_tensor.py", "Tensor.__cuda_array_interface__"): (
        NATIVE, "would hand the tensor's host (or vendor) memory to CuPy/Numba as CUDA memory; natively an "
                "AttributeError, so hasattr(x, '__cuda_array_interface__') is False"),
    ("_tensor.py", "Tensor.__dir__"): (NATIVE, "lists __cuda_array_interface__ only where it exists"),
    ("_decomp/decompositions.py", "log_sigmoid_forward"): (
        NATIVE, "the CUDA branch returns an empty buffer, which the CPU backward kernel reads; same forward values"),
    ("_decomp/decompositions_for_jvp.py", "log_sigmoid_forward"): (NATIVE, "as in _decomp/decompositions.py"),
    ("sparse/semi_structured.py", "SparseSemiStructuredTensor._validate_device_dim_dtype_shape"): (
        NATIVE, "semi-structured sparsity has CUDA kernels only: torch's own error instead of a failure inside them"),
    ("nn/attention/_fa3.py", "_fa3_common_support_error.<genexpr>"): (
        NATIVE, "FlashAttention-3 kernels are CUDA-only: torch's own support error"),
    ("nn/attention/_fa3.py", "_fa3_forward_support_error"): (NATIVE, "as _fa3_common_support_error"),
    ("nn/attention/_fa4.py", "_fa4_common_support_error.<genexpr>"): (
        NATIVE, "FlashAttention-4 kernels are CUDA-only: torch's own support error"),
    ("nn/attention/_fa4.py", "_fa4_forward_support_error"): (NATIVE, "as _fa4_common_support_error"),
    ("nn/attention/varlen.py", "_varlen_attn"): (NATIVE, "the cuDNN varlen kernel is CUDA-only"),
    ("nn/attention/varlen.py", "_varlen_attn_out"): (NATIVE, "the cuDNN varlen kernel is CUDA-only"),
    ("nn/attention/varlen.py", "_varlen_attn_backward"): (NATIVE, "the cuDNN varlen kernel is CUDA-only"),
    ("nn/attention/experimental/_scaled_dot_product_attention_quantized.py", "_validate_descale"): (
        NATIVE, "quantized SDPA kernels are CUDA-only: torch's own error"),
    ("_higher_order_ops/inline_asm_elementwise.py", "_inline_asm_dense"): (NATIVE, "inline PTX runs on CUDA only"),
    ("_higher_order_ops/cudagraph_conditional_nodes.py", "if_else_node"): (
        NATIVE, "CUDA graph conditional nodes need CUDA memory: torch's own error"),
    ("_higher_order_ops/out_dtype.py", "is_int_mm"): (
        NATIVE, "torch._int_mm's CUDA constraints; the generic path gives the same int32 result"),
    ("_dynamo/variables/optimizer.py", "_is_static_for_cudagraphs"): (NATIVE, "CUDA graph trees: CUDA memory only"),
    ("_dynamo/utils.py", "check_is_cuda.<genexpr>"): (NATIVE, "the cudagraphs backend: CUDA memory only"),
    ("_inductor/cudagraph_trees.py", "CUDAWarmupNode.run.add_ref"): (NATIVE, "CUDA graph trees: CUDA memory only"),
    ("_inductor/cudagraph_trees.py", "CUDAGraphNode._add_first_outputs"): (NATIVE, "CUDA graph trees"),
    ("_inductor/cudagraph_trees.py", "CUDAGraphTreeManager.add_function.<genexpr>"): (NATIVE, "CUDA graph trees"),
    ("_inductor/fx_passes/pad_mm.py", "check_device"): (
        NATIVE, "inductor compiles for the real device; matmul padding is a CUDA tuning pass"),
    ("_inductor/fx_passes/pad_mm.py", "_should_pad"): (NATIVE, "as pad_mm.check_device"),
    ("_inductor/lowering.py", "sdpa_constraint._apply_constraint_inner"): (
        NATIVE, "inductor compiles for the real device: CUDA SDPA alignment rules"),
    ("_inductor/codegen/cpp_wrapper_cpu.py", "CppWrapperCpu.codegen_model_constructor.<genexpr>"): (
        NATIVE, "AOTInductor would treat host constants as CUDA data"),
    ("_inductor/codecache.py", "AotCodeCompiler.compile.<genexpr>"): (
        NATIVE, "AOTInductor would treat host constants as CUDA data"),
    ("_inductor/kernel/flex_gemm/runtime.py", "_check_matrix"): (NATIVE, "CUDA gemm kernels only"),
    ("_native/ops/topk/cutedsl_impl.py", "_eligible"): (NATIVE, "CuTe DSL kernels run on CUDA only"),
    ("_native/ops/bmm_outer_product/triton_impl.py", "_bmm_outer_product_cond"): (
        NATIVE, "Triton kernels run on CUDA only"),
    ("_native/ops/foreach_mm/impl.py", "_foreach_mm_cond"): (NATIVE, "grouped-GEMM kernels run on CUDA only"),
    ("_native/ops/scatter_add/cutedsl_impl.py", "_base_cond_ok.<genexpr>"): (
        NATIVE, "CuTe DSL kernels run on CUDA only"),
    # (torch 2.14)
    ("_higher_order_ops/cudagraph_conditional_nodes.py", "_is_boolean_scalar_cuda_tensor"): (
        NATIVE, "CUDA graph conditional nodes need CUDA memory"),
    ("_inductor/lowering.py", "_strict_sum_layout_eligible"): (NATIVE, "inductor compiles for the real device"),
    ("_inductor/fx_passes/pad_mm.py", "should_pad_addmm"): (NATIVE, "as pad_mm.check_device"),
    ("_inductor/kernel/flex_gemm/runtime.py", "check_matrix"): (NATIVE, "CUDA gemm kernels only"),
    ("_native/ops/sum/cutedsl_impl.py", "_base_cond_ok"): (NATIVE, "CuTe DSL kernels run on CUDA only"),
    ("_native/ops/sum/cutedsl_impl.py", "_out_cond"): (NATIVE, "CuTe DSL kernels run on CUDA only"),
    ("nn/attention/varlen.py", "_can_use_cudnn"): (NATIVE, "the cuDNN varlen kernel is CUDA-only"),
    ("cuda/memory.py", "_annotate_tensor"): (
        NATIVE, "annotates CUDA allocator memory: torch's own ValueError instead of a missing CUDA binding"),
    # (torch 2.15)
    ("_inductor/lowering.py", "_strict_reduction_layout_eligible"): (NATIVE, "inductor compiles for the real device"),
    ("_inductor/select_algorithm.py", "ExternKernelCaller.benchmark"): (
        NATIVE, "inductor benchmarks for the real device: the CUDA branch masks CUDA outputs"),
    ("_inductor/kernel/flex_gemm/runtime.py", "normalize_c"): (NATIVE, "CUDA gemm kernels only"),
    ("_native/ops/reductions/cutedsl_impl.py", "_base_cond_ok"): (NATIVE, "CuTe DSL kernels run on CUDA only"),
    ("_native/ops/reductions/cutedsl_impl.py", "_out_cond"): (NATIVE, "CuTe DSL kernels run on CUDA only"),
    ("_native/ops/reductions/kernel_coltile.py", "reduce_col_tile"): (NATIVE, "CuTe DSL kernels run on CUDA only"),
    ("_native/ops/reductions/kernel_general.py", "_reduce"): (NATIVE, "CuTe DSL kernels run on CUDA only"),
    ("_native/ops/reductions/kernel_general.py", "_reduce_all"): (NATIVE, "CuTe DSL kernels run on CUDA only"),
    ("_native/ops/reductions/kernel_rowtile.py", "reduce_row_tile"): (NATIVE, "CuTe DSL kernels run on CUDA only"),
    ("_native/ops/reductions/kernel_xcta.py", "_reduce_row_xcta"): (NATIVE, "CuTe DSL kernels run on CUDA only"),
    ("_native/ops/topk/aot.py", "covered_axes"): (NATIVE, "ahead-of-time CUDA topk kernels only"),
    ("_native/ops/topk/flydsl_impl.py", "_eligible"): (NATIVE, "FlyDSL kernels run on CUDA only"),
    ("_vendor/quack/epilogue/ops.py", "Scalar._validate_pointer_value"): (
        NATIVE, "quack's CuTe DSL kernels read device pointers: torch's own error for host memory"),
    ("_vendor/quack/operand_transform/kinds.py", "SeedKind.host_view"): (NATIVE, "as quack's Scalar"),
    ("distributed/_transport/nixl/_transport.py", "NIXLTransport._register_memory"): (
        NATIVE, "would register host memory with NIXL as GPU memory (VRAM); natively DRAM"),
    ("nn/attention/varlen.py", "_cudnn_version"): (NATIVE, "the cuDNN varlen kernel is CUDA-only"),
    ("nn/attention/varlen.py", "_cudnn_supports_head_dims"): (NATIVE, "the cuDNN varlen kernel is CUDA-only"),
    ("nn/attention/varlen.py", "_cudnn_rejection_reasons"): (NATIVE, "the cuDNN varlen kernel is CUDA-only"),
    # (torch 2.0)
    ("_inductor/decomposition.py", "check_device"): (NATIVE, "inductor's matmul padding is a CUDA tuning pass"),
    ("_inductor/decomposition.py", "should_pad_bench"): (NATIVE, "as _inductor/decomposition.check_device"),
    ("_inductor/codegen/autotuner.py", "tuned_conv"): (NATIVE, "inductor compiles for the real device"),
    ("_prims/nvfuser_executor.py", "nvfuser_execute.<genexpr>"): (NATIVE, "nvFuser runs on CUDA only"),
    ("distributed/checkpoint/filesystem.py", "_write_files_from_queue"): (
        NATIVE, "asserts the tensors it writes are in host memory, which the cpu target's are"),
    ("optim/adam.py", "Adam.__init__.<genexpr>"): (
        NATIVE, "fused=True (torch 2.0): on a vendor, torch's own 'requires all the params to be CUDA' error "
                "instead of a missing fused kernel; the cpu target keeps its getter, as transfer supplies the "
                "CPU kernel (CPU_KERNEL_SITES)"),
    ("optim/adamw.py", "AdamW.__init__.<genexpr>"): (NATIVE, "as Adam.__init__"),
    # -- cuda: the CUDA branch computes what CUDA computes
    ("_decomp/decompositions.py", "_addmm_activation"): (
        CUDA, "CUDA's fused addmm+GELU uses the tanh approximation; the decomposition does so for CUDA tensors"),
    ("_numpy/linalg.py", "lstsq"): (CUDA, "CUDA's lstsq has only the 'gels' driver; the result is CUDA's"),
    ("nn/functional.py", "max_pool3d_with_indices"): (
        CUDA, "deterministic mode: the decomposition CUDA uses; values and indices equal the native kernel's"),
    ("nn/functional.py", "pad"): (CUDA, "deterministic mode: the decomposition CUDA uses; same values"),
    ("_dynamo/variables/optimizer.py", "OptimizerVariable._set_capturable.safe_to_set_capturable"): (
        CUDA, "a compiled optimizer.step() sets capturable=True for CUDA parameters (kept in its state_dict); "
              "capturable Adam/AdamW compute the same on the CPU"),
    ("_dynamo/variables/optimizer.py", "OptimizerVariable._safe_to_set_capturable"): (
        CUDA, "torch 2.15's name for _set_capturable.safe_to_set_capturable: as there"),
    ("cuda/amp/autocast_mode.py", "_cast"): (
        CUDA, "torch < 2.4: custom_fwd(cast_inputs=...) casts CUDA floating tensors, as on CUDA"),
    ("optim/optimizer.py", "_default_to_fused_or_foreach.<genexpr>"): (
        CUDA, "the foreach implementation, CUDA's default; same values as the loop"),
    # -- same: both branches compute the same on the target
    ("nested/_internal/ops.py", "to_padded_tensor_default"): (
        SAME, "bool values pass through uint8 (a CUDA kernel gap) and back: same values"),
    ("nested/_internal/ops.py", "_nested_from_padded_tensor_default"): (SAME, "as to_padded_tensor_default"),
    ("nn/modules/rnn.py", "RNNBase.flatten_parameters"): (
        SAME, "the cuDNN path is then refused by cudnn.is_acceptable (not a CUDA tensor)"),
    ("autograd/_functions/tensor.py", "Type.forward"): (SAME, "get_device() is -1 for a host tensor either way"),
    ("distributed/distributed_c10d.py", "broadcast"): (
        SAME, "asks get_device_capability, which answers (0, 0) off CUDA: the fp8 path is not taken"),
    ("distributed/fsdp/sharded_grad_scaler.py", "_is_supported_device"): (SAME, "the target's device is supported"),
    ("cuda/__init__.py", "device_of.__init__"): (SAME, "torch.cuda.device_of is the target's own under transfer"),
    ("distributed/checkpoint/filesystem.py", "_OverlappingCpuLoader._refill"): (
        SAME, "copies device tensors to host memory, which they already are in"),
    ("distributed/fsdp/_optim_utils.py", "_communicate_optim_state"): (
        SAME, "moves between host and device memory: the same memory on the cpu target"),
    ("distributed/fsdp/_shard_utils.py", "_all_gather_sharded_tensor"): (SAME, "as _communicate_optim_state"),
    ("distributed/fsdp/_shard_utils.py", "_gather_state_dict"): (SAME, "as _communicate_optim_state"),
    ("distributed/fsdp/_state_dict_utils.py", "_sharded_pre_load_state_dict_hook"): (
        SAME, "as _communicate_optim_state"),
    ("nn/modules/activation.py", "MultiheadAttention.forward"): (
        SAME, "the fast path accepts CUDA and CPU tensors alike"),
    ("nn/modules/transformer.py", "TransformerEncoder.forward"): (SAME, "as MultiheadAttention.forward"),
    ("nn/modules/transformer.py", "TransformerEncoderLayer.forward.<genexpr>"): (
        SAME, "as MultiheadAttention.forward"),
    ("nn/utils/convert_parameters.py", "_check_param_device"): (
        SAME, "every parameter is on the same (virtual) device either way"),
    # -- script: the script's view of its own tensors
    ("nn/utils/rnn.py", "PackedSequence.cuda"): (SCRIPT, "a PackedSequence already 'on CUDA' moves as the script meant"),
    ("nn/utils/rnn.py", "PackedSequence.is_cuda"): (SCRIPT, "the is_cuda property of a torch class: the script's view"),
    ("nn/utils/_expanded_weights/expanded_weights_impl.py", "ExpandedWeight.is_cuda"): (SCRIPT, "as PackedSequence"),
    ("nn/modules/batchnorm.py", "SyncBatchNorm.forward"): (
        SCRIPT, "torch < 2.1: 'SyncBatchNorm expected input tensor to be on GPU'; the target's tensors pass"),
    ("utils/checkpoint.py", "get_device_states"): (
        SCRIPT, "torch < 2.1 stashes the RNG state of the script's CUDA devices (on the cpu target "
                "patches/rng.py restores the per-device generators itself)"),
    ("cuda/amp/grad_scaler.py", "_MultiDeviceReplicator.__init__"): (
        SCRIPT, "torch < 2.3's CUDA-only GradScaler asserts its tensors are CUDA: the target's pass"),
    ("cuda/amp/grad_scaler.py", "GradScaler.scale"): (SCRIPT, "as _MultiDeviceReplicator"),
    ("cuda/amp/grad_scaler.py", "GradScaler.scale.apply_scale"): (SCRIPT, "as _MultiDeviceReplicator"),
    ("optim/adam.py", "_single_tensor_adam"): (
        SCRIPT, "capturable=True asserts CUDA tensors; capturable Adam computes the same on the target"),
    ("optim/adam.py", "_multi_tensor_adam.<genexpr>"): (SCRIPT, "as _single_tensor_adam"),
    ("optim/adamw.py", "_single_tensor_adamw"): (SCRIPT, "as _single_tensor_adam"),
    ("optim/adamw.py", "_multi_tensor_adamw.<genexpr>"): (SCRIPT, "as _single_tensor_adam"),
    ("nn/modules/container.py", "ParameterList.extra_repr"): (
        SCRIPT, "torch < 2.1 prints '(GPU <get_device()>)': '(GPU -1)' on the cpu target, '(GPU 0)' on CUDA"),
    ("nn/modules/container.py", "ParameterDict.extra_repr"): (SCRIPT, "as ParameterList.extra_repr"),
    # -- tooling: CUDA-only tools, not reached by a script on the target
    ("cuda/_sanitizer.py", "ArgumentHandler._handle_argument"): (TOOLING, "CUDA stream sanitizer"),
    ("cuda/_utils.py", "_CudaKernel.__call__"): (TOOLING, "CUDA driver kernel launches"),
    ("cuda/nccl.py", "is_available"): (TOOLING, "raw NCCL bindings"),
    ("distributed/_nccl4py/backend.py", "NCCL4PyBackend._check_tensor"): (
        TOOLING, "torch 2.15's NCCL backend through nccl4py: under transfer a script's nccl is the target's backend"),
    ("utils/_cuda_debug.py", "_TensorTrackingMode._selects_cuda_dispatch_key"): (TOOLING, "CUDA kernel debugging"),
    ("utils/_cuda_debug.py", "_TensorTrackingMode._track_inputs"): (TOOLING, "CUDA kernel debugging"),
    ("utils/_cuda_debug.py", "_TensorTrackingMode._mark_outputs"): (TOOLING, "CUDA kernel debugging"),
    ("_dynamo/repro/after_aot.py", "_build_symbolic_wrapper"): (TOOLING, "writes repro scripts"),
    ("_dynamo/repro/aoti.py", "repro_run"): (TOOLING, "writes repro scripts"),
    ("_dynamo/repro/aoti.py", "repro_minify"): (TOOLING, "writes repro scripts"),
    ("_dynamo/debug_utils.py", "NNModuleToString.convert"): (TOOLING, "writes repro scripts"),
    ("_dynamo/debug_utils.py", "save_graph_repro"): (TOOLING, "writes repro scripts"),
    ("_dynamo/debug_utils.py", "inductor_fails"): (TOOLING, "the minifier"),
    # -- other: not Tensor.is_cuda
    ("multiprocessing/reductions.py", "reduce_storage"): (OTHER, "UntypedStorage.is_cuda (storages are not patched)"),
    ("backends/cudnn/__init__.py", "_init"): (OTHER, "torch._C._cudnn.is_cuda: a module flag"),
    ("nn/modules/linear_cross_entropy.py", "_ChunkViews.weight_grad_input"): (
        OTHER, "a context field computed from device.type == 'cuda'"),
    ("nn/modules/linear_cross_entropy.py", "_ChunkViews.logits_upcast"): (OTHER, "as _ChunkViews.weight_grad_input"),
    ("overrides.py", "get_testing_overrides"): (OTHER, "Tensor.is_cuda.__get__ as a dict key, not a read"),
    ("_utils.py", "_cuda"): (OTHER, "a storage's is_cuda (torch < 2.1's Storage.cuda)"),
    ("storage.py", "_StorageBase.pin_memory"): (OTHER, "a storage's is_cuda"),
    ("storage.py", "_StorageBase.share_memory_"): (OTHER, "a storage's is_cuda"),
}

#: NATIVE sites whose CUDA branch runs one ATen operator, named here: on the cpu target the site keeps the
#: target's getter (its CUDA branch) while the CPU has a kernel for that operator (torch's own, or the one
#: transfer.cpu.kernels registers: patches/optim.py), since the branch then computes what CUDA computes.
CPU_KERNEL_SITES: Dict[Tuple[str, str], str] = {
    ("optim/adam.py", "Adam.__init__.<genexpr>"): "aten::_fused_adam_",
    ("optim/adamw.py", "AdamW.__init__.<genexpr>"): "aten::_fused_adamw_",
}


def torch_dir() -> Optional[str]:
    """The installed torch's package directory, found without importing torch."""
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        return os.path.dirname(os.path.abspath(torch.__file__))
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


class _Finder(ast.NodeVisitor):
    """Attribute reads named ``is_cuda`` (not method calls), with their enclosing qualname."""

    def __init__(self, lines: List[str]):
        self.lines, self.scope, self.found = lines, [], []

    def _enter(self, node, name):
        self.scope.append(name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node):
        self._enter(node, node.name)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self._enter(node, node.name)

    def visit_Lambda(self, node):
        self._enter(node, "<lambda>")

    def visit_GeneratorExp(self, node):
        self._enter(node, "<genexpr>")

    def visit_Call(self, node):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "is_cuda":  # meta.is_cuda(): a method, not the getter
            self.generic_visit(func.value)
            for arg in node.args + [k.value for k in node.keywords]:
                self.visit(arg)
            return
        self.generic_visit(node)

    def visit_Attribute(self, node):
        if node.attr == "is_cuda" and isinstance(node.ctx, ast.Load):
            qualname = ".".join(self.scope) or "<module>"
            self.found.append((qualname, node.lineno, self.lines[node.lineno - 1].strip()))
        self.generic_visit(node)


def _skip(relative: str) -> bool:
    return relative.startswith(("testing/", "test/")) or "/test_" in relative or relative.startswith("test_")


def scan(root: Optional[str] = None) -> Iterator[Site]:
    """Every ``.is_cuda`` attribute read in torch's Python sources (torch.testing left out)."""
    root = root or torch_dir()
    if root is None:
        return
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, root).replace(os.sep, "/")
            if _skip(relative):
                continue
            try:
                with open(path, encoding="utf-8") as fh:
                    source = fh.read()
            except (OSError, UnicodeDecodeError):
                continue
            if ".is_cuda" not in source:
                continue
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            finder = _Finder(source.splitlines())
            finder.visit(tree)
            for qualname, line, text in finder.found:
                yield Site(relative, qualname, line, text)


def decision(site: Site) -> Optional[Tuple[str, str]]:
    return SITES.get((site.path, site.qualname))


_HEADINGS = {
    NATIVE: "Reads the real answer (the CUDA branch would treat host or vendor memory as CUDA memory)",
    CUDA: "Keeps the CUDA branch: it computes what CUDA computes",
    SAME: "Keeps the CUDA branch: both branches compute the same here",
    SCRIPT: "Keeps the CUDA branch: the script's view of its own tensors",
    TOOLING: "CUDA-only tooling a script on the target does not reach",
    OTHER: "Not a read of Tensor.is_cuda",
}


def markdown() -> str:
    """docs/torch-is-cuda-sites.md: the table as a page (``python -m transfer.patches.torch_sites --markdown``)."""
    lines = [
        "# torch's own `is_cuda` reads under transfer",
        "",
        "<!-- generated by `python -m transfer.patches.torch_sites --markdown` from transfer/patches/torch_sites.py -->",
        "",
        "Under transfer `x.is_cuda` is the target's own getter (`is_cpu` on the cpu target, `is_npu`, ... on a",
        "vendor): a script's `if x.is_cuda:` takes its CUDA branch, at the cost of a native read. torch's own",
        "Python code reads `is_cuda` too. Each function of torch that does is listed here with what it gets.",
        "For the first group transfer renames the attribute the function's bytecode loads (`is_cuda` ->",
        "`_transfer_native_is_cuda`, torch's own C getter), so that function alone sees the real answer",
        "(False off CUDA), exactly as torch does natively for a CPU or vendor tensor",
        "(`transfer/patches/torch_is_cuda.py`); nothing runs per call and every other read is untouched.",
        "",
        "`python -m transfer.patches.torch_sites` scans the installed torch (its sources, without importing it), prints",
        "every site with its decision and exits 1 naming any site this table lacks; the test suite runs it.",
        "Sites are keyed by file and function, not line; a site another torch version lacks is skipped.",
        "",
    ]
    for decision in DECISIONS:
        rows = sorted((path, qualname, reason) for (path, qualname), (d, reason) in SITES.items() if d == decision)
        lines += [f"## {_HEADINGS[decision]}", "", "| file | function | why |", "|---|---|---|"]
        lines += [f"| `torch/{path}` | `{qualname}` | {reason} |" for path, qualname, reason in rows]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--markdown" in argv:
        print(markdown(), end="")
        return 0
    sites = list(scan())
    missing = [s for s in sites if decision(s) is None]
    for site in sites:
        verdict = decision(site)
        print(f"{(verdict or ('UNCLASSIFIED', ''))[0]:<12} torch/{site.path}:{site.line} {site.qualname}: {site.text}")
    if missing:
        print(f"\n{len(missing)} site(s) not in transfer.patches.torch_sites.SITES: decide each (see the module docstring)")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
