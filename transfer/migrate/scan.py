"""``transfer scan``: every CUDA-facing use in Python sources, without importing them.

`scan_source` parses one source with `ast` and returns `Finding`s, each naming
an API row of the support table (`transfer.support`). It resolves import
aliases (``import torch.cuda as tc``, ``from torch.cuda.amp import autocast``,
``from torch import cuda``), device strings (``"cuda"``, ``"cuda:1"``,
``f"cuda:{rank}"``, ``"cuda:{}".format(i)``), ``"nccl"`` backends and
comparisons with ``"cuda"`` / ``"nccl"``. Matching is exact, never by
substring: ``"/ckpt/cuda_model.pt"`` is not a device.
"""

from __future__ import annotations

import ast
import re
from typing import Dict, List, NamedTuple, Optional

from .. import support

DEVICE_STRING = re.compile(r"^cuda(:(\d+|\{[^{}]*\}|%[di]|))?$", re.IGNORECASE)
NCCL_STRING = re.compile(r"^(nccl|cuda:nccl|cpu:gloo,\s*cuda:nccl)$", re.IGNORECASE)

# Qualified names reported as themselves (prefix match on a dotted name).
_NAMED = (
    "torch.cuda.amp.autocast", "torch.cuda.amp.GradScaler", "torch.cuda.amp.custom_fwd", "torch.cuda.amp.custom_bwd",
    "torch.cuda.nvtx", "torch.cuda.amp", "torch.backends.cudnn", "torch.backends.cuda",
    "torch.distributed.init_process_group", "torch.distributed.new_group", "torch.distributed.get_backend",
    "torch.distributed.is_nccl_available", "torch.nn.parallel.DistributedDataParallel", "torch.nn.SyncBatchNorm",
    "torch.utils.cpp_extension.CUDAExtension", "torch.jit.script", "torch.version.cuda",
)
_SYNONYMS = {
    "torch.nn.parallel.distributed.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.DataParallel": "torch.nn.DataParallel", "torch.nn.parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.parallel.data_parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.modules.SyncBatchNorm": "torch.nn.SyncBatchNorm",
    "torch.distributed.distributed_c10d.init_process_group": "torch.distributed.init_process_group",
    "torch.distributed.distributed_c10d.new_group": "torch.distributed.new_group",
    "torch.distributed.distributed_c10d.get_backend": "torch.distributed.get_backend",
}


# Calls whose device argument has its own row (positional first argument or device=).
_DEVICE_CALL_ROWS = {
    "torch.device": "torch.device('cuda')", "torch.Generator": "torch.Generator('cuda')",
    "torch.set_default_device": "torch.set_default_device('cuda')",
}
_DATALOADERS = ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader")


class Finding(NamedTuple):
    file: str
    line: int
    end_line: int
    col: int  # 1-based
    api: str  # a row of the support table
    code: str  # the source line, stripped


def api_of(qualified: str) -> Optional[str]:
    """The support-table API a dotted name refers to, or None."""
    qualified = _SYNONYMS.get(qualified, qualified)
    if qualified in ("torch.nn.DataParallel",):
        return qualified
    for name in _NAMED:
        if qualified == name or qualified.startswith(name + "."):
            return name
    if qualified.startswith("torch.cuda."):
        return "torch.cuda." + qualified.split(".")[2]
    return support.thirdparty_api(qualified)  # flash_attn, xformers, ... (support.THIRDPARTY_APIS)


def is_device_string(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(DEVICE_STRING.match(node.value.strip()))
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            head = first.value
            return head.lower() == "cuda:" or bool(DEVICE_STRING.match(head.strip())) and len(node.values) == 1
    return False


def is_nccl_string(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(NCCL_STRING.match(node.value.strip()))


class _Scanner(ast.NodeVisitor):
    def __init__(self, path: str, lines: List[str]):
        self.path = path
        self.lines = lines
        self.aliases: Dict[str, str] = {}
        self.findings: List[Finding] = []

    # ---------------------------------------------------------------- helpers
    def add(self, node: ast.AST, api: str) -> None:
        line = getattr(node, "lineno", 1)
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        self.findings.append(Finding(self.path, line, getattr(node, "end_lineno", line) or line,
                                     getattr(node, "col_offset", 0) + 1, api, code))

    def qualified(self, node: ast.AST) -> Optional[str]:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualified(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    def in_compare(self, node: ast.AST) -> bool:
        parent = getattr(node, "_parent", None)
        if isinstance(parent, (ast.Tuple, ast.List, ast.Set)):
            parent = getattr(parent, "_parent", None)
        return isinstance(parent, ast.Compare)

    # ---------------------------------------------------------------- imports
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                self.aliases[top] = top
            api = api_of(alias.name)
            if api == "apex" or api is not None and api in support.THIRDPARTY_ROWS:
                self.add(node, api)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if not node.module or node.level:
            return
        for alias in node.names:
            full = f"{node.module}.{alias.name}"
            self.aliases[alias.asname or alias.name] = full
        if api_of(node.module) == "apex":
            self.add(node, "apex")
        elif node.module.partition(".")[0] in support.THIRDPARTY_MODULES:
            rows = [api_of(f"{node.module}.{alias.name}") for alias in node.names]
            for api in dict.fromkeys(r for r in rows if r is not None):  # each row once per statement
                self.add(node, api)

    # ---------------------------------------------------------------- names
    def visit_Attribute(self, node: ast.Attribute) -> None:
        qualified = self.qualified(node)
        api = api_of(qualified) if qualified else None
        if api is not None and api != "apex":
            self.add(node, api)
            return  # the chain is reported once, at its longest
        if qualified is None and node.attr == "is_cuda":
            self.add(node, "Tensor.is_cuda")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        qualified = self.aliases.get(node.id)
        if qualified and qualified != node.id and not isinstance(node.ctx, ast.Store):  # a from-import or an `as` alias of a CUDA-facing name
            api = api_of(qualified)
            if api is not None and api != "apex":
                self.add(node, api)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if self.qualified(func) in _DATALOADERS and any(
                k.arg == "pin_memory" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in node.keywords):
            self.add(node, "DataLoader(pin_memory=True)")
        if isinstance(func, ast.Attribute) and func.attr == "cuda" and self.qualified(func) is None:
            self.add(func, "Tensor.cuda")
            self.visit(func.value)
            for child in (*node.args, *node.keywords):
                self.visit(child)
            return
        self.generic_visit(node)

    # ---------------------------------------------------------------- strings
    def visit_Constant(self, node: ast.Constant) -> None:
        if is_device_string(node):
            self.add(node, "compare 'cuda'" if self.in_compare(node) else self._device_api(node))
        elif is_nccl_string(node):
            self.add(node, "compare 'nccl'" if self.in_compare(node) else "backend='nccl'")

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        if is_device_string(node):
            self.add(node, "compare 'cuda'" if self.in_compare(node) else self._device_api(node))
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                self.visit(value.value)

    def _device_api(self, node: ast.AST) -> str:
        call = getattr(node, "_parent", None)
        if isinstance(call, ast.keyword) and call.arg == "device":
            call = getattr(call, "_parent", None)  # a Call, or a class statement's keywords
        elif not (isinstance(call, ast.Call) and node in call.args[:1]):
            call = None
        if isinstance(call, ast.Call):
            return _DEVICE_CALL_ROWS.get(self.qualified(call.func) or "", "device='cuda'")
        return "device='cuda'"


def scan_source(text: str, path: str = "<string>") -> List[Finding]:
    """Findings in one source, in source order. Raises SyntaxError if it does not parse."""
    tree = ast.parse(text, filename=path)
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            child._parent = parent  # type: ignore[attr-defined]
    scanner = _Scanner(path, text.splitlines())
    scanner.visit(tree)
    return sorted(scanner.findings, key=lambda f: (f.line, f.col))


def statuses(api: str, profiles: List[str]) -> Dict[str, support.Support]:
    return {p: support.lookup(p, api) for p in profiles}
