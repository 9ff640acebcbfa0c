"""``transfer port``: rewrite CUDA spellings to a vendor's own, with libcst.

libcst keeps comments and formatting; only the rewritten expressions change.
Rewrites come in two kinds, kept apart as ruff keeps its fixes:

safe (always applied)
  ``torch.cuda.X`` -> ``torch.<dev>.X`` when the vendor has X (support table);
  ``torch.cuda.amp.autocast(...)`` -> ``torch.autocast("<dev>", ...)``,
  ``torch.cuda.amp.GradScaler(...)`` -> ``torch.amp.GradScaler("<dev>", ...)``;
  ``x.cuda()`` / ``x.cuda(non_blocking=b)`` / ``x.cuda(1)`` -> ``x.to("<dev>"...)``;
  ``x.is_cuda`` -> ``x.is_<dev>``; device strings (``"cuda"``, ``"cuda:0"``,
  ``f"cuda:{i}"``) where a device is expected (``.to(...)``, ``device=``,
  ``map_location=``, ``torch.device(...)``, autocast's device type);
  ``"nccl"`` as the backend of init_process_group / new_group;
  ``import <vendor package>`` added once, after ``import torch``;
  on a target whose backend needs the device before the process group
  (`Profile.set_device_before_init`: tccl), a ``set_device(i)`` statement
  that follows ``init_process_group(...)`` in the same block moves up to just
  before it, when nothing in between assigns a name it reads and it calls
  nothing of torch.distributed; any other order is a change-list row.
unsafe (``--unsafe``)
  ``x.cuda(expr)`` -> ``x.to(f"<dev>:{expr}")`` (assumes an int index), but
  ``x.cuda(device)`` (a name ending in "device") -> ``x.to(device)``;
  device strings and ``"nccl"`` anywhere else (assignments, dict literals);
  ``a == "cuda"`` -> ``a in ("cuda", "<dev>")`` (``!=`` -> ``not in``), the
  same for ``"nccl"``.
Everything the port leaves (a vendor lacking X, aliases of torch.cuda,
DataParallel, CUDAExtension, apex, ...) is an UNSUPPORTED row of the change list.
Ported code has no CUDA spelling left that the port knows, so a second run
changes nothing.
"""

from __future__ import annotations

import re
from typing import List, NamedTuple, Optional, Sequence, Set

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from .. import support
from ..profiles import PROFILES
from . import scan

_BACKEND_CALLS = ("init_process_group", "new_group")
# Calls whose first positional argument is a device ("to", torch.device, torch.cuda.<X>(device), ...).
_DEVICE_CALLS = ("to", "device", "autocast", "GradScaler", "Generator", "set_device", "synchronize",
                 "get_device_name", "get_device_properties", "get_device_capability", "memory_allocated",
                 "max_memory_allocated", "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
                 "current_stream", "default_stream", "mem_get_info")
_DEVICE_KEYWORDS = ("device", "map_location", "device_type", "output_device")


class Change(NamedTuple):
    """One row of change_list.csv."""

    file: str
    start_line: int
    end_line: int
    operation: str  # INSERT / MODIFY / DELETE / UNSUPPORTED
    message: str
    api: str = ""  # UNSUPPORTED rows: what is left (unsupported_api.csv's API column); not in change_list.csv


def _string(text: str) -> cst.SimpleString:
    return cst.SimpleString(f'"{text}"')


def _dotted(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None


def _string_value(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        try:
            value = node.evaluated_value
        except Exception:  # pragma: no cover - malformed literal
            return None
        return value if isinstance(value, str) else None
    return None


class _Porter(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider, ParentNodeProvider)

    def __init__(self, path: str, profile: str, unsafe: bool):
        super().__init__()
        self.path = path
        self.profile = PROFILES[profile]
        self.dev = self.profile.device_type
        self.unsafe = unsafe
        self.torch_names: Set[str] = set()
        self.changes: List[Change] = []
        self.has_vendor_import = False
        self.unsafe_skipped = 0

    # ---------------------------------------------------------------- bookkeeping
    def note(self, node: cst.CSTNode, operation: str, message: str, api: str = "") -> None:
        pos = self.get_metadata(PositionProvider, node)
        self.changes.append(Change(self.path, pos.start.line, pos.end.line, operation, message, api))

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.get_metadata(ParentNodeProvider, node, None)

    def is_torch(self, node: cst.BaseExpression) -> bool:
        return isinstance(node, cst.Name) and node.value in self.torch_names

    def is_torch_cuda(self, node: cst.BaseExpression) -> bool:
        return isinstance(node, cst.Attribute) and node.attr.value == "cuda" and self.is_torch(node.value)

    # ---------------------------------------------------------------- imports
    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            name = _dotted(alias.name)
            if name == self.profile.package:
                self.has_vendor_import = True
            if name == "torch" or (name or "").startswith("torch."):
                if alias.asname is not None and name == "torch":
                    self.torch_names.add(alias.asname.name.value)
                elif alias.asname is None:
                    self.torch_names.add("torch")
                if name == "torch.cuda" or (name or "").startswith("torch.cuda."):
                    self.note(node, "UNSUPPORTED", f"`import {name}`: aliases of torch.cuda are not rewritten; "
                                                   f"use torch.{self.dev} by hand", api=f"import {name}")

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = _dotted(node.module) if node.module is not None else None
        if module is None:
            return
        if module == self.profile.package:
            self.has_vendor_import = True
        names = [] if isinstance(node.names, cst.ImportStar) else [_dotted(a.name) for a in node.names]
        if module.startswith("torch.cuda") or (module == "torch" and "cuda" in names):
            self.note(node, "UNSUPPORTED", f"`from {module} import ...`: aliases of torch.cuda are not rewritten; "
                                           f"import from torch.{self.dev} (or torch.amp) by hand", api=f"from {module} import")
        if module.startswith("apex"):
            hints = [f"{api.rsplit('.', 1)[1]} -> {rw.to} when {rw.when}" for name in names
                     for api in [f"{module}.{name}"] for rw in [support.native_rewrite(api)] if rw is not None]
            self.note(node, "UNSUPPORTED", "apex's CUDA kernels do not run on the vendor; under transfer its "
                      "replacement runs (transfer's apex), ported code must not import apex"
                      + ("; torch-native: " + "; ".join(hints) if hints else ""), api="apex")

    # ---------------------------------------------------------------- torch.cuda.X
    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        if original.attr.value == "is_cuda" and _dotted(original.value) not in self.torch_names:
            self.note(original, "MODIFY", f".is_cuda -> .is_{self.dev}")
            return updated.with_changes(attr=cst.Name(f"is_{self.dev}"))
        if not self.is_torch_cuda(original.value):
            return updated
        name = original.attr.value
        if name == "amp":  # torch.cuda.amp.autocast / GradScaler: handled on the call
            return updated
        verdict = support.lookup(self.profile.name, f"torch.cuda.{name}")
        if verdict.cls == support.TRANSLATED or verdict.to.startswith(f"torch.{self.dev}."):
            self.note(original, "MODIFY", f"torch.cuda.{name} -> torch.{self.dev}.{name}")
            return updated.with_changes(value=updated.value.with_changes(attr=cst.Name(self.dev)))
        self.note(original, "UNSUPPORTED", f"torch.cuda.{name}: {verdict.cls} on {self.profile.name}: {verdict.reason}",
                  api=f"torch.cuda.{name}")
        return updated

    # ---------------------------------------------------------------- calls
    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        dotted = _dotted(func) or ""
        parts = dotted.split(".")
        if len(parts) == 4 and parts[0] in self.torch_names and parts[1:3] == ["cuda", "amp"] \
                and parts[3] in ("autocast", "GradScaler"):
            torch_name = parts[0]
            new_func = cst.Attribute(cst.Name(torch_name), cst.Name("autocast")) if parts[3] == "autocast" else \
                cst.Attribute(cst.Attribute(cst.Name(torch_name), cst.Name("amp")), cst.Name("GradScaler"))
            self.note(original, "MODIFY", f"torch.cuda.amp.{parts[3]}(...) -> "
                                          f"{_dotted(new_func)}(\"{self.dev}\", ...)")
            return updated.with_changes(func=new_func, args=[cst.Arg(_string(self.dev)), *updated.args])
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda" and not self.is_torch(func.value):
            return self._port_cuda_method(original, updated)
        return updated

    def _port_cuda_method(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        positional = [a for a in updated.args if a.keyword is None and a.star == ""]
        keywords = [a for a in updated.args if a.keyword is not None]
        device_kw = [a for a in keywords if a.keyword.value == "device"]
        rest = [a for a in keywords if a.keyword.value != "device"]
        arg = positional[0].value if positional else (device_kw[0].value if device_kw else None)
        to = updated.func.with_changes(attr=cst.Name("to"))
        if len(positional) > 1 or any(a.star for a in updated.args):
            self.note(original, "UNSUPPORTED", ".cuda(...) with these arguments: rewrite as .to(...) by hand",
                      api="Tensor.cuda")
            return updated
        if arg is None:
            target: cst.BaseExpression = _string(self.dev)
        elif isinstance(arg, cst.Integer):
            target = _string(f"{self.dev}:{arg.value}")
        elif self.unsafe and "device" in (_dotted(arg) or "").rsplit(".", 1)[-1].lower():
            # .cuda(device), .cuda(self.device): a device object, which the port made a vendor one
            self.note(original, "MODIFY", ".cuda(<device>) -> .to(<device>) [unsafe: assumes a ported device]")
            return updated.with_changes(func=to, args=[cst.Arg(arg), *self._comma_fixed(rest)])
        elif self.unsafe:
            target = cst.FormattedString(parts=[cst.FormattedStringText(f"{self.dev}:"),
                                                cst.FormattedStringExpression(arg)])
            self.note(original, "MODIFY", f".cuda(<expr>) -> .to(f\"{self.dev}:{{<expr>}}\") [unsafe: assumes an int]")
            return updated.with_changes(func=to, args=[cst.Arg(target), *self._comma_fixed(rest)])
        else:
            self.unsafe_skipped += 1
            self.note(original, "UNSUPPORTED", ".cuda(<expr>): not rewritten (needs --unsafe: assumes an int index)",
                      api="Tensor.cuda")
            return updated
        self.note(original, "MODIFY", f".cuda(...) -> .to(\"{target.value[1:-1]}\", ...)")
        return updated.with_changes(func=to, args=[cst.Arg(target), *self._comma_fixed(rest)])

    @staticmethod
    def _comma_fixed(args: Sequence[cst.Arg]) -> List[cst.Arg]:
        args = list(args)
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return args

    # ---------------------------------------------------------------- strings
    def _position(self, node: cst.CSTNode) -> str:
        """'device' (a device position), 'backend', 'compare' or 'other'."""
        parent = self.parent(node)
        if isinstance(parent, cst.Attribute) and parent.attr.value == "format":  # "cuda:{}".format(i)
            call = self.parent(parent)
            if isinstance(call, cst.Call) and call.func is parent:
                return self._position(call)
        if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Modulo) and parent.left is node:
            return self._position(parent)  # "cuda:%d" % i
        if isinstance(parent, (cst.Comparison, cst.ComparisonTarget)):
            return "compare"
        if isinstance(parent, cst.Element) and isinstance(self.parent(self.parent(parent)), cst.ComparisonTarget):
            return "compare"
        if isinstance(parent, (cst.DictElement, cst.Element)):  # map_location={"cuda:0": ...} inline
            holder = self.parent(self.parent(parent))
            if isinstance(holder, cst.Arg) and holder.keyword is not None and holder.keyword.value == "map_location":
                return "device"
            return "other"
        if not isinstance(parent, cst.Arg):
            return "other"
        call = self.parent(parent)
        if not isinstance(call, cst.Call):
            return "other"
        func = call.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
        if parent.keyword is not None:
            if parent.keyword.value in _DEVICE_KEYWORDS:
                return "device"
            return "backend" if parent.keyword.value == "backend" and name in _BACKEND_CALLS else "other"
        first = next((a for a in call.args if a.keyword is None), None)
        if first is parent:
            if name in _DEVICE_CALLS:
                return "device"
            if name in _BACKEND_CALLS:
                return "backend"
        return "other"

    def _template(self, node: cst.SimpleString) -> bool:
        """`node` is formatted right here: ``"cuda:{}".format(i)`` or ``"cuda:%d" % i``."""
        parent = self.parent(node)
        if isinstance(parent, cst.Attribute):
            return parent.attr.value == "format" and "{" in node.value
        return isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Modulo) and "%" in node.value

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> cst.BaseExpression:
        value = _string_value(original)
        if value is None:
            return updated
        templated = "{" in value or "%" in value
        if scan.DEVICE_STRING.match(value.strip()) and (not templated or self._template(original)):
            new = self.dev + value.strip()[4:]
            kind = "device"
        elif scan.NCCL_STRING.match(value.strip()) and value.strip().lower() == "nccl":
            new = self.profile.backend
            kind = "backend"
        else:
            return updated
        position = self._position(original)
        if position == "compare":
            return updated  # handled on the comparison
        safe = position == kind
        if not safe and not self.unsafe:
            self.unsafe_skipped += 1
            self.note(original, "UNSUPPORTED", f"{value!r} outside a {kind} argument: not rewritten (--unsafe does)",
                      api=f"{'device' if kind == 'device' else 'backend'}={value!r}")
            return updated
        quote = original.quote
        prefix = original.prefix
        self.note(original, "MODIFY", f"{value!r} -> {new!r}" + ("" if safe else " [unsafe]"))
        return updated.with_changes(value=f"{prefix}{quote}{new}{quote}")

    def leave_FormattedString(self, original: cst.FormattedString, updated: cst.FormattedString) -> cst.BaseExpression:
        parts = updated.parts
        if not parts or not isinstance(parts[0], cst.FormattedStringText) or parts[0].value.lower() != "cuda:" \
                or len(parts) < 2:
            return updated
        position = self._position(original)
        if position == "compare":
            return updated
        if position != "device" and not self.unsafe:
            self.unsafe_skipped += 1
            self.note(original, "UNSUPPORTED", "f\"cuda:{...}\" outside a device argument: not rewritten (--unsafe does)",
                      api="device=f'cuda:{...}'")
            return updated
        self.note(original, "MODIFY", f"f\"cuda:{{...}}\" -> f\"{self.dev}:{{...}}\"" +
                  ("" if position == "device" else " [unsafe]"))
        return updated.with_changes(parts=[parts[0].with_changes(value=f"{self.dev}:"), *parts[1:]])

    def leave_Comparison(self, original: cst.Comparison, updated: cst.Comparison) -> cst.BaseExpression:
        if len(updated.comparisons) != 1:
            return updated
        target = updated.comparisons[0]
        value = _string_value(target.comparator)
        if value is None or not isinstance(target.operator, (cst.Equal, cst.NotEqual)):
            return updated
        if value.lower() == "cuda":
            new = self.dev
        elif value.lower() == "nccl":
            new = self.profile.backend
        else:
            return updated
        if not self.unsafe:
            self.unsafe_skipped += 1
            self.note(original, "UNSUPPORTED", f"comparison with {value!r}: False on {self.profile.name}; "
                                               "--unsafe makes it accept both", api=f"compare {value!r}")
            return updated
        operator = cst.In() if isinstance(target.operator, cst.Equal) else cst.NotIn()
        pair = cst.Tuple([cst.Element(target.comparator), cst.Element(_string(new))])
        self.note(original, "MODIFY", f"== {value!r} -> in ({value!r}, {new!r}) [unsafe]")
        return updated.with_changes(comparisons=[target.with_changes(operator=operator, comparator=pair)])

    # ---------------------------------------------------------------- names the port leaves
    def visit_Name(self, node: cst.Name) -> None:
        if node.value in ("DataParallel", "CUDAExtension"):
            parent = self.parent(node)
            if isinstance(parent, cst.Attribute) and parent.attr is not node:
                return
            api = "torch.nn.DataParallel" if node.value == "DataParallel" else "torch.utils.cpp_extension.CUDAExtension"
            verdict = support.lookup(self.profile.name, api)
            if isinstance(parent, cst.ImportAlias):
                return
            if node.value == "DataParallel":  # the shim runs it on one device; vendor code has no scatter/gather
                self.note(node, "UNSUPPORTED", f"{api}: torch's scatter/gather are CUDA-only C++, so it fails on "
                          f"{self.dev} devices: use DistributedDataParallel (run_distributed_{self.dev}.sh), or "
                          f"model.to(\"{self.dev}\") for one device", api=api)
            else:
                self.note(node, "UNSUPPORTED", f"{api}: {verdict.cls}: {verdict.reason}", api=api)

    # ---------------------------------------------------------------- set_device before init (tccl)
    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        return updated.with_changes(body=self._device_first(original.body, updated.body))

    def _device_first(self, original: Sequence[cst.BaseStatement], body: Sequence[cst.BaseStatement]) -> list:
        """`body` with a set_device statement moved before the init_process_group one (tccl's order)."""
        body = list(body)
        if not self.profile.set_device_before_init or len(original) != len(body):
            return body
        init = next((i for i, s in enumerate(original) if _calls(s, "init_process_group")), None)
        if init is None:
            return body
        set_devices = [_set_device(s) for s in original]
        if any(set_devices[:init]):
            return body
        later = next((j for j in range(init + 1, len(original)) if set_devices[j] is not None), None)
        if later is None:
            return body  # the device is set elsewhere (a caller, a helper): nothing to see here
        call = set_devices[later]
        read = {n.value for n in _all(cst.Name, call)}
        assigned = set().union(*(_assigned(s) for s in original[init:later]))
        called = [_dotted(c.func) or "" for c in _all(cst.Call, call.args)]
        if read & assigned or any("distributed" in n or "get_rank" in n or n.startswith("dist.") for n in called):
            self.note(original[later], "UNSUPPORTED", f"{self.profile.backend} needs the device set before "
                      f"init_process_group: call torch.{self.dev}.set_device(local_rank) before it",
                      api="torch.distributed.init_process_group")
            return body
        self.note(original[later], "MODIFY", f"torch.{self.dev}.set_device moved before init_process_group "
                  f"({self.profile.backend} needs the device set first)")
        moved = body.pop(later)
        body.insert(init, moved.with_changes(leading_lines=body[init].leading_lines))
        body[init + 1] = body[init + 1].with_changes(leading_lines=())
        return body

    # ---------------------------------------------------------------- vendor import
    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        updated = updated.with_changes(body=self._device_first(original.body, updated.body))
        if self.has_vendor_import or not self.profile.package or \
                not any(c.operation == "MODIFY" for c in self.changes):
            return updated
        body = list(updated.body)
        at = 0
        for i, statement in enumerate(body):
            if isinstance(statement, cst.SimpleStatementLine) and any(
                    isinstance(s, (cst.Import, cst.ImportFrom)) and _imports_torch(s) for s in statement.body):
                at = i + 1
                break
        else:
            while at < len(body) and _is_preamble(body[at]):
                at += 1
        line = cst.parse_statement(f"import {self.profile.package}  # registers torch.{self.dev}\n")
        body.insert(at, line)
        self.changes.append(Change(self.path, 0, 0, "INSERT", f"import {self.profile.package}"))
        return updated.with_changes(body=body)


def _all(kind, node) -> list:
    """Every node of type `kind` in `node` (a node or a sequence of nodes), itself included."""
    found: list = []

    class Collect(cst.CSTVisitor):
        def on_visit(self, visited: cst.CSTNode) -> bool:
            if isinstance(visited, kind):
                found.append(visited)
            return True

    for item in node if isinstance(node, (list, tuple)) else (node,):
        item.visit(Collect())
    return found


def _calls(statement: cst.CSTNode, name: str) -> bool:
    """The statement calls something named `name` (dotted or bare)."""
    return any((_dotted(c.func) or "").rsplit(".", 1)[-1] == name for c in _all(cst.Call, statement))


def _set_device(statement: cst.CSTNode) -> Optional[cst.Call]:
    """The call of a statement that is exactly ``torch.cuda.set_device(...)`` (or torch.<dev>.)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    expr = statement.body[0]
    if not isinstance(expr, cst.Expr) or not isinstance(expr.value, cst.Call):
        return None
    parts = (_dotted(expr.value.func) or "").split(".")
    return expr.value if len(parts) == 3 and parts[2] == "set_device" and parts[0] == "torch" else None


def _assigned(statement: cst.CSTNode) -> Set[str]:
    """Names a statement may bind (assignment targets, for/with/import names, walrus): over-approximated."""
    bound = {n.value for target in _all((cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.NamedExpr, cst.For),
                                        statement)
             for n in _all(cst.Name, target.target)}
    bound.update(n.value for alias in _all(cst.AsName, statement) for n in _all(cst.Name, alias.name))
    bound.update((_dotted(a.name) or "").split(".")[0] for a in _all(cst.ImportAlias, statement))
    return bound


def _imports_torch(statement: cst.CSTNode) -> bool:
    if isinstance(statement, cst.Import):
        return any((_dotted(a.name) or "").split(".")[0] == "torch" for a in statement.names)
    if isinstance(statement, cst.ImportFrom) and statement.module is not None:
        return (_dotted(statement.module) or "").split(".")[0] == "torch"
    return False


def _is_preamble(statement: cst.CSTNode) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    first = statement.body[0]
    if isinstance(first, cst.Expr) and isinstance(first.value, (cst.SimpleString, cst.ConcatenatedString)):
        return True
    return isinstance(first, cst.ImportFrom) and _dotted(first.module) == "__future__" if first else False


class Ported(NamedTuple):
    text: str
    changes: List[Change]
    unsafe_skipped: int  # rewrites --unsafe would make


def port_source(text: str, profile: str, path: str = "<string>", unsafe: bool = False) -> Ported:
    """The ported source and its change list. Raises libcst.ParserSyntaxError if it does not parse."""
    if profile not in PROFILES:
        raise ValueError(f"unknown device {profile!r}; choose one of {', '.join(PROFILES)}")
    if PROFILES[profile].is_cpu:
        raise ValueError("port writes vendor code (npu, sdaa, gcu); for the CPU, run the script unchanged "
                         "under transfer: TRANSFER_DEVICE=cpu python script.py")
    module = cst.parse_module(text)
    porter = _Porter(path, profile, unsafe)
    new = MetadataWrapper(module).visit(porter)
    changes = porter.changes
    if changes and changes[-1].operation == "INSERT":  # the vendor import: its line in the ported file
        line = next(i for i, text in enumerate(new.code.splitlines(), 1) if text.startswith(changes[-1].message))
        changes[-1] = changes[-1]._replace(start_line=line, end_line=line)
    return Ported(new.code, sorted(changes, key=lambda c: (c.start_line, c.operation)), porter.unsafe_skipped)
