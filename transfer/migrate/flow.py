"""The small, conservative data flow `transfer port` uses for device strings.

`position(node)` says where a string (or a name) stands: a device argument
(``"device"``), a collective backend argument (``"backend"``), a comparison
(``"compare"``), the value of a variable, parameter default or ``--option``
default (``"variable"``), or anything else (``"other"``).

`Flow.variables` finds the *device variables* of a module: a name bound in one
scope (module or function; Python's scoping rules) only by assignments or one
parameter default whose values are device strings (``"cuda"``, ``"cpu"``,
``f"cuda:{rank}"``, ``torch.device("cuda", i)``, ``"cuda" if ... else
"cpu"``), at least one of them CUDA's, and whose every use is a device
argument, a comparison with string literals (``device == "cuda"``, ``"cuda"
in device``, ``device in ("cuda", "mps")``), string formatting or printing, or
a test. Such a name's CUDA values can be rewritten with its comparisons, and
its tests keep their meaning. Any other use (passed to a function positionally,
stored in an attribute, copied into another name, returned) makes it
`Var.blocked`, with the reason: its value escapes to code this file does not
show. ``--device``-style argparse options work the same way through
``args.<dest>`` when the parsed namespace is only read attribute by attribute.
Backend variables (``backend = "nccl"``) follow the same rules with backend
arguments. Plain `ast`; never imports torch.
"""

from __future__ import annotations

import ast
import re
from typing import Dict, List, NamedTuple, Optional, Tuple

from . import names, scan

#: Calls whose first positional argument is a device.
DEVICE_CALLS = frozenset({
    "to", "device", "autocast", "GradScaler", "Generator", "set_device", "synchronize", "get_device_name",
    "get_device_properties", "get_device_capability", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_peak_memory_stats", "current_stream", "default_stream", "mem_get_info",
    "set_default_device", "cuda"})
DEVICE_KEYWORDS = frozenset({"device", "map_location", "device_type", "output_device", "pin_memory_device",
                             "device_map"})
BACKEND_CALLS = frozenset({"init_process_group", "new_group"})
#: Calls that only show a value (printing, logging, formatting).
SHOWING = frozenset({"print", "str", "repr", "format", "info", "debug", "warning", "warn", "error", "critical",
                     "log", "write", "echo", "set_description", "set_postfix", "print0", "master_print"})
_DEVICE_LIKE = re.compile(r"^[a-z_]+(:\d+)?$")
_BACKEND_LIKE = re.compile(r"^[a-z_:,\s]+$")


def _parent(node: ast.AST) -> Optional[ast.AST]:
    return getattr(node, "_parent", None)


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _spelled(node: ast.AST) -> str:
    """`node` as source, short (for reasons)."""
    try:
        text = ast.unparse(node)
    except AttributeError:  # Python 3.8
        return f"a {type(node).__name__.lower()}"
    return f"`{text if len(text) <= 40 else text[:37] + '...'}`"


def position(node: ast.AST, imports: Optional[names.Imports] = None) -> str:
    """Where `node` (a string literal or a name) stands; see the module docstring."""
    parent = _parent(node)
    if isinstance(parent, ast.Attribute) and parent.attr == "format":  # "cuda:{}".format(i)
        call = _parent(parent)
        if isinstance(call, ast.Call) and call.func is parent:
            return position(call, imports)
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Mod) and parent.left is node:  # "cuda:%d" % i
        return position(parent, imports)
    if isinstance(parent, ast.IfExp) and node is not parent.test:
        return position(parent, imports)
    if isinstance(parent, ast.Compare):
        return "compare"
    if isinstance(parent, (ast.Tuple, ast.List, ast.Set)) and isinstance(_parent(parent), ast.Compare):
        return "compare"
    if isinstance(parent, ast.Dict):  # map_location={"cuda:0": ...} inline
        holder = _parent(parent)
        return "device" if isinstance(holder, ast.keyword) and holder.arg == "map_location" else "other"
    if isinstance(parent, ast.keyword):
        call = _parent(parent)
        if parent.arg in DEVICE_KEYWORDS:
            return "device"
        if isinstance(call, ast.Call) and parent.arg == "backend" and _callee(call) in BACKEND_CALLS:
            return "backend"
        if isinstance(call, ast.Call) and parent.arg == "default" and _callee(call) == "add_argument":
            return "variable"
        return "other"
    if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node:
        name = _callee(parent)
        if name in BACKEND_CALLS:
            return "backend"
        if name in DEVICE_CALLS and not (name == "cuda" and isinstance(node, (ast.Constant, ast.JoinedStr))):
            return "device"
        return "other"
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
        return "variable"
    if isinstance(parent, ast.arguments):
        return "variable"
    return "other"


class Var(NamedTuple):
    """A device (or backend) variable: its CUDA literals, its comparisons to rewrite, or why not."""

    name: str
    kind: str  # "device" or "backend"
    literals: List[ast.AST]  # the CUDA device / "nccl" literals among its values
    compares: List[Tuple[ast.Constant, str]]  # (literal compared with it, its new value)
    blocked: str  # why it is not rewritten ("" when it is)
    key: Tuple[int, str] = (0, "")  # (id of its scope, name); options: (0, "--dest")
    links: Tuple[Tuple[int, str], ...] = ()  # parameters of this file's functions it is passed to
    deps: Tuple[Tuple[int, str], ...] = ()  # variables its values are read from (kept if one of them is)


class _Scope:
    __slots__ = ("node", "parent", "kind", "bindings", "globals", "nonlocals")

    def __init__(self, node: ast.AST, parent: Optional["_Scope"], kind: str):
        self.node, self.parent, self.kind = node, parent, kind
        self.bindings: Dict[str, List[Tuple[str, Optional[ast.AST]]]] = {}
        self.globals: set = set()
        self.nonlocals: set = set()


class Flow:
    """Scopes, bindings and uses of one module (see the module docstring)."""

    def __init__(self, tree: ast.Module, imports: names.Imports):
        self.imports = imports
        self.module = _Scope(tree, None, "module")
        self.scopes: List[_Scope] = [self.module]
        self.uses: List[Tuple[_Scope, ast.Name]] = []
        self.namespaces: set = set()  # names bound to parse_args() results
        self._namespace_calls: List[Tuple["_Scope", ast.AST]] = []
        self.namespace_escapes: List[ast.Name] = []
        self.options: Dict[str, List[ast.AST]] = {}  # argparse dest -> default values
        self.option_stores: Dict[str, List[ast.AST]] = {}
        self.functions: Dict[str, Tuple[ast.AST, "_Scope"]] = {}  # module-level def name -> (node, its scope)
        self.scope_of: Dict[int, "_Scope"] = {}  # id of a Name read -> the scope it is read in
        self.calls: Dict[str, List[ast.Call]] = {}  # callee's last name -> the calls of it
        self.defined: Dict[str, int] = {}  # def name -> how many defs (functions and methods) bind it
        self.attr_reads: Dict[str, int] = {}  # attribute name -> reads other than as a call's callee
        self.getters: set = set()  # module-level functions that return parse_args()
        self._walk_body(tree.body, self.module)
        for scope, node in self._namespace_calls:
            if isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) \
                    and node.value.func.id in self.getters:
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(t, ast.Name):
                        self.namespaces.add(t.id)
        self._resolved: Dict[int, Optional[_Scope]] = {}
        self._memo: Dict[Tuple[int, str, str], Optional[bool]] = {}  # (scope, name, kind) -> has device evidence
        self._deps: List[Tuple[int, str]] = []
        self._evidence = False
        self.why: Dict[Tuple[int, str], str] = {}  # (scope, name) -> where its value comes from, when not followed

    # ---------------------------------------------------------------- scopes
    def _bind(self, scope: _Scope, name: str, kind: str, value: Optional[ast.AST]) -> None:
        target = self.module if name in scope.globals else scope
        target.bindings.setdefault(name, []).append((kind, value))

    def _walk_body(self, body, scope: _Scope) -> None:
        for statement in body:
            self._walk(statement, scope)

    def _new_scope(self, node: ast.AST, parent: _Scope, kind: str) -> _Scope:
        scope = _Scope(node, parent, kind)
        self.scopes.append(scope)
        return scope

    def _walk(self, node: ast.AST, scope: _Scope) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            if not isinstance(node, ast.Lambda):
                self._bind(scope, node.name, "other", None)
                for d in node.decorator_list:
                    self._walk(d, scope)
            args = node.args
            for d in list(args.defaults) + [d for d in args.kw_defaults if d is not None]:
                self._walk(d, scope)
            inner = self._new_scope(node, scope, "function")
            if not isinstance(node, ast.Lambda):
                self.defined[node.name] = self.defined.get(node.name, 0) + 1
            if scope is self.module and not isinstance(node, ast.Lambda):
                self.functions[node.name] = (node, inner)
                if any(isinstance(r, ast.Return) and isinstance(r.value, ast.Call)
                       and _callee(r.value) in ("parse_args", "parse_known_args") for r in ast.walk(node)):
                    self.getters.add(node.name)
            positional = list(getattr(args, "posonlyargs", [])) + list(args.args)
            defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
            for arg, default in list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults)):
                inner.bindings.setdefault(arg.arg, []).append(("param", default))
            for arg in (args.vararg, args.kwarg):
                if arg is not None:
                    inner.bindings.setdefault(arg.arg, []).append(("other", None))
            if isinstance(node, ast.Lambda):
                self._walk(node.body, inner)
            else:
                self._walk_body(node.body, inner)
            return
        if isinstance(node, ast.ClassDef):
            self._bind(scope, node.name, "other", None)
            for child in node.decorator_list + node.bases + [k.value for k in node.keywords]:
                self._walk(child, scope)
            self._walk_body(node.body, self._new_scope(node, scope, "class"))
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = self._new_scope(node, scope, "comprehension")
            for i, gen in enumerate(node.generators):
                self._walk(gen.iter, scope if i == 0 else inner)
                for name in ast.walk(gen.target):
                    if isinstance(name, ast.Name):
                        inner.bindings.setdefault(name.id, []).append(("other", None))
                for cond in gen.ifs:
                    self._walk(cond, inner)
            for part in ([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]):
                self._walk(part, inner)
            return
        if isinstance(node, ast.Call):
            self.calls.setdefault(_callee(node), []).append(node)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            holder = _parent(node)
            if not (isinstance(holder, ast.Call) and holder.func is node):
                self.attr_reads[node.attr] = self.attr_reads.get(node.attr, 0) + 1
        if isinstance(node, ast.Global):
            scope.globals.update(node.names)
            for name in node.names:
                self.module.bindings.setdefault(name, []).append(("other", None))  # written elsewhere
        elif isinstance(node, ast.Nonlocal):
            scope.nonlocals.update(node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if value is not None and isinstance(value, ast.Call) and _callee(value) in ("parse_args", "parse_known_args"):
                for t in targets:
                    if isinstance(t, ast.Name):
                        self.namespaces.add(t.id)
            elif isinstance(value, ast.Call):
                self._namespace_calls.append((scope, node))
            for t in targets:
                if isinstance(t, ast.Name):
                    if value is not None:
                        self._bind(scope, t.id, "assign", value)
                elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                    self.option_stores.setdefault(t.attr, []).append(value)
                else:
                    for name in ast.walk(t):
                        if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store):
                            self._bind(scope, name.id, "other", None)
        elif isinstance(node, ast.Call) and _callee(node) == "add_argument":
            self._option(node)
        elif isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                self.uses.append((scope, node))
                self.scope_of[id(node)] = scope
            else:
                self._bind(scope, node.id, "other", None)
        elif isinstance(node, ast.alias):
            self._bind(scope, (node.asname or node.name).split(".")[0], "other", None)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self._bind(scope, node.name, "other", None)
        elif isinstance(node, ast.arg):
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
                    child is t for t in (node.targets if isinstance(node, ast.Assign) else [node.target])) \
                    and isinstance(child, ast.Name):
                continue
            self._walk(child, scope)

    def _option(self, call: ast.Call) -> None:
        default = next((k.value for k in call.keywords if k.arg == "default"), None)
        dest = next((k.value.value for k in call.keywords if k.arg == "dest" and isinstance(k.value, ast.Constant)),
                    None)
        if dest is None:
            flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            long = [f for f in flags if f.startswith("--")] or flags
            if not long:
                return
            dest = long[0].lstrip("-").replace("-", "_")
        if default is not None:
            self.options.setdefault(dest, []).append(default)

    def resolve(self, scope: _Scope, name: str) -> Optional[_Scope]:
        """The scope whose binding of `name` a use in `scope` reads (None: a builtin or unknown)."""
        first = True
        while scope is not None:
            if scope.kind == "class" and not first:
                scope = scope.parent
                continue
            if name in scope.globals:
                return self.module
            if name in scope.bindings and name not in scope.nonlocals:
                return scope
            scope, first = scope.parent, False
        return None

    # ---------------------------------------------------------------- values
    def device_valued(self, value: Optional[ast.AST], kind: str) -> Optional[List[ast.AST]]:
        """The CUDA literals of a device (backend) value, or None when it is not one."""
        if value is None or isinstance(value, ast.Constant) and value.value is None:
            return []
        if isinstance(value, ast.IfExp):
            body, orelse = self.device_valued(value.body, kind), self.device_valued(value.orelse, kind)
            return None if body is None or orelse is None else body + orelse
        if kind == "backend":
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                if scan.is_nccl_string(value):
                    return [value] if value.value.strip().lower() == "nccl" else None
                return [] if _BACKEND_LIKE.match(value.value) else None
            return None
        if scan.is_device_string(value):
            self._evidence = True
            return [value]
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return [] if _DEVICE_LIKE.match(value.value) or value.value == "" else None
        if isinstance(value, ast.Call):
            if isinstance(value.func, ast.Attribute) and value.func.attr == "format" \
                    and scan.is_device_string(value.func.value):
                self._evidence = True
                return [value.func.value]
            if self.imports.qualified(value.func) == "torch.device" and value.args:
                self._evidence = True
                return self.device_valued(value.args[0], kind)
            if isinstance(value.func, ast.Name) and value.func.id == "str" and len(value.args) == 1 \
                    and not value.keywords:
                return self.device_valued(value.args[0], kind)
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mod) and scan.is_device_string(value.left):
            self._evidence = True
            return [value.left]
        if self.is_device_read(value):  # x.device, x.device.type: a device the ported code made
            self._evidence = True
            return []
        if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id in self.namespaces \
                and value.attr in self.options and isinstance(value.ctx, ast.Load):
            found = self._values([("assign", d) for d in self.options[value.attr]], kind)
            if found is not None:
                self._deps.append((0, f"--{value.attr.replace('_', '-')}"))
                return []
            return None
        if isinstance(value, ast.Name) and id(value) in self.scope_of:
            home = self.resolve(self.scope_of[id(value)], value.id)
            if home is None or value.id in self.imports.table:
                return None
            evidence = self._name_evidence(home, value.id, kind)
            if evidence is None:
                return None
            self._deps.append((id(home), value.id))
            self._evidence = self._evidence or evidence
            return []
        return None

    @staticmethod
    def is_device_read(value: ast.AST, object_too: bool = False) -> bool:
        """``x.device.type``, ``device.type`` (with `object_too`, ``x.device`` too): the device (type) of a tensor,
        a module or a torch.device, which in a ported program is the target's (every device the code creates
        is). ``x.device`` alone is not read as one by default: ``args.device`` / ``self.device`` are as often a
        string from a config."""
        if not isinstance(value, ast.Attribute) or not isinstance(value.ctx, ast.Load):
            return False
        if value.attr == "type" and isinstance(value.value, ast.Attribute) and value.value.attr == "device":
            return True
        if value.attr == "type" and isinstance(value.value, ast.Name) and (
                value.value.id in ("device", "dev") or value.value.id.endswith("_device")):
            return True  # device.type: a torch.device by its name (a string has no .type)
        return object_too and value.attr == "device"

    def _name_evidence(self, scope: "_Scope", name: str, kind: str) -> Optional[bool]:
        """Whether every binding of `name` in `scope` is a device (backend) value (None: not), and whether one
        of them shows it is a device (a CUDA literal, a device read); memoised, cycles read as not followed."""
        memo_key = (id(scope), name, kind)
        if memo_key in self._memo:
            return self._memo[memo_key]
        self._memo[memo_key] = None  # a cycle: not followed
        saved = self._deps, self._evidence
        self._deps, self._evidence = [], False
        try:
            found = self._values(scope.bindings.get(name, []), kind, scope, name)
            result = None if found is None else self._evidence
        finally:
            self._deps, self._evidence = saved
        self._memo[memo_key] = result
        return result

    def is_device_object(self, expr: ast.AST) -> bool:
        """`expr`, passed to ``.cuda(...)``, is a device (``w.device``, a device variable), not an index."""
        if isinstance(expr, ast.Attribute):
            return expr.attr == "device" or expr.attr.endswith("_device")
        if isinstance(expr, ast.Name):
            return expr.id == "device" or expr.id.endswith("_device") or expr.id in self._device_names()
        if isinstance(expr, ast.Call):
            return self.imports.qualified(expr.func) == "torch.device"
        return isinstance(expr, (ast.Constant, ast.JoinedStr)) and isinstance(getattr(expr, "value", ""), str)

    def _device_names(self) -> set:
        if not hasattr(self, "_names"):
            self._names = {name for scope in self.scopes for name, bindings in scope.bindings.items()
                           if bindings and all(k == "assign" and v is not None and (
                               isinstance(v, ast.Call) and self.imports.qualified(v.func) == "torch.device"
                               or self.device_valued(v, "device")) for k, v in bindings)}
        return self._names

    # ---------------------------------------------------------------- variables
    def variables(self, dev: str, backend: str) -> List[Var]:
        """Every device/backend variable and option of the module (see the module docstring); computed once."""
        if getattr(self, "_variables", None) is None:
            self._variables = self._find_variables(dev, backend)
        return self._variables

    def origin(self, expr: ast.AST, dev: str, backend: str) -> str:
        """Where the value of `expr`, compared with a device string and not rewritten, comes from (a reason
        for a person), or ""."""
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "str" and expr.args:
            expr = expr.args[0]
        if isinstance(expr, ast.Attribute) and expr.attr == "type":
            expr = expr.value
        if isinstance(expr, ast.Name):
            scope = self.scope_of.get(id(expr))
            home = self.resolve(scope, expr.id) if scope is not None else None
            if home is None:
                return f"`{expr.id}` is not bound in this file: its value comes from another module"
            var = next((v for v in self.variables(dev, backend) if v.key == (id(home), expr.id)), None)
            if var is not None and var.blocked:
                return var.blocked
            self._name_evidence(home, expr.id, "device")
            if (id(home), expr.id) in self.why:
                return self.why[(id(home), expr.id)]
            kinds = [(how, value) for how, value in home.bindings.get(expr.id, [])]
            other = next((value for how, value in kinds if how == "assign" and value is not None
                          and self.device_valued(value, "device") is None), None)
            if other is not None:
                return (f"`{expr.id}` takes the value of {_spelled(other)} (line {other.lineno}), which port does not "
                        "follow (a config, a function's result, another module)")
            if any(how == "other" for how, _ in kinds):
                return f"`{expr.id}` is bound by a loop, a `with`, an import or an unpacking, which port does not follow"
            return ""
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id in self.namespaces \
                and expr.attr in self.options:
            key = (0, f"--{expr.attr.replace('_', '-')}")
            var = next((v for v in self.variables(dev, backend) if v.key == key), None)
            return var.blocked if var is not None else ""
        if isinstance(expr, ast.Attribute):
            return f"{_spelled(expr)} is an attribute: port does not follow what is stored in it"
        if isinstance(expr, ast.Subscript):
            return f"{_spelled(expr)} is read from a container (a config?), which port does not follow"
        if isinstance(expr, ast.Call):
            return f"{_spelled(expr)}: port does not follow what a function returns"
        return ""

    def _find_variables(self, dev: str, backend: str) -> List[Var]:
        uses: Dict[Tuple[int, str], List[ast.Name]] = {}
        for scope, node in self.uses:
            home = self.resolve(scope, node.id)
            if home is not None:
                uses.setdefault((id(home), node.id), []).append(node)
        out = []
        for scope in self.scopes:
            for name, bindings in scope.bindings.items():
                var = self._variable(name, bindings, uses.get((id(scope), name), []), dev, backend,
                                     global_elsewhere=scope is self.module and any(
                                         name in s.globals for s in self.scopes if s is not scope), scope=scope)
                if var is not None:
                    out.append(var._replace(key=(id(scope), name)))
        for dest, defaults in self.options.items():
            var = self._option_variable(dest, defaults, dev, backend)
            if var is not None:
                out.append(var._replace(key=(0, var.name)))
        return out

    def _values(self, bindings, kind: str, scope: Optional["_Scope"] = None,
                name: str = "") -> Optional[List[ast.AST]]:
        literals: List[ast.AST] = []
        for how, value in bindings:
            if how == "param" and value is None and kind == "device" and scope is not None:
                passed = self._passed(scope, name)
                if passed is None:
                    return None
                for arg in passed:
                    found = self.device_valued(arg, kind)
                    if found is None:
                        self.why.setdefault((id(scope), name), f"`{name}` is passed {_spelled(arg)} at line "
                                                               f"{arg.lineno}, which port does not follow")
                        return None
                    literals += found  # rewritten with the parameter's comparisons (one group)
                continue
            if how not in ("assign", "param") or how == "param" and value is None:
                return None
            found = self.device_valued(value, kind)
            if found is None:
                return None
            literals += found
        return literals

    def _value_reads(self) -> set:
        """Names read other than as the callee of a call (a function passed around is not followed)."""
        if getattr(self, "_reads", None) is None:
            self._reads = {u.id for _, u in self.uses
                           if not (isinstance(_parent(u), ast.Call) and _parent(u).func is u)}
        return self._reads

    def _passed(self, scope: "_Scope", name: str) -> Optional[List[ast.AST]]:
        """What this file's calls pass to the parameter `name` of the function of `scope` (its default where
        a call passes nothing), or None (with why, `self.why`) when some value is not in view."""
        node = scope.node
        where = (id(scope), name)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        method = scope.parent is not None and scope.parent.kind == "class"
        calls = self.calls.get(node.name, [])
        calls = [c for c in calls if isinstance(c.func, ast.Attribute) == method]
        called = f"{node.name}()"
        if self.defined.get(node.name, 0) != 1 or (self.attr_reads.get(node.name) if method
                                                    else node.name in self._value_reads()):
            self.why[where] = (f"`{name}` is a parameter of {called} (line {node.lineno}), which is defined more "
                               "than once or used as a value: its callers are not all in view")
            return None
        if not calls:
            self.why[where] = (f"`{name}` is a parameter of {called} (line {node.lineno}) without a default, and "
                               "its callers are not in this file: the value comes from them")
            return None
        args = node.args
        positional = [a.arg for a in list(getattr(args, "posonlyargs", [])) + list(args.args)]
        defaults = dict(zip(positional[len(positional) - len(args.defaults):], args.defaults))
        defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
        offset = 1 if method and not any(isinstance(d, ast.Name) and d.id == "staticmethod"
                                         for d in node.decorator_list) else 0
        index = positional.index(name) - offset if name in positional else None
        out = []
        for call in calls:
            if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                self.why[where] = f"`{name}` of {called}: the call at line {call.lineno} passes *args / **kwargs"
                return None
            value = next((k.value for k in call.keywords if k.arg == name), None)
            if value is None and index is not None and 0 <= index < len(call.args):
                value = call.args[index]
            if value is None:
                value = defaults.get(name)
            if value is None:
                self.why[where] = f"`{name}` of {called}: the call at line {call.lineno} does not pass it"
                return None
            out.append(value)
        return out

    def _variable(self, name, bindings, uses, dev, backend, global_elsewhere, scope=None) -> Optional[Var]:
        deps: List[Tuple[int, str]] = []
        for kind in ("device", "backend"):
            self._deps, self._evidence = [], False
            literals = self._values(bindings, kind, scope, name)
            deps = self._deps
            if literals or kind == "device" and literals is not None and self._evidence:
                break
        else:
            return None
        if global_elsewhere:
            return Var(name, kind, literals, [], f"`{name}` is assigned through `global` in a function")
        compares, blocked, links = self._uses(name, uses, kind, dev, backend, needs_reach=bool(literals))
        return Var(name, kind, literals, compares, blocked, links=tuple(links), deps=tuple(deps))

    def _option_variable(self, dest, defaults, dev, backend) -> Optional[Var]:
        values = [("assign", d) for d in defaults] + [("assign", v) for v in self.option_stores.get(dest, [])]
        for kind in ("device", "backend"):
            literals = self._values(values, kind)
            if literals:
                break
        else:
            return None
        uses: List[ast.AST] = []
        blocked = ""
        for scope, node in self.uses:
            if node.id not in self.namespaces:
                continue
            parent = _parent(node)
            if isinstance(parent, ast.Attribute) and parent.value is node:
                if parent.attr == dest and isinstance(parent.ctx, ast.Load):  # stores are values (option_stores)
                    uses.append(parent)
            elif not blocked and not self._namespace_stays_in_view(node):
                blocked = (f"`--{dest.replace('_', '-')}`'s namespace `{node.id}` is passed on (line {node.lineno}): "
                           "what reads the option there is not in view")
        if not uses and not blocked:
            blocked = f"`--{dest.replace('_', '-')}` is read nowhere in this file"
        compares, why, links = self._uses(f"args.{dest}", uses, kind, dev, backend)
        return Var(f"--{dest.replace('_', '-')}", kind, literals, compares, blocked or why, links=tuple(links))

    #: Launchers that call their first argument with (process index, *args=...).
    SPAWNS = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"})

    def _namespace_stays_in_view(self, use: ast.Name) -> bool:
        """The parsed namespace `use` is passed to a function of this file (directly, or through
        ``mp.spawn(fn, args=(..., ns))``, which calls ``fn(i, ..., ns)``) at a parameter that every caller in
        this file fills with a namespace and that bears a namespace's name, so its reads there are among the
        option's reads (the analysis matches namespaces by name)."""
        parent, keyword = _parent(use), None
        if isinstance(parent, ast.keyword):
            keyword, parent = parent.arg, _parent(parent)
        offset = 0
        if isinstance(parent, ast.Tuple) and keyword is None and isinstance(_parent(parent), ast.keyword) \
                and _parent(parent).arg == "args":
            spawn = _parent(_parent(parent))
            if not (isinstance(spawn, ast.Call) and self.imports.qualified(spawn.func) in self.SPAWNS and spawn.args
                    and isinstance(spawn.args[0], ast.Name)) or any(isinstance(e, ast.Starred) for e in parent.elts):
                return False
            func, index, offset = spawn.args[0].id, parent.elts.index(use) + 1, 1
        elif isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and use is not parent.func:
            if keyword is None and (use not in parent.args or any(isinstance(a, ast.Starred) for a in parent.args)):
                return False
            func, index = parent.func.id, None if keyword is not None else parent.args.index(use)
        else:
            return False
        found = self.functions.get(func)
        if found is None or self.defined.get(func) != 1 or len(self.module.bindings.get(func, ())) != 1:
            return False
        args = found[0].args
        positional = [a.arg for a in list(getattr(args, "posonlyargs", [])) + list(args.args)]
        if keyword is not None:
            param = keyword
        elif index < len(positional):
            param = positional[index]
        else:
            return False
        if param not in self.namespaces or param not in positional:
            return False
        at = positional.index(param)

        def fills(call: ast.Call, shift: int) -> bool:
            if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                return False
            value = next((k.value for k in call.keywords if k.arg == param), None)
            if value is None and 0 <= at - shift < len(call.args):
                value = call.args[at - shift]
            return isinstance(value, ast.Name) and value.id in self.namespaces

        for other in self.calls.get(func, []):  # every direct caller passes a namespace there
            if isinstance(other.func, ast.Name) and not fills(other, 0):
                return False
        for scope, read in self.uses:  # read as a value only to be spawned, with a namespace there
            if read.id != func or (isinstance(_parent(read), ast.Call) and _parent(read).func is read):
                continue
            call = _parent(read)
            spawned = next((k.value for k in call.keywords if k.arg == "args"), None) \
                if isinstance(call, ast.Call) and self.imports.qualified(call.func) in self.SPAWNS \
                and call.args and call.args[0] is read else None
            if not isinstance(spawned, ast.Tuple) or not fills(ast.Call(func=read, args=spawned.elts, keywords=[]), 1):
                return False
        return True

    def _uses(self, name, uses, kind, dev, backend, needs_reach=True):
        compares: List[Tuple[ast.Constant, str]] = []
        links: List[Tuple[int, str]] = []
        reached = False
        compared_only = True  # a value only compared keeps every test's meaning when rewritten with them
        for use in uses:
            holder = _parent(use)
            if kind == "device" and isinstance(holder, ast.Call) and isinstance(holder.func, ast.Name) \
                    and holder.func.id == "str" and holder.args == [use] and isinstance(_parent(holder), ast.Compare):
                use = holder  # str(device) == "cuda:0"
            where = position(use, self.imports)
            if where == kind:
                reached = True
                continue
            link = self._parameter(use)
            if link is not None:
                links.append(link)
                reached = True
                continue
            parent = _parent(use)
            compared_only = compared_only and where == "compare"
            if where == "compare" and isinstance(parent, ast.Compare):
                found = self._compare(parent, use, kind, dev, backend)
                if found is None:
                    return [], f"`{name}` is compared in a way port does not rewrite (line {use.lineno})", []
                compares += found
                continue
            if isinstance(parent, ast.Attribute) and parent.attr == "type" and kind == "device" \
                    and isinstance(_parent(parent), ast.Compare):
                found = self._compare(_parent(parent), parent, kind, dev, backend)
                if found is not None:
                    compares += found
                    continue
            if self._shown_or_tested(use):
                continue
            if kind == "device" and self._passed_on(use):
                continue  # a device of the ported program, passed on as one: its readers are ported where they are
            return [], f"`{name}` reaches {self._describe(use)} (line {use.lineno}), not a {kind} argument", []
        if not reached and needs_reach and not (compared_only and compares):
            return [], f"`{name}` reaches no {kind} argument in this file", []
        return compares, "", links

    @staticmethod
    def _passed_on(use: ast.AST) -> bool:
        """`use` is an argument of a call, or copied into another name (whose own analysis follows it)."""
        parent = _parent(use)
        if isinstance(parent, ast.keyword):
            return parent.arg is not None
        if isinstance(parent, ast.Call):
            return use is not parent.func and use in parent.args
        return isinstance(parent, ast.Assign) and parent.value is use and all(
            isinstance(t, ast.Name) for t in parent.targets)

    def _parameter(self, use: ast.AST) -> Optional[Tuple[int, str]]:
        """(scope id, parameter) when `use` is an argument of a call of a function of this module (the
        parameter is a candidate device variable itself: linked, all or none)."""
        parent = _parent(use)
        keyword = None
        if isinstance(parent, ast.keyword):
            keyword, parent = parent.arg, _parent(parent)
        if not (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and use is not parent.func):
            return None
        found = self.functions.get(parent.func.id)
        if found is None or self.resolve(self.module, parent.func.id) is not self.module \
                or len(self.module.bindings.get(parent.func.id, ())) != 1:
            return None
        node, scope = found
        args = node.args
        positional = list(getattr(args, "posonlyargs", [])) + list(args.args)
        if keyword is None:
            if any(isinstance(a, ast.Starred) for a in parent.args):
                return None
            index = parent.args.index(use)
            if index >= len(positional):
                return None
            param = positional[index].arg
        else:
            param = keyword
        bindings = scope.bindings.get(param, [])
        if len(bindings) == 1 and bindings[0][0] == "param":
            return id(scope), param
        return None

    @staticmethod
    def _compare(compare: ast.Compare, use: ast.AST, kind, dev, backend):
        operands = [compare.left] + list(compare.comparators)
        if len(operands) != 2 or use not in operands:
            return None
        if not isinstance(compare.ops[0], (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)):
            return None
        other = operands[1] if operands[0] is use else operands[0]
        items = other.elts if isinstance(other, (ast.Tuple, ast.List, ast.Set)) else [other]
        found = []
        for item in items:
            if not isinstance(item, ast.Constant):
                return None
            if not isinstance(item.value, str):
                continue
            text = item.value
            if kind == "device" and (text == "cuda" or scan.is_device_string(item)):
                found.append((item, dev + text[4:]))
            elif kind == "backend" and text.strip().lower() == "nccl":
                found.append((item, backend))
        return found

    @staticmethod
    def _shown_or_tested(use: ast.AST) -> bool:
        parent = _parent(use)
        if isinstance(parent, ast.FormattedValue):
            return True
        if isinstance(parent, ast.keyword):
            parent = _parent(parent)
        if isinstance(parent, ast.Call) and use is not parent.func and _callee(parent) in SHOWING:
            return True
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Mod) and parent.right is use:
            return True
        if isinstance(parent, (ast.Tuple,)) and isinstance(_parent(parent), ast.BinOp):
            return True
        if isinstance(parent, (ast.If, ast.While, ast.IfExp)) and parent.test is use:
            return True
        if isinstance(parent, (ast.BoolOp, ast.UnaryOp)):
            return True
        return False

    @staticmethod
    def _describe(use: ast.AST) -> str:
        parent = _parent(use)
        if isinstance(parent, ast.keyword):
            return f"the argument {parent.arg}="
        if isinstance(parent, ast.Call):
            func = parent.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "a call")
            return f"a call of {name}()"
        if isinstance(parent, (ast.Assign, ast.AnnAssign)):
            return "another name"
        if isinstance(parent, ast.Return):
            return "a return"
        return f"a {type(parent).__name__.lower()}"
