"""torch.compile's CUDA compilers on a target: the target's own compiler, else a backend that runs there.

Used by `patches.dynamo` alone. ``torch.compile(model)`` asks for inductor (``mode="reduce-overhead"``:
inductor with CUDA graphs); ``backend="cudagraphs"`` for CUDA graphs alone. Inductor generates code for
CPU and CUDA tensors, and for a plug-in's device only where the plug-in registered a code generator for it
(``torch._inductor.codegen.common.register_backend_for_device``); without one it fails in the middle of the
first step (``InductorError: KeyError: 'npu'``, ``LoweringException: AssertionError``).

`TargetCompiler` stands in for such a backend and decides per graph, from the devices of the graph's
tensors and the target's `profiles.CompilePolicy`:

1. no tensor on the target's device (CPU tensors; the cpu target), or the installed plug-in registered
   inductor code generation for the device (torch_npu with Triton-Ascend): the backend asked for, as is
   (CUDA graphs asked for CPU code: inductor leaves them out, as natively; said);
2. the plug-in registers its own dynamo backend (the policy names it: torch_npu's ``npu``; for CUDA graphs
   its ``npugraphs``): that backend;
3. otherwise the policy's fallback (dynamo's ``eager`` backend: each graph runs as dynamo traced it, the
   same ops as eager, so the same numbers; no fusion, and no step slower than eager beyond dynamo's
   guards: ``aot_eager`` measured up to 2x slower per step on the stand-ins, benchmarks/compile.py).

Each decision other than 1. is said once per call site (the script's ``torch.compile`` line, its reason)
and recorded in ``TRANSFER_LOG``'s call-site log, as are the graph breaks dynamo reports for it.
"""

from __future__ import annotations

import logging
import sys
import threading
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Set, Tuple

import torch

logger = logging.getLogger("transfer")

#: dynamo backends that generate CUDA code or capture CUDA graphs (other backends run on any device).
INDUCTOR, CUDAGRAPHS = "inductor", "cudagraphs"


def kind_of(backend: Any) -> Optional[str]:
    """INDUCTOR or CUDAGRAPHS for a backend torch.compile / torch._dynamo.optimize got; None for any other."""
    if isinstance(backend, TargetCompiler):
        return None
    if isinstance(backend, str):
        return backend if backend in (INDUCTOR, CUDAGRAPHS) else None
    name = getattr(backend, "compiler_name", None)  # torch.compile's _TorchCompile(Inductor)Wrapper
    if name in (INDUCTOR, CUDAGRAPHS):
        return name
    if getattr(backend, "__name__", None) == "compile_fx" and "inductor" in getattr(backend, "__module__", ""):
        return INDUCTOR
    return None


def lookup(name: str):
    """The dynamo backend registered under `name` (entry points included), or None."""
    try:
        from torch._dynamo.backends.registry import lookup_backend
    except ImportError:  # torch 2.0
        from torch._dynamo.eval_frame import lookup_backend
    try:
        return lookup_backend(name)
    except Exception:  # InvalidBackend, or a plug-in's entry point that cannot load
        return None


def inductor_generates_code_for(device_type: str) -> bool:
    """True if inductor has a code generator for `device_type` (a plug-in's register_backend_for_device)."""
    try:
        from torch._inductor.codegen import common
    except ImportError:
        return False
    if not hasattr(common, "get_scheduling_for_device"):  # torch 2.0: no registration for other devices
        return False
    if hasattr(common, "init_backend_registration"):  # torch >= 2.2 registers CPU / CUDA lazily
        common.init_backend_registration()
    return common.get_scheduling_for_device(device_type) is not None


def _devices(gm, example_inputs) -> Set[str]:
    found = set()
    for value in list(example_inputs) + list(gm.parameters()) + list(gm.buffers()):
        device = getattr(value, "device", None)
        if isinstance(device, torch.device):
            found.add(device.type)
    for node in gm.graph.nodes:  # tensors created inside the graph (torch.zeros(device=...))
        value = node.meta.get("example_value", node.meta.get("val"))
        device = getattr(value, "device", None)
        if isinstance(device, torch.device):
            found.add(device.type)
    return found


_SAID: Set[str] = set()  # CUDA-only settings reported in this process
_BREAKS_SEEN: Dict[str, int] = {}  # dynamo's graph-break counters as last read (they are per process)
_BREAKS_LOCK = threading.Lock()


def _cuda_settings(ctx, inductor_runs: bool) -> None:
    """Say once per process what the CUDA-only settings scripts make before compiling do here: TF32
    (``torch.backends.cuda.matmul.allow_tf32``, ``torch.set_float32_matmul_precision``) and inductor's
    Triton tuning (``coordinate_descent_tuning``), which only Triton kernels read. Settings never raise."""
    policy = ctx.profile.compile
    precision = torch.get_float32_matmul_precision()
    if precision != "highest" and "tf32" not in _SAID:
        _SAID.add("tf32")
        (logger.info if ctx.profile.is_cpu else logger.warning)(
            "float32 matmul precision %r (torch.backends.cuda.matmul.allow_tf32 / "
            "torch.set_float32_matmul_precision): %s", precision, policy.tf32)
    if inductor_runs or "coordinate_descent_tuning" in _SAID:
        return
    inductor_config = sys.modules.get("torch._inductor.config")
    if inductor_config is not None and getattr(inductor_config, "coordinate_descent_tuning", False):
        _SAID.add("coordinate_descent_tuning")
        logger.warning("torch._inductor.config.coordinate_descent_tuning tunes the Triton kernels inductor "
                       "generates on CUDA; on %s inductor generates none here: it has no effect",
                       ctx.profile.device_type)


class Site:
    """Where the script called torch.compile; frame-like (f_code.co_filename, f_lineno) for CallLog.add."""

    def __init__(self, filename: str, line: int):
        self.f_code = SimpleNamespace(co_filename=filename)
        self.f_lineno = line

    def __str__(self) -> str:
        return f"{self.f_code.co_filename}:{self.f_lineno}"


class TargetCompiler:
    """A dynamo backend standing for the CUDA backend a script asked for (see the module docstring)."""

    def __init__(self, requested: Any, kind: str, ctx, site: Optional[Site], options: Dict[str, Any]):
        self.requested = requested
        self.kind = kind
        self.ctx = ctx
        self.site = site
        self.options = options  # torch.compile's arguments, for messages and the log
        self.compiler_name = getattr(requested, "compiler_name", requested if isinstance(requested, str) else kind)
        self._said: Set[Tuple[str, str]] = set()
        self._lock = threading.Lock()

    def get_compiler_config(self):
        """The requested backend's (torch.compile's inductor wrapper: its config, for compiled autograd)."""
        get = getattr(self.requested, "get_compiler_config", None)
        return get() if get is not None else None

    def reset(self):
        reset = getattr(self.requested, "reset", None)
        if reset is not None:
            reset()

    def __call__(self, gm, example_inputs, **kwargs):
        self._log_graph_breaks()
        chosen, name, reason = self.choose(gm, example_inputs)
        if name is not None:
            self._say(name, reason)
        _cuda_settings(self.ctx, inductor_runs=chosen is self._requested())
        return chosen(gm, example_inputs, **kwargs)

    # ------------------------------------------------------------------ the decision
    def wants_graphs(self) -> bool:
        """CUDA graphs asked for: backend="cudagraphs", mode="reduce-overhead", or inductor's own switch."""
        if self.kind == CUDAGRAPHS:
            return True
        config = getattr(self.requested, "config", None)
        if isinstance(config, dict) and "triton.cudagraphs" in config:
            return bool(config["triton.cudagraphs"])
        try:
            import torch._inductor.config as inductor_config
        except ImportError:
            return False
        return bool(getattr(getattr(inductor_config, "triton", None), "cudagraphs", False))

    def choose(self, gm, example_inputs):
        """(compiler, name or None when it is the one asked for, reason)."""
        policy = self.ctx.profile.compile
        device_type = self.ctx.profile.device_type
        plugin = self.ctx.profile.package or "torch"
        on_device = device_type in _devices(gm, example_inputs) and device_type != "cpu"
        graphs = self.wants_graphs()
        if self.kind == INDUCTOR and not on_device:
            if graphs:  # inductor leaves CPU code out of CUDA graphs, as it does natively
                return (self._requested(), "inductor without CUDA graphs",
                        "the graph's tensors are CPU tensors, which inductor never captures in CUDA graphs; "
                        "the same results")
            return self._requested(), None, ""
        if self.kind == INDUCTOR and inductor_generates_code_for(device_type):
            return self._requested(), None, ""
        if graphs and policy.graphs_backend and lookup(policy.graphs_backend) is not None:
            mode = self.options.get("mode")
            what = ("CUDA graphs" if self.kind == CUDAGRAPHS else
                    f"mode={mode!r} (CUDA graphs)" if mode else "inductor's triton.cudagraphs (CUDA graphs)")
            return (lookup(policy.graphs_backend), f"{plugin}'s '{policy.graphs_backend}' backend",
                    f"{what} on {device_type}: the plug-in's graph capture")
        no_code = f"inductor generates no code for {device_type} here: {policy.inductor}"
        if self.kind == INDUCTOR and policy.backend and lookup(policy.backend) is not None:
            return (lookup(policy.backend), f"{plugin}'s '{policy.backend}' backend",
                    f"{no_code}; the plug-in's own compiler")
        if self.kind == CUDAGRAPHS:
            why = (f"no graph capture for {device_type} is registered with dynamo" if device_type != "cpu"
                   else "a CPU has no graphs to capture")
        else:
            why = no_code
            if graphs:
                why += f"; nor is graph capture for {device_type} (CUDA graphs)"
        return (lookup(policy.fallback), f"dynamo's '{policy.fallback}' backend",
                f"{why}; the same results as eager, without fusion")

    def _requested(self):
        if isinstance(self.requested, str):
            return lookup(self.requested)
        return self.requested

    # ------------------------------------------------------------------ saying it
    def _say(self, name: str, reason: str) -> None:
        with self._lock:
            if (name, reason) in self._said:
                return
            self._said.add((name, reason))
        asked = self.compiler_name if self.kind == INDUCTOR else "cudagraphs"
        where = f"torch.compile at {self.site}" if self.site else "torch.compile"
        logger.warning("%s: %s runs as %s: %s", where, asked, name, reason)
        self.ctx.substitutions[f"torch.compile ({asked})"] = name
        self._record(f"torch.compile ({asked})", name + ": " + reason)

    def _record(self, api: str, became: str) -> None:
        log = getattr(self.ctx, "log", None)
        if log is None or self.site is None:
            return
        log.add(api, self.site, (), self.options, "translated", became)

    def _log_graph_breaks(self) -> None:
        """Graph breaks dynamo counted since any backend's last graph: they split the code this backend is
        asked to compile now (dynamo compiles the graph before a break when it meets it). One call-site
        record per reason."""
        try:
            from torch._dynamo.utils import counters
        except ImportError:
            return
        breaks = counters.get("graph_break", {})
        new: List[str] = []
        with _BREAKS_LOCK:
            for reason, count in list(breaks.items()):
                if _BREAKS_SEEN.get(reason, 0) < count:
                    _BREAKS_SEEN[reason] = count
                    new.append(reason)
        for reason in new:
            first = str(reason).strip().splitlines()[0][:200] if str(reason).strip() else "graph break"
            self._record(f"torch.compile graph break ({first})", "a new graph after the break")
