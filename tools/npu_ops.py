"""Regenerate transfer/data/npu_ops.json: which aten operators torch_npu runs on the CPU, per version, and
which public torch APIs reach them.

    python tools/npu_ops.py --table tests/vendors/torch_npu/_data/supported_ops.txt [--out FILE]
    python tools/npu_ops.py --supported 2.14=LIST [--source 2.14="where LIST was read"] [--out FILE]

Inputs are files, so the lists can come from anywhere that reads them from torch_npu itself: the table
``tests/vendors/torch_npu/_data/extract.py`` writes from each torch_npu wheel's
``torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml`` and op-plugin's version gates (one
``name.overload<TAB>torch versions`` a line, its header naming each version's wheel), or per version a LIST
of the aten overloads the plug-in registers a PrivateUse1 kernel for, one ``name.overload`` a line
(``lgamma.out``; the default overload as the bare name), or a JSON list of them.

Everything else is asked of the torch installed here (run it on the torch the lists are for, or the
nearest one; the output names it), never guessed:

1. *Backend overloads*: every ``aten::`` overload of the dispatcher that has no CompositeImplicitAutograd,
   CompositeExplicitAutograd or CompositeExplicitAutogradNonFunctional kernel (those decompose, or run
   their composite kernel on any backend) and no BackendSelect kernel (a factory's), and has a CPU kernel
   (which the fallback runs). One that the plug-in does not list reaches its boxed CPU fallback
   (torch_npu/csrc/aten/VariableFallbackKernel.cpp): the *fallbacks*.
2. *Entries* of each fallback X: the overloads whose call reaches X on the npu: X, the functional and
   in-place variants whose structured kernel delegates to it (``structured_delegate`` in torchgen's
   packaged native_functions.yaml) unless the plug-in lists them, and the operators the trace below saw
   calling it. The rehearsal (transfer/plan.py) watches these on CUDA, where the kernels differ.
   ``out_overloads`` names the fallbacks that are ``out=`` overloads: one with no other entry is reached on
   the npu only by a script's own ``out=`` call, which the runtime leaves uncounted (transfer/opsupport.py).
3. *Public APIs*: every OpInfo of torch's own test suite
   (``torch.testing._internal.common_methods_invocations.op_db``) runs once on its first float32 CPU
   samples, forward and backward, under a dispatch mode that follows each call as the npu's dispatcher
   would: a composite operator runs its composite kernel with the mode watching what it calls, anything
   else is recorded with its path of composite callers and the phase it ran in. Per version, a recorded
   operator falls back where the list lacks it and every composite on its path (a listed one is the
   plug-in's kernel: nothing below it runs); the CompositeImplicitAutograd operators some version lists
   are put on those paths by a kernel for AutogradCPU (on the npu they do not decompose). The OpInfo's function (``torch.<name>``: resolved by getattr and checked to be
   the OpInfo's own callable), method and in-place variants (``Tensor.<name>``, checked the same way)
   get what their own calls reached. Fallbacks no OpInfo reached get the names native_functions.yaml
   gives their non-``out`` entries (``variants``, ``python_module``), each checked to exist on torch, where
   every non-``out`` overload of that name falls back (``scatter`` with ``reduce=`` does, plain ``scatter``
   does not: the name is not flagged).

Requires pyyaml and expecttest (torch's test suite imports it) beside torch. About four minutes on two
busy cores, whatever the number of versions (one trace).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import sys
import warnings
from typing import Any, Dict, Iterable, List, Optional, Set

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "transfer", "data", "npu_ops.json")
_COMPOSITE = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


def overload_name(schema_name: str, overload: str) -> str:
    """``lgamma.out`` / ``lgamma`` (the default overload) for aten::lgamma, overload out / ''."""
    name = schema_name.split("::", 1)[-1]
    return f"{name}.{overload}" if overload else name


def read_list(path: str) -> Set[str]:
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if text.lstrip().startswith("["):
        names = json.loads(text)
    else:
        names = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return {n[len("aten::"):] if n.startswith("aten::") else n for n in names if n}


def dispatcher_ops(torch) -> Dict[str, str]:
    """``name.overload`` -> ``aten::name.overload`` (the dispatcher's name) for every aten overload."""
    out = {}
    for full in torch._C._dispatch_get_all_op_names():
        if full.startswith("aten::"):
            out[full[len("aten::"):].replace(".default", "")] = full
    return out


def has_kernel(torch, full: str, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(full, key)


def backend_overloads(torch, ops: Dict[str, str]) -> Set[str]:
    """Overloads a boxed fallback can run: no composite kernel of any kind, no BackendSelect kernel of their own
    (a factory's), and a CPU kernel, which the fallback calls (one without fails there, as it would anyway:
    cudnn_*, miopen_*, mkldnn_*, quantized operators). The same test as the runtime's
    (transfer/patches/vendor_ops.dispatcher_fallbacks)."""
    cpu = set(torch._C._dispatch_get_registrations_for_dispatch_key("CPU"))
    return {name for name, full in ops.items()
            if full in cpu and not any(has_kernel(torch, full, k) for k in _COMPOSITE + ("BackendSelect",))}


def native_functions() -> Dict[str, dict]:
    """torchgen's packaged native_functions.yaml, by ``name.overload``."""
    import torchgen
    import yaml

    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml")
    with open(path, encoding="utf-8") as fh:
        entries = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    out = {}
    for entry in entries:
        head = entry["func"].split("(", 1)[0]
        out[head] = entry
    return out


def _resolve(root, dotted: str):
    try:
        return functools.reduce(getattr, dotted.split("."), root)
    except AttributeError:
        return None


def public_names(torch, name: str, entry: dict) -> List[str]:
    """The public torch APIs native_functions.yaml gives an aten function, each checked to exist."""
    base = name.split(".", 1)[0]
    if base.startswith("_"):
        return []
    variants = [v.strip() for v in str(entry.get("variants", "function")).split(",")]
    module = entry.get("python_module")
    found = []
    if "function" in variants:
        if module is None:
            if callable(getattr(torch, base, None)):
                found.append(f"torch.{base}")
        elif module in ("linalg", "special", "fft") and base.startswith(module + "_"):
            short = base[len(module) + 1:]
            if callable(_resolve(torch, f"{module}.{short}")):
                found.append(f"torch.{module}.{short}")
        elif module == "nn":
            import torch.nn.functional as F

            builtin = getattr(torch._C._nn, base, None)
            if builtin is not None and getattr(F, base, None) is builtin:
                found.append(f"torch.nn.functional.{base}")
    if "method" in variants and callable(getattr(torch.Tensor, base, None)):
        found.append(f"Tensor.{base}")
    return found


def _is_out(entry: dict) -> bool:
    """An ``out=`` overload: mutable keyword-only arguments (``*, Tensor(a!) out``)."""
    args = entry["func"].split("(", 1)[1].rsplit("->", 1)[0]
    return "*" in args and "!)" in args.split("*", 1)[1]


class Routing:
    """A dispatch mode that records, for each call, the operators the npu's dispatcher would route it through
    (module docstring, step 3). One trace serves every version: each operator a composite kernel calls is
    recorded with its path of composite callers, and a version's list decides afterwards (`reached`) where
    the plug-in's own kernel stops the descent (a listed operator anywhere on the path) and what falls back."""

    def __init__(self, torch, ops: Dict[str, str], listed_implicit: Set[str]):
        from torch.utils._python_dispatch import TorchDispatchMode

        self.torch = torch
        self.ops = ops
        self.events: List[tuple] = []  # (operator, path of composite callers, phase, outermost dispatcher entry)
        self.stack: List[tuple] = []  # (name, seen by the mode: a dispatcher entry on CUDA too)
        routing = self
        dk = torch._C.DispatchKey
        explicit = [getattr(dk, k) for k in _COMPOSITE[1:] if hasattr(dk, k)]
        implicit = dk.CompositeImplicitAutograd

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                schema = func._schema
                name = overload_name(schema.name, schema.overload_name)
                full = func.name()
                for key in [implicit] + explicit:
                    if has_kernel(routing.torch, full, key.name):
                        routing.stack.append((name, True))
                        try:
                            with self:
                                return func._op_dk(key, *args, **kwargs)
                        finally:
                            routing.stack.pop()
                phase = "backward" if routing.torch._C._current_autograd_node() is not None else "forward"
                path = tuple(n for n, _ in routing.stack)
                top = next((n for n, entry in routing.stack if entry), name)
                routing.events.append((name, path, phase, top))
                return func(*args, **kwargs)

        self.mode = Mode
        self.library = self._listed_implicit(listed_implicit)

    def _listed_implicit(self, names: Set[str]):
        """CompositeImplicitAutograd operators some version of the plug-in registers: on the npu such a one
        does not decompose (a backend kernel takes AutogradPrivateUse1 from the math kernel). Here a kernel for
        AutogradCPU puts it on the path of what its decomposition calls, so a version listing it cuts there."""
        torch = self.torch
        library = torch.library.Library("aten", "IMPL")
        routing = self
        for name in sorted(names):
            base, _, overload = name.partition(".")
            op = getattr(getattr(torch.ops.aten, base), overload or "default")

            def kernel(*args, _op=op, _name=name, **kwargs):
                routing.stack.append((_name, False))
                try:
                    return _op.decompose(*args, **kwargs)
                finally:
                    routing.stack.pop()

            library.impl(name, kernel, "AutogradCPU")
        return library

    def run(self, fn, sample) -> List[tuple]:
        torch = self.torch
        self.events, self.stack = [], []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with self.mode():
                out = fn(sample.input, *sample.args, **sample.kwargs)
                outs = out if isinstance(out, (tuple, list)) else (out,)
                grads = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]
                if grads:
                    sum(o.sum() for o in grads).backward()
        return self.events


def trace_opinfos(torch, routing: Routing, log) -> tuple:
    """({api: set of events (operator, path, phase, entry)}, count of OpInfos)."""
    from torch.testing._internal.common_methods_invocations import op_db

    traced: Dict[str, Set[tuple]] = {}
    for index, info in enumerate(op_db):
        if index % 100 == 0:
            log(f"  OpInfo {index}/{len(op_db)}")
        if any(part.startswith("_") or part == "ops" for part in info.name.split(".")):
            continue
        try:
            if not info.supports_dtype(torch.float32, "cpu"):
                continue
            samples = list(info.sample_inputs("cpu", torch.float32, requires_grad=info.supports_autograd))[:2]
        except Exception:  # an OpInfo whose samples need something absent here
            continue
        variants = []
        if info.op is not None and _resolve(torch, info.name) is info.op:
            variants.append((f"torch.{info.name}", info.op, True))
        for fn, grad in ((info.method_variant, True), (info.inplace_variant, False)):
            name = getattr(fn, "__name__", None)
            if name and getattr(torch.Tensor, name, None) is fn:
                variants.append((f"Tensor.{name}", fn, grad))
        for api, fn, grad in variants:
            for sample in samples:
                if not grad:
                    sample = sample.transform(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t)
                try:
                    events = routing.run(fn, sample)
                except Exception:  # a sample the variant refuses (in-place on a broadcast input, ...)
                    events = routing.events
                traced.setdefault(api, set()).update(events)
    return traced, len(op_db)


def reached(events: Iterable[tuple], supported: Set[str], fallbacks: Set[str]) -> tuple:
    """Under one version's list: ({phase: fallbacks reached}, {fallback: the dispatcher entries reaching it})."""
    uses: Dict[str, Set[str]] = {}
    entries: Dict[str, Set[str]] = {}
    for op, path, phase, top in events:
        if op in fallbacks and not any(p in supported for p in path):
            uses.setdefault(phase, set()).add(op)
            entries.setdefault(op, set()).add(top)
    return uses, entries


def compact(by_version: Dict[str, Any], versions: List[str]) -> List[list]:
    """[[ranges, value], ...]: the versions with one value (as JSON) grouped, as ``2.1-2.12,2.14``."""
    groups: Dict[str, List[str]] = {}
    values: Dict[str, Any] = {}
    for version in versions:
        if version in by_version:
            key = json.dumps(by_version[version], sort_keys=True)
            groups.setdefault(key, []).append(version)
            values[key] = by_version[version]
    return [[ranges(members, versions), values[key]] for key, members in groups.items()]


def ranges(members: List[str], versions: List[str]) -> str:
    """``2.1-2.12,2.14`` for the `members` of the ordered `versions`."""
    index = [versions.index(m) for m in members]
    parts, start = [], index[0]
    for prev, cur in zip(index, index[1:] + [None]):
        if cur != prev + 1:
            parts.append(versions[start] if start == prev else f"{versions[start]}-{versions[prev]}")
            start = cur
    return ",".join(parts)


def generate(supported_by_version: Dict[str, Set[str]], sources: Dict[str, str], log=print) -> dict:
    import torch

    ops = dispatcher_ops(torch)
    backend = backend_overloads(torch, ops)
    native = native_functions()
    delegators: Dict[str, Set[str]] = {}
    for name, entry in native.items():
        target = entry.get("structured_delegate")
        if target:
            delegators.setdefault(target, set()).add(name)
    versions = sorted(supported_by_version, key=lambda v: tuple(int(p) for p in v.split(".")))
    listed_implicit = {n for s in supported_by_version.values() for n in s
                       if n in ops and has_kernel(torch, ops[n], "CompositeImplicitAutograd")}
    routing = Routing(torch, ops, listed_implicit)
    try:
        traced, count = trace_opinfos(torch, routing, log)
    finally:
        routing.library._destroy()
    overloads: Dict[str, List[str]] = {}
    for name, entry in native.items():
        if not _is_out(entry):
            overloads.setdefault(name.split(".", 1)[0], []).append(name)
    fallbacks_v: Dict[str, Dict[str, List[str]]] = {}
    apis_v: Dict[str, Dict[str, Dict[str, List[str]]]] = {}
    origin: Dict[str, str] = {}
    for version in versions:
        supported = supported_by_version[version]
        missing = {n for n in backend if n not in supported}
        apis: Dict[str, Dict[str, Set[str]]] = {}
        tops: Dict[str, Set[str]] = {}
        for api, events in traced.items():
            uses, entries = reached(events, supported, missing)
            if uses:
                apis[api] = uses
                origin.setdefault(api, "traced")
            for op, seen in entries.items():
                tops.setdefault(op, set()).update(seen)
        fallbacks = {}
        for x in sorted(missing):
            entries = {d for d in delegators.get(x, ()) if d not in supported and d in ops}
            entries |= {t for t in tops.get(x, ()) if t != x}
            fallbacks[x] = sorted(entries)
        reached_ops = {op for uses in apis.values() for ops_ in uses.values() for op in ops_}
        falling = {n for n in native if n in missing
                   or n not in supported and native[n].get("structured_delegate") in missing}
        for x in sorted(missing - reached_ops):
            for entry_name in [x] + fallbacks[x]:
                entry = native.get(entry_name)
                if entry is None or _is_out(entry):
                    continue
                if not all(o in falling for o in overloads.get(entry_name.split(".", 1)[0], ())):
                    continue  # another overload of the name runs on the npu: the API does not always fall back
                for api in public_names(torch, entry_name, entry):
                    apis.setdefault(api, {}).setdefault("forward", set()).add(x)
                    origin.setdefault(api, "native_functions")
        for x, entries in fallbacks.items():
            fallbacks_v.setdefault(x, {})[version] = entries
        for api, uses in apis.items():
            apis_v.setdefault(api, {})[version] = {phase: sorted(found) for phase, found in sorted(uses.items())}
        log(f"torch_npu for torch {version}: {len(supported)} supported overloads, {len(missing)} fall back, "
            f"{len(apis)} public APIs reach one")
    supported_v: Dict[str, List[str]] = {}
    for version in versions:
        for name in supported_by_version[version]:
            supported_v.setdefault(name, []).append(version)
    return {
        "provenance": (f"generated by tools/npu_ops.py on {datetime.date.today().isoformat()} with torch "
                       f"{torch.__version__} ({len(ops)} aten overloads, {len(backend)} of them a boxed CPU fallback "
                       f"can run: no composite kernel, a CPU kernel; OpInfo traces: {count} entries of op_db); the "
                       "supported lists: see each version's source"),
        "torch": torch.__version__,
        "versions": versions,
        "sources": {v: sources.get(v, "") for v in versions},
        "supported": {name: ranges(members, versions) for name, members in sorted(supported_v.items())},
        "fallbacks": {x: compact(by, versions) for x, by in sorted(fallbacks_v.items())},
        "out_overloads": sorted(x for x in fallbacks_v if x in native and _is_out(native[x])),
        "apis": {api: compact(by, versions) for api, by in sorted(apis_v.items())},
        "api_origin": dict(sorted(origin.items())),
    }


def read_table(path: str) -> tuple:
    """tests/vendors/torch_npu/_data/supported_ops.txt (``name.overload<TAB>2.1-2.12,2.14`` lines; its header
    ``# 2.1: source`` per version): ({version: set}, {version: source})."""
    lists: Dict[str, Set[str]] = {}
    sources: Dict[str, str] = {}
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if line.startswith("# 2."):
                version, _, text = line[2:].partition(": ")
                sources[version] = text
            elif line and not line.startswith("#"):
                rows.append(line.split("\t"))
    versions = sorted(sources, key=lambda v: tuple(int(p) for p in v.split(".")))
    for version in versions:
        lists[version] = set()
    for name, spans in rows:
        for span in spans.split(","):
            first, _, last = span.partition("-")
            lo, hi = versions.index(first), versions.index(last or first)
            for version in versions[lo:hi + 1]:
                lists[version].add(name)
    return lists, sources


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/npu_ops.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", metavar="FILE", help="the supported aten overloads per torch version, as "
                        "tests/vendors/torch_npu/_data/supported_ops.txt writes them (with its sources)")
    parser.add_argument("--supported", action="append", default=[], metavar="VERSION=FILE",
                        help="torch_npu VERSION's supported aten overloads, one a line (repeat per version)")
    parser.add_argument("--source", action="append", default=[], metavar="VERSION=TEXT",
                        help="where VERSION's list was read (the provenance line)")
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args(list(argv) if argv is not None else None)
    lists, sources = read_table(args.table) if args.table else ({}, {})
    if args.table:
        sources = {v: f"{os.path.basename(args.table)}: {text}" for v, text in sources.items()}
    for item in args.supported:
        version, _, path = item.partition("=")
        lists[version] = read_list(path)
        sources.setdefault(version, f"{os.path.basename(path)} ({len(lists[version])} overloads)")
    for item in args.source:
        version, _, text = item.partition("=")
        sources[version] = text
    data = generate(lists, sources, log=lambda m: print(m, file=sys.stderr))
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
