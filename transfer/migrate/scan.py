"""``transfer scan``: every CUDA-facing use in Python sources, without importing them.

`scan_source` parses one source with `ast` and returns `Finding`s, each naming
an API row of the support table (`transfer.support`). It resolves import
aliases (``import torch.cuda as tc``, ``from torch.cuda.amp import autocast``,
``from torch import cuda``), device strings (``"cuda"``, ``"cuda:1"``,
``f"cuda:{rank}"``, ``"cuda:{}".format(i)``), ``"nccl"`` backends and
comparisons with ``"cuda"`` / ``"nccl"``. Matching is exact, never by
substring: ``"/ckpt/cuda_model.pt"`` is not a device, and device strings are
read with torch's own grammar (`transfer.device_grammar`). Names resolve through
`names` (the resolver port uses too). Blockers are findings of their own:
``cpp_extension.load``/``load_inline`` of CUDA sources, ``CUDAExtension``,
Triton imports and kernels, CUDA-only packages (`support.THIRDPARTY_APIS`), and
a ``.cu``/``.cuh`` file (`cuda_source_finding`).
"""

from __future__ import annotations

import ast
import re
from typing import Dict, List, NamedTuple, Optional

from .. import support
from ..device_grammar import cuda_index
from ..opsupport import ScanNames
from . import names

# A device string formatted right where it is written: "cuda:{}".format(i), "cuda:%d" % i.
DEVICE_TEMPLATE = re.compile(r"^cuda:(\{[^{}]*\}|%[di])$")
NCCL_STRING = re.compile(r"^(nccl|cuda:nccl|cpu:gloo,\s*cuda:nccl)$", re.IGNORECASE)

# Calls whose device argument has its own row (positional first argument or device=).
_DEVICE_CALL_ROWS = {
    "torch.device": "torch.device('cuda')", "torch.Generator": "torch.Generator('cuda')",
    "torch.set_default_device": "torch.set_default_device('cuda')",
}
_DATALOADERS = ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader")
#: The rows of ``x.cuda(...)``, by what scan knows of ``x`` (`_Scanner._cuda_method`).
CUDA_METHOD_ROWS = ("Module.cuda", "Tensor.cuda", ".cuda()")
#: torch.nn classes that are Tensors, not Modules.
_NN_TENSORS = frozenset({"Parameter", "UninitializedParameter", "Buffer", "UninitializedBuffer"})
#: torch functions that return a new Tensor (a `.cuda()` on their result is Tensor.cuda).
_TENSOR_FACTORIES = frozenset({
    "tensor", "as_tensor", "from_numpy", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
    "arange", "linspace", "logspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
    "randn_like", "randint_like", "cat", "stack"})


class Finding(NamedTuple):
    file: str
    line: int
    end_line: int
    col: int  # 1-based
    api: str  # a row of the support table
    code: str  # the source line, stripped


api_of = names.api_of  # the one resolver (names.py), shared with port

_CPP_LOADERS = ("torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline")
_CUDA_SUFFIXES = (".cu", ".cuh")


def loads_cuda_sources(call: ast.Call) -> bool:
    """A cpp_extension.load / load_inline call that builds CUDA code: a .cu/.cuh source, cuda_sources=, with_cuda=True."""
    for keyword in call.keywords:
        value = keyword.value
        if keyword.arg == "cuda_sources" and not (isinstance(value, ast.Constant) and value.value is None):
            return True
        if keyword.arg == "with_cuda" and isinstance(value, ast.Constant) and value.value is True:
            return True
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.strip().endswith(_CUDA_SUFFIXES)
               for n in ast.walk(call))


def is_device_text(text: str) -> bool:
    """`text` is a CUDA device exactly as torch parses it ("cuda", "cuda:1": `device_grammar`, so not
    "CUDA:0" or " cuda", which fail on CUDA too), or a template of one ("cuda:{}", "cuda:%d")."""
    return cuda_index(text) is not None or bool(DEVICE_TEMPLATE.match(text))


def is_device_string(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return is_device_text(node.value)
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            head = first.value
            return head == "cuda:" or is_device_text(head) and len(node.values) == 1
    return False


def is_nccl_string(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(NCCL_STRING.match(node.value.strip()))


_QUIET, _DONE = 1, 2  # a handler's answer: children linked but not looked at / already walked by the handler


class _Scanner:
    """One pass over the tree: links every node to its parent (``_parent``, which port reads too) and
    reports what the handlers find. A handler answers None (look at the children), _QUIET or _DONE."""

    def __init__(self, path: str, lines: List[str], imports: names.Imports, tree: Optional[ast.AST] = None,
                 ops: Optional[ScanNames] = None):
        self.path = path
        self.ops = ops  # `transfer scan --device X`: also the torch APIs the target runs on the CPU (opsupport)
        self.tree = tree
        self._module_classes: Optional[frozenset] = None
        self.lines = lines
        self.imports = imports
        self.findings: List[Finding] = []
        self.nodes: List[ast.AST] = []  # every node, in the order walked (port reuses it)
        self.handlers = {ast.Import: self.visit_Import, ast.ImportFrom: self.visit_ImportFrom,
                         ast.Attribute: self.visit_Attribute, ast.Name: self.visit_Name, ast.Call: self.visit_Call,
                         ast.Constant: self.visit_Constant, ast.JoinedStr: self.visit_JoinedStr}

    def walk(self, node: ast.AST, parent: Optional[ast.AST], quiet: bool = False) -> None:
        node._parent = parent  # type: ignore[attr-defined]
        self.nodes.append(node)
        if not quiet:
            handler = self.handlers.get(node.__class__)
            if handler is not None:
                answer = handler(node)
                if answer == _DONE:
                    return
                quiet = answer == _QUIET
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        self.walk(item, node, quiet)
            elif isinstance(value, ast.AST):
                self.walk(value, node, quiet)

    # ---------------------------------------------------------------- helpers
    def add(self, node: ast.AST, api: str) -> None:
        line = getattr(node, "lineno", 1)
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        self.findings.append(Finding(self.path, line, getattr(node, "end_lineno", line) or line,
                                     getattr(node, "col_offset", 0) + 1, api, code))

    def qualified(self, node: ast.AST) -> Optional[str]:
        return self.imports.qualified(node)

    def in_compare(self, node: ast.AST) -> bool:
        parent = getattr(node, "_parent", None)
        if isinstance(parent, (ast.Tuple, ast.List, ast.Set)):
            parent = getattr(parent, "_parent", None)
        return isinstance(parent, ast.Compare)

    # ---------------------------------------------------------------- imports
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            api = names.import_api(alias.name)
            if api is not None:
                self.add(node, api)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if not node.module or node.level:
            return
        if api_of(node.module) == "apex":
            self.add(node, "apex")
        elif node.module.partition(".")[0] in support.THIRDPARTY_MODULES:
            rows = [api_of(f"{node.module}.{alias.name}") for alias in node.names]
            if node.module.partition(".")[0] == "triton":
                rows = ["triton"]  # `from triton import jit`: the import; each kernel is reported at its decorator
            for api in dict.fromkeys(r for r in rows if r is not None):  # each row once per statement
                self.add(node, api)

    # ---------------------------------------------------------------- names
    def visit_Attribute(self, node: ast.Attribute) -> None:
        qualified = self.qualified(node)
        api = api_of(qualified) if qualified else None
        if api is not None and api not in ("apex", "triton"):
            self.add(node, api)
            return _QUIET  # the chain is reported once, at its longest
        if qualified is None and node.attr == "is_cuda":
            self.add(node, "Tensor.is_cuda")
        if self.ops is not None and qualified is not None:
            op = self._op_api(qualified)
            if op is not None:
                self.add(node, op)
                return _QUIET
        return None

    def _op_api(self, qualified: str) -> Optional[str]:
        """The operator-coverage row of a dotted torch name (``torch.lgamma``, ``torch.Tensor.lgamma``)."""
        if qualified in self.ops.functions:
            return qualified
        if qualified.startswith("torch.Tensor.") and qualified[len("torch.Tensor."):] in self.ops.methods:
            return "Tensor." + qualified[len("torch.Tensor."):]
        return None

    def visit_Name(self, node: ast.Name) -> None:
        qualified = self.imports.table.get(node.id)
        if qualified and qualified != node.id and not isinstance(node.ctx, ast.Store):  # a from-import or an `as` alias of a CUDA-facing name
            api = api_of(qualified)
            if api is not None and api not in ("apex", "triton"):
                self.add(node, api)
            elif self.ops is not None and not isinstance(getattr(node, "_parent", None), ast.alias):
                op = self._op_api(qualified)
                if op is not None:
                    self.add(node, op)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        qualified = self.qualified(func)
        if qualified in _DATALOADERS and any(
                k.arg == "pin_memory" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in node.keywords):
            self.add(node, "DataLoader(pin_memory=True)")
        if qualified in _CPP_LOADERS and loads_cuda_sources(node):
            self.add(node, "torch.utils.cpp_extension.load")
        if isinstance(func, ast.Attribute) and func.attr == "cuda" and qualified is None:
            self.add(func, self._cuda_method(func.value))
        if self.ops is not None and isinstance(func, ast.Attribute) and qualified is None:
            self._op_method(node, func)
        return None

    def _op_method(self, call: ast.Call, func: ast.Attribute) -> None:
        """``x.lgamma()`` on a receiver that is no imported module: the Tensor method, where the target runs it
        on the CPU; ``x.double()`` / ``x.to(torch.float64)``, where it turns them into float32."""
        name = func.attr
        if name in self.ops.methods:
            self.add(func, f"Tensor.{name}")
        elif self.ops.float64 and name == "double" and not call.args and not call.keywords:
            self.add(func, "Tensor.double")
        elif self.ops.float64 and name == "to" and self._float64_cast(call):
            self.add(func, "Tensor.to(torch.float64)")

    def _float64_cast(self, call: ast.Call) -> bool:
        """``.to(torch.float64)``, ``.to(torch.double, non_blocking=True)``, ``.to(dtype=torch.float64)``,
        ``.to(None, torch.float64)``: a dtype-only conversion (a device argument keeps float64 on torch_npu)."""
        keywords = {k.arg: k.value for k in call.keywords}
        if "device" in keywords:
            return False
        args = call.args
        if args and self._is_float64(args[0]):
            return True
        if args and isinstance(args[0], ast.Constant) and args[0].value is None:
            return len(args) > 1 and self._is_float64(args[1]) or self._is_float64(keywords.get("dtype"))
        return not args and self._is_float64(keywords.get("dtype"))

    def _is_float64(self, node: Optional[ast.AST]) -> bool:
        return node is not None and self.qualified(node) in ("torch.float64", "torch.double")

    def _cuda_method(self, receiver: ast.AST) -> str:
        """The row of ``<receiver>.cuda(...)``: "Module.cuda" where the receiver is built right there by a
        torch.nn class or by a class of this file that subclasses one, "Tensor.cuda" where a torch factory
        builds it, else ".cuda()" (a name or an attribute: its type is not known without running the code)."""
        if not isinstance(receiver, ast.Call):
            return ".cuda()"
        qualified = self.qualified(receiver.func)
        if qualified is not None:
            if _is_nn_module_class(qualified):
                return "Module.cuda"
            if qualified.startswith("torch.") and qualified.count(".") == 1 \
                    and qualified[len("torch."):] in _TENSOR_FACTORIES:
                return "Tensor.cuda"
            return ".cuda()"
        if isinstance(receiver.func, ast.Name) and receiver.func.id in self.module_classes():
            return "Module.cuda"
        return ".cuda()"

    def module_classes(self) -> frozenset:
        """Names that this file binds only by class statements, each a subclass of a torch.nn module class
        (directly, or through another such class of this file)."""
        if self._module_classes is None:
            classes: Dict[str, List[ast.ClassDef]] = {}
            other = set(self.imports.table)
            for node in ast.walk(self.tree):
                if isinstance(node, ast.ClassDef):
                    classes.setdefault(node.name, []).append(node)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    other.add(node.name)
                elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                    other.add(node.id)
            found: set = set()
            changed = True
            while changed:
                changed = False
                for name, defs in classes.items():
                    if name in found or name in other:
                        continue
                    if all(any(isinstance(b, ast.Name) and b.id in found
                               or _is_nn_module_class(self.qualified(b) or "") for b in d.bases) for d in defs):
                        found.add(name)
                        changed = True
            self._module_classes = frozenset(found)
        return self._module_classes

    # ---------------------------------------------------------------- strings
    def visit_Constant(self, node: ast.Constant) -> None:
        if node.value.__class__ is not str:
            return
        if is_device_string(node):
            self.add(node, "compare 'cuda'" if self.in_compare(node) else self._device_api(node))
        elif is_nccl_string(node):
            self.add(node, "compare 'nccl'" if self.in_compare(node) else "backend='nccl'")

    def visit_JoinedStr(self, node: ast.JoinedStr) -> int:
        if is_device_string(node):
            self.add(node, "compare 'cuda'" if self.in_compare(node) else self._device_api(node))
        for value in node.values:  # the text parts are not strings of their own
            value._parent = node  # type: ignore[attr-defined]
            self.nodes.append(value)
            if isinstance(value, ast.FormattedValue):
                for field in ("value", "format_spec"):
                    child = getattr(value, field, None)
                    if child is not None:
                        self.walk(child, value)
            else:
                self.walk(value, node, quiet=True)
        return _DONE

    def _device_api(self, node: ast.AST) -> str:
        call = getattr(node, "_parent", None)
        if isinstance(call, ast.keyword) and call.arg == "device":
            call = getattr(call, "_parent", None)  # a Call, or a class statement's keywords
        elif not (isinstance(call, ast.Call) and node in call.args[:1]):
            call = None
        if isinstance(call, ast.Call):
            return _DEVICE_CALL_ROWS.get(self.qualified(call.func) or "", "device='cuda'")
        return "device='cuda'"


def _is_nn_module_class(qualified: str) -> bool:
    """`qualified` names a torch.nn Module class (``torch.nn.Linear``, ``torch.nn.Module``,
    ``torch.nn.parallel.DistributedDataParallel``), not a function or a Parameter."""
    if not qualified.startswith("torch.nn."):
        return False
    last = qualified.rsplit(".", 1)[1]
    return last[:1].isupper() and last not in _NN_TENSORS


def parse(text: str, path: str = "<string>") -> ast.Module:
    """The module's tree (scan and port share one parse; `scan_tree` links parents). Raises SyntaxError."""
    return ast.parse(text, filename=path)


def scan_tree(tree: ast.Module, text: str, path: str, imports: Optional[names.Imports] = None,
              ops: Optional[ScanNames] = None) -> List[Finding]:
    """Findings in a parsed source (`parse`), in source order; every node gets its ``_parent``. `ops`
    (`opsupport.scan_names`): also the uses of torch APIs the target runs on the CPU or in float32."""
    scanner = _Scanner(path, text.splitlines(), imports or names.Imports(tree), tree, ops)
    scanner.walk(tree, None)
    tree._nodes = scanner.nodes  # type: ignore[attr-defined]
    return sorted(scanner.findings, key=lambda f: (f.line, f.col))


def scan_source(text: str, path: str = "<string>", ops: Optional[ScanNames] = None) -> List[Finding]:
    """Findings in one source, in source order (`ops`: see `scan_tree`). Raises SyntaxError if it does not
    parse."""
    if ops is None and not names.might_have_findings(text):
        check_syntax(text, path)
        return []
    return scan_tree(parse(text, path), text, path, ops=ops)


def check_syntax(text: str, path: str) -> None:
    """Raise SyntaxError where `parse` would, at a third of its cost: compiling to bytecode builds no Python
    objects for the tree. Bytecode compilation also refuses what a parse accepts (``return`` outside a
    function): those go to `parse`, which decides."""
    try:
        compile(text, path, "exec", dont_inherit=True)
    except SyntaxError:
        parse(text, path)
    except ValueError:  # null bytes: as parse reports them
        parse(text, path)


def cuda_source_finding(path: str, text: str) -> Finding:
    """The one finding a .cu/.cuh file gets: the whole file is CUDA C++ (a blocker on every vendor)."""
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    return Finding(path, 1, max(lines, 1), 1, "CUDA source file", f"CUDA C++ source, {lines} line(s)")


def statuses(api: str, profiles: List[str], torch_version: Optional[str] = None) -> Dict[str, support.Support]:
    return {p: support.lookup(p, api, torch_version) for p in profiles}
