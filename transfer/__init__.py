"""transfer: run unmodified CUDA PyTorch scripts on other accelerators (one profile each,
transfer/profiles.py) or on the CPU.

Public API::

    transfer.install(device=None)  # activate (TRANSFER_DEVICE or 'auto' when None)
    transfer.uninstall()           # restore every patched object
    transfer.status()              # target, patches, translations seen
    transfer.report()              # the same as readable text

Importing this package does not import torch; `install` does.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Dict, Optional

_ERRORS = ("TransferError", "UnknownDeviceError", "VendorPackageMissing", "NoDeviceError", "UnsupportedCudaAPI",
           "ConflictError")

__version__ = "0.1.0"
__all__ = ["install", "uninstall", "status", "report", *_ERRORS]

logger = logging.getLogger("transfer")
_lock = threading.RLock()
_active: Optional[Any] = None  # the PatchContext of the installed target
_outcome: Dict[str, Any] = {"active": False, "reason": "not installed"}
_exported: Optional[tuple] = None  # (name exported as TRANSFER_DEVICE, the value it replaced or None)
_plan: Optional[Any] = None  # the rehearsal's context on real CUDA (transfer/plan.py): logging layers only


def __getattr__(name: str) -> Any:
    # The error classes load on first use: torch imports this package at every
    # `import torch` (entry point below), where each module file costs ~0.3 ms.
    if name in _ERRORS:
        from . import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'transfer' has no attribute {name!r}")


def torch_backend_entry_point() -> None:
    """torch's backend autoload entry point (setup.cfg, group ``torch.backends``).

    ``import torch`` calls it near the end of its own import, in every Python
    process that imports torch: one environment lookup unless TRANSFER_DEVICE
    is set, and no other module of transfer is loaded.
    """
    if os.environ.get("TRANSFER_DEVICE", "").strip():
        from ._autoload import install_when_ready

        install_when_ready()


def install(device: Optional[str] = None) -> Dict[str, Any]:
    """Activate `transfer` for `device` (a profile name, 'auto' or 'off').

    With ``device=None`` TRANSFER_DEVICE decides, defaulting to 'auto'.
    Idempotent and thread-safe: a second call returns the current status; asking
    for a different target while one is active raises (uninstall first).
    Raises before patching anything when a TRANSFER_* switch has a bad value,
    and `ConflictError` when another patcher of torch is active (conflicts.py);
    a misspelled TRANSFER_DISABLE name raises with the valid names, torch left
    as it was. Returns `status()`.
    """
    global _active, _outcome, _plan
    import torch  # noqa: F401  first: its import may itself install (TRANSFER_DEVICE entry point)

    from . import selection, settings
    from .errors import TransferError
    from .settings import check_environment, flag

    with _lock:
        wanted = selection.requested(device)
        check_environment()  # every TRANSFER_* value that cannot work raises here, before anything is patched
        strict = flag("TRANSFER_STRICT")
        if _active is not None:
            if wanted not in ("auto", _active.profile.name):
                raise TransferError(
                    f"transfer is already active for '{_active.profile.name}'; "
                    f"call transfer.uninstall() before installing '{wanted}'"
                )
            return status()
        from .patches.environment import before_vendor_import
        from .registry import Registry, revert_left_behind

        revert_left_behind()  # an earlier install's replacements that another patch's undo put back
        registry = Registry(disabled=settings.disabled())
        profile, why = selection.select(wanted, prepare=lambda p: before_vendor_import(registry, p))
        if profile is None:
            _outcome = {"active": False, "reason": why}
            if why == selection.NATIVE_CUDA:
                if settings.plan_name() and settings.log_directory():
                    from .plan import observe  # the rehearsal (transfer-run --plan): log for the plan, change nothing

                    if _plan is None:
                        _plan = observe(settings.log_directory())
                    _outcome["plan"] = _plan.profile.name
                    _outcome["call_sites"] = _plan.log.records
                else:
                    _say_once("transfer: real CUDA devices are present; running CUDA natively, nothing patched")
                _start_compare("cuda")
            return status()
        _active = _apply(profile, registry, strict)
        _outcome = {"active": True, "reason": why}
        _export_choice(profile.name)
        _banner(_active)
        _start_compare(profile.device_type)
        return status()


def _start_compare(device: str) -> None:
    """The accuracy mode (TRANSFER_COMPARE, transfer/compare/), once the target is in place."""
    from . import settings

    if settings.value("TRANSFER_COMPARE"):
        from .compare import from_environment

        from_environment(device)


def _export_choice(name: str) -> None:
    """Make the processes this one starts (mp.spawn workers, subprocesses) choose `name` too.

    The environment way in reaches every child through TRANSFER_DEVICE (transfer.pth, the
    torch.backends entry point, transfer-run's bootstrap); a choice made in code is exported the
    same way, so a worker whose entry module never calls install() is translated as its parent.
    `uninstall` puts the previous value back.
    """
    global _exported
    previous = os.environ.get("TRANSFER_DEVICE")
    if previous is not None and previous.strip().lower() == name:
        return
    os.environ["TRANSFER_DEVICE"] = name
    _exported = (name, previous)


def _unexport_choice() -> None:
    global _exported
    if _exported is None:
        return
    (name, previous), _exported = _exported, None
    if os.environ.get("TRANSFER_DEVICE") != name:
        return  # changed since by someone else: theirs now
    if previous is None:
        del os.environ["TRANSFER_DEVICE"]
    else:
        os.environ["TRANSFER_DEVICE"] = previous


def _apply(profile, registry, strict):
    import torch  # noqa: F401  (patch areas need it loaded)

    from . import conflicts, settings
    from .cpu import runtime as cpu_runtime
    from .devices import Target
    from .patches import AREAS, DEFERRED, PatchContext, apply_all, apply_area
    from .dropins import apply as provide_packages

    if profile.is_cpu:
        from .patches.amp import cpu_amp_dtype

        cpu_amp_dtype()  # a bad TRANSFER_CPU_AMP_DTYPE raises here, before anything is patched
    runtime = cpu_runtime if profile.is_cpu else getattr(torch, profile.device_type)
    ctx = PatchContext(
        profile=profile,
        registry=registry,
        target=Target(profile.device_type, runtime.device_count),
        runtime=runtime,
        strict=strict,
    )
    try:
        conflicts.claim(registry, profile.name, __version__)  # a second copy of transfer, or transfer_to_npu: refuse
        apply_all(ctx)
        provide_packages(ctx)  # flash_attn, xformers, ... under their public names (transfer/dropins/)
        registry.check_disabled(AREAS + ("thirdparty",),  # every area has asked for its names by now
                                f"for the {profile.name} target on torch {torch.__version__}")
        if settings.log_directory():  # the per-call-site log (transfer/calllog.py)
            from .calllog import attach
            from .plan import planned

            ctx.log = attach(ctx, settings.log_directory(), planned())
        for area in DEFERRED:
            apply_area(ctx, area)
    except BaseException:
        registry.revert_all()
        raise
    finally:
        _forget_compiled_code()
    return ctx


def _forget_compiled_code() -> None:
    """Make torch.compile start afresh after the patches change.

    Dynamo resolves names such as "torch.zeros" once and caches the objects; a
    map built while other patches (or none) were in place would make it treat
    the functions now installed as unknown builtins, i.e. graph breaks. And
    code compiled before the change has the old translations baked in, with no
    guard on them: `torch._dynamo.reset()` drops it (it recompiles on next call).
    """
    import sys

    rules = sys.modules.get("torch._dynamo.trace_rules")
    if rules is not None:
        rules.clear_lru_cache()
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None and hasattr(dynamo, "reset"):
        dynamo.reset()


def uninstall() -> None:
    """Undo every patch: each attribute that still holds transfer's replacement gets
    back the identical original object. One patched again by someone else after
    transfer is left as it is, with a WARNING naming it (registry.py)."""
    global _active, _outcome, _plan
    import sys

    with _lock:
        compare = sys.modules.get(f"{__name__}.compare")
        if compare is not None:
            compare.stop()
        if _plan is not None:
            _plan, plan = None, _plan
            plan.registry.revert_all()
        if _active is not None:
            ctx, _active = _active, None
            try:
                ctx.registry.revert_all()
            finally:
                _unexport_choice()
                _forget_compiled_code()
        else:
            registry = sys.modules.get(f"{__name__}.registry")
            if registry is not None:  # what an earlier uninstall left behind, if it is ours again
                registry.revert_left_behind()
        _outcome = {"active": False, "reason": "uninstalled"}


def status() -> Dict[str, Any]:
    """What is active: target, backend, applied patches, translations seen."""
    with _lock:
        ctx = _active
        info: Dict[str, Any] = dict(_outcome)
        if ctx is None:
            watch = getattr(_plan, "fallbacks", None)
            if watch is not None:  # the rehearsal on CUDA: what would run on the CPU on the planned target
                info["fallbacks"] = watch.rows()
            return info
        from .devices import translations_table

        profile = ctx.profile
        info.update(
            device=profile.name,
            device_type=profile.device_type,
            backend=profile.backend,
            package=profile.package,
            patches=ctx.registry.names(),
            disabled=sorted(ctx.registry.disabled),
            environment=dict(ctx.env_changes),
            substitutions=dict(ctx.substitutions),
            translations=translations_table(ctx.target),
        )
        watch = getattr(ctx, "fallbacks", None)
        if watch is not None:  # patches/vendor_ops.py: operators the plug-in runs on the CPU
            info["fallbacks"] = watch.rows()
            if watch.status():
                info["fallbacks_note"] = watch.status()
        if getattr(ctx, "log", None) is not None:
            info["call_sites"] = list(ctx.log.records)
        return info


def report() -> str:
    """`status()` as text, one translation per line with its first call site."""
    info = status()
    if not info.get("active"):
        return f"transfer: inactive ({info.get('reason')})"
    lines = [
        f"transfer: CUDA -> {info['device_type']} ({info['device']}), nccl -> {info['backend']}, "
        f"{len(info['patches'])} patches" + (f", disabled: {', '.join(info['disabled'])}" if info["disabled"] else "")
    ]
    for name, value in info["environment"].items():
        lines.append(f"  env {name}={value}")
    for what, instead in info["substitutions"].items():
        lines.append(f"  {what} runs as {instead}")
    for row in info.get("fallbacks", ()):
        via = f" ({', '.join(row['apis'][:2])})" if row["apis"] else ""
        where = f"would run on the CPU on {row['plan']}" if row.get("plan") else "runs on the CPU"
        lines.append(f"  {row['op']}{via} {where}: {row['calls']} call(s), first at {row['first_site']} "
                     f"({row['why'].split(':')[0]})")
    if info.get("fallbacks_note"):
        lines.append(f"  {info['fallbacks_note']}")
    for row in info["translations"]:
        lines.append(f"  {row['api']}: {row['argument']} -> {row['to']}  (first at {row['first_site']})")
    for site in info.get("call_sites", ()):
        lines.append(f"  {site['site']}: {site['call']} -> {site['became']} [{site['class']}]")
    return "\n".join(lines)


def _say_once(message: str) -> None:
    """One line per job: rank 0 only, and not again in processes it starts.

    An INFO record of the 'transfer' logger. transfer adds no handler, sets no
    level and leaves ``propagate`` alone (library code; the logging HOWTO): where
    the application has configured logging (a handler on the way to the root),
    its configuration decides, and the line appears once, in its format. Where
    nothing is configured, logging would drop an INFO record (its last resort
    handles WARNING and above), so the banner goes to `logging.lastResort`
    (stderr, the message alone) itself, unless a level above INFO was set on
    the 'transfer' logger, `logging.disable` covers INFO, or
    ``logging.lastResort`` is None. transfer's warnings need nothing of the
    kind: the last resort shows them when nothing is configured.
    """
    from .settings import flag, is_rank_zero

    if flag("TRANSFER_QUIET") or os.environ.get("_TRANSFER_SAID") or not is_rank_zero():
        return
    os.environ["_TRANSFER_SAID"] = "1"
    if logger.hasHandlers():
        logger.info(message)
    elif (logging.lastResort is not None and not logger.disabled and logger.level <= logging.INFO
          and logger.manager.disable < logging.INFO):
        logging.lastResort.handle(logger.makeRecord(logger.name, logging.INFO, __file__, 0, message, None, None))


def _banner(ctx) -> None:
    """One short line per job: the target, what computes otherwise than on CUDA, where the detail is.

    What runs otherwise is always said (the bar: never silently); its long form, each translation
    (nccl -> gloo among them) and every call site are the detail, on request: TRANSFER_REPORT=FILE
    (JSON at exit, for a script left as it is), `transfer.report()`, TRANSFER_LOG=DIR.
    """
    profile = ctx.profile
    instead = "".join(f"; {what} runs as {how.split(' (')[0]}" for what, how in ctx.substitutions.items())
    from .settings import report_path

    path = report_path()
    detail = f"report at exit: {path}" if path else "details: TRANSFER_REPORT=FILE"
    _say_once(f"transfer: CUDA calls run on {profile.device_type} ({profile.vendor}){instead}; {detail}")
    if path:
        import atexit

        atexit.register(_write_report, path)


def _write_report(path: str) -> None:
    import json

    from .settings import report_file

    path = report_file(path)
    if path is None:  # torchrun's launcher: its ranks write theirs
        return
    try:
        with open(path, "w") as fh:
            json.dump(status(), fh, indent=2, default=str)
    except OSError as exc:  # checked at install (settings.py); the folder went away since: one line at exit
        import sys

        sys.stderr.write(f"transfer: TRANSFER_REPORT={path!r} could not be written at exit ({exc}); "
                         "set it to a file in a folder that exists until the program ends\n")
