"""The one name resolver of the offline tools: dotted names in code -> rows of the support table.

`scan` reports with it and `port` rewrites with it, so a use scan calls
translated is a use port rewrites, and a second run over a ported tree finds
exactly what the first one left.

`Imports` reads every import statement of a module (``import torch.cuda as
tc``, ``from torch import cuda``, ``from torch.cuda.amp import autocast``,
``import triton.language as tl``) into one table of local name -> qualified
name; `Imports.qualified` resolves a ``Name``/``Attribute`` chain through it
(``tc.synchronize`` -> ``torch.cuda.synchronize``). Relative imports resolve
to nothing (they name the project's own modules). A name bound both by an
import and otherwise (``cuda = ...``) keeps the import's meaning, as scan
always did: the tools read spellings, not values.

`api_of` maps a qualified name to its support-table API (``"torch.cuda.synchronize"``,
``"apex"``, ``"flash_attn.flash_attn_func"``, ``"triton.jit"``, ...) or None.
Plain data and `ast`; never imports torch.
"""

from __future__ import annotations

import ast
from typing import Dict, List, NamedTuple, Optional, Tuple

from .. import support

# Qualified names reported as themselves (prefix match on a dotted name).
NAMED = (
    "torch.cuda.amp.autocast", "torch.cuda.amp.GradScaler", "torch.cuda.amp.custom_fwd", "torch.cuda.amp.custom_bwd",
    "torch.cuda.nvtx", "torch.cuda.amp", "torch.backends.cudnn", "torch.backends.cuda",
    "torch.distributed.init_process_group", "torch.distributed.new_group", "torch.distributed.get_backend",
    "torch.distributed.is_nccl_available", "torch.nn.parallel.DistributedDataParallel", "torch.nn.SyncBatchNorm",
    "torch.utils.cpp_extension.CUDAExtension", "torch.jit.script", "torch.version.cuda",
)
SYNONYMS = {
    "torch.nn.parallel.distributed.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.parallel.data_parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.parallel.data_parallel.data_parallel": "torch.nn.parallel.data_parallel",
    "torch.nn.modules.SyncBatchNorm": "torch.nn.SyncBatchNorm",
    "torch.distributed.distributed_c10d.init_process_group": "torch.distributed.init_process_group",
    "torch.distributed.distributed_c10d.new_group": "torch.distributed.new_group",
    "torch.distributed.distributed_c10d.get_backend": "torch.distributed.get_backend",
    "torch.distributed.distributed_c10d.is_nccl_available": "torch.distributed.is_nccl_available",
}
#: torch's data parallelism in one process (the class and its functional form): named, CUDA-only natively.
DATA_PARALLEL = ("torch.nn.DataParallel", "torch.nn.parallel.data_parallel")
#: Triton names that mark a kernel (each decorated function is one finding; tl.* inside it is not).
TRITON_KERNEL = frozenset({"triton.jit", "triton.autotune", "triton.heuristics"})


def _triggers() -> Tuple[str, ...]:
    """Words (lower case) every source with a finding spells somewhere, in any case. Every component of a
    qualified name after ``torch`` is spelled where the name is used or imported (``from torch.nn.parallel
    import DistributedDataParallel as DDP``), so each name contributes one: "cuda" for the torch.cuda names,
    "jit" for torch.jit.script, else its last component. Derived from the tables: a new row brings its word."""
    words = {"cuda", "nccl", "cudnn", "pin_memory", "cpp_extension", "dataparallel", "apex", "amp_c", "triton", "jit"}
    for name in NAMED + tuple(SYNONYMS) + tuple(SYNONYMS.values()):
        parts = name.lower().split(".")
        if "cuda" not in parts and "cudnn" not in parts and "jit" not in parts:
            words.add(parts[-1])
    words.update(m.lower() for m in support.THIRDPARTY_MODULES)
    return tuple(sorted(words))


#: `might_have_findings`: a file that spells none of these words has no finding (only a syntax check to do).
TRIGGERS = _triggers()


def might_have_findings(text: str) -> bool:
    low = text.lower()
    return any(word in low for word in TRIGGERS)


def api_of(qualified: str) -> Optional[str]:
    """The support-table API a dotted name refers to, or None."""
    qualified = SYNONYMS.get(qualified, qualified)
    if qualified in DATA_PARALLEL:
        return qualified
    for name in NAMED:
        if qualified == name or qualified.startswith(name + "."):
            return name
    if qualified.startswith("torch.cuda."):
        return "torch.cuda." + qualified.split(".")[2]
    if qualified == "triton" or qualified.startswith("triton."):  # the import and each kernel, not every tl.* use
        return "triton.jit" if qualified in TRITON_KERNEL else ("triton" if qualified == "triton" else None)
    row = support.thirdparty_api(qualified)  # flash_attn, xformers, bitsandbytes, ... (support.THIRDPARTY_APIS)
    if row is None and (qualified == "apex" or qualified.startswith("apex.") or qualified == "amp_C"):
        return "apex"  # the OTHER_APIS row, where the table has no package rows for it
    return row


def import_api(module: str) -> Optional[str]:
    """The API an ``import <module>`` statement is reported as: a third-party CUDA-only package, or None."""
    api = api_of(module)
    if api == "apex" or api is not None and api in support.THIRDPARTY_ROWS:
        return api
    return None


def _statements(node: ast.AST):
    """Every statement of a module in source order, nested ones included (imports are statements: no
    expression is looked at)."""
    for field in ("body", "handlers", "orelse", "finalbody", "cases"):
        block = getattr(node, field, None)
        if isinstance(block, list):
            for child in block:
                yield child
                yield from _statements(child)


class Binding(NamedTuple):
    """One name an import statement binds."""

    local: str  # the name bound in the module
    qualified: str  # what it stands for ("torch.cuda", "torch.cuda.amp.autocast")
    statement: ast.stmt  # the Import / ImportFrom
    alias: ast.alias


class Imports:
    """Every import of a module: local name -> qualified name (see the module docstring)."""

    def __init__(self, tree: ast.AST):
        self.table: Dict[str, str] = {}
        self.bindings: List[Binding] = []
        for node in _statements(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self._bind(alias.asname, alias.name, node, alias)
                    else:
                        top = alias.name.split(".")[0]
                        self._bind(top, top, node, alias)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name != "*":
                        self._bind(alias.asname or alias.name, f"{node.module}.{alias.name}", node, alias)

    def _bind(self, local: str, qualified: str, statement: ast.stmt, alias: ast.alias) -> None:
        self.bindings.append(Binding(local, qualified, statement, alias))
        # `import torch` after `import torch.cuda as torch`-like clashes: the first meaning of a name wins
        self.table.setdefault(local, qualified)

    def qualified(self, node: ast.AST) -> Optional[str]:
        """``torch.cuda.synchronize`` for a Name/Attribute chain rooted at an imported name, else None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        base = self.table.get(node.id)
        if base is None:
            return None
        return ".".join([base] + parts[::-1])

    def locals_for(self, qualified: str) -> List[str]:
        """Local names bound to exactly `qualified` (``torch`` -> ["torch", "th"])."""
        return [name for name, q in self.table.items() if q == qualified]
