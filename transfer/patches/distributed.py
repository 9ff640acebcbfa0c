"""init_process_group / new_group: 'nccl' -> the target's backend.

Accepted spellings: 'nccl' (any case, or dist.Backend.NCCL), None (for
init_process_group), 'cuda:nccl' and 'cpu:gloo,cuda:nccl'. device_id
arguments are translated; on the cpu target (gloo) they are checked and
dropped, since torch accepts only an accelerator there (Lightning passes
``device_id=cuda:N``).

For targets whose collectives need the device set before initialisation
(tccl, seed 000), the device is set from LOCAL_RANK (or the rank) when the
script has not set one yet, since many public examples call
init_process_group before torch.cuda.set_device. The rule sits in the
backend's registered creator, so it holds for every process group torch
creates: init_process_group, new_group, DeviceMesh/init_device_mesh (which
call torch's own functions) and frameworks.

torch >= 2.15 attaches a FlightRecorderHook to every group whose backends do
not record themselves (`_maybe_attach_flight_recorder`); the hook names the
group by its default backend. The real plug-ins' creators return a c10d
Backend (torch_npu: ProcessGroupHCCL), which torch records: left as torch does
it. A plug-in whose creator returns a ProcessGroup subclass (torch then uses
that object as the group, with no default backend) makes the hook raise
"Could not find the default backend type 0" and init_process_group fail: only
for such a group does transfer go on without the hook, and says so.
"""

from __future__ import annotations

import logging
import os
import weakref

import torch

logger = logging.getLogger("transfer")


def translate_backend(ctx, backend):
    """Map a CUDA backend spelling to the target's; anything else is unchanged."""
    target = ctx.profile.backend
    if backend is None:
        return target
    if not isinstance(backend, str):
        return backend
    text = backend.strip().lower()
    if text == "nccl":
        return target
    if ":" not in text:
        return backend
    pairs = []
    for part in text.split(","):
        device, _, name = part.partition(":")
        if device.strip() == "cuda":
            device, name = ctx.profile.device_type, (target if name.strip() == "nccl" else name)
        pair = f"{device.strip()}:{name.strip()}"
        if pair not in pairs:
            pairs.append(pair)
    if ctx.cpu is not None:
        return ctx.cpu.backend(pairs, target)
    return ",".join(pairs)


def apply(ctx) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    import torch.distributed.distributed_c10d as c10d

    translate_device = ctx.target.translator("init_process_group(device_id)")

    def device_id(value):
        translated = translate_device(value)  # checks the index against the device count
        return translated if ctx.cpu is None else ctx.cpu.device_id(translated)

    # The groups that stand for the script's NCCL groups (its 'nccl', or no backend, translated): what
    # patches/collectives.py holds to NCCL's rules. Weak: destroy_process_group lets them go.
    ctx.nccl_groups = weakref.WeakSet()

    def init_process_group(wrapped, instance, args, kwargs):
        asked = args[0] if args else kwargs.get("backend")
        if args:
            args = (translate_backend(ctx, args[0]),) + tuple(args[1:])
        else:
            kwargs["backend"] = translate_backend(ctx, kwargs.get("backend"))
        if kwargs.get("device_id") is not None:
            kwargs["device_id"] = device_id(kwargs["device_id"])
        if ctx.profile.set_device_before_init and not ctx.device_selected:
            _select_device_for_rank(ctx, kwargs.get("rank", args[4] if len(args) > 4 else -1))
        used = args[0] if args else kwargs.get("backend")
        try:
            result = wrapped(*args, **kwargs)
        except Exception as exc:
            # A misconfiguration (a wrong interface, an unreachable master) surfaces as the
            # backend's own error; say what transfer changed, since the user never wrote it.
            _explain(exc, ctx, asked, used)
            raise
        if used != asked:
            ctx.nccl_groups.add(c10d._get_default_group())
        return result

    def new_group(wrapped, instance, args, kwargs):
        asked = args[2] if len(args) > 2 else kwargs.get("backend")
        if len(args) > 2:
            if args[2] is not None:
                args = args[:2] + (translate_backend(ctx, args[2]),) + tuple(args[3:])
        elif kwargs.get("backend") is not None:
            kwargs["backend"] = translate_backend(ctx, kwargs["backend"])
        if kwargs.get("device_id") is not None:
            kwargs["device_id"] = device_id(kwargs["device_id"])
        group = wrapped(*args, **kwargs)
        used = args[2] if len(args) > 2 else kwargs.get("backend")
        inherits = asked is None and dist.is_initialized() and c10d._get_default_group() in ctx.nccl_groups
        if (inherits or used != asked) and isinstance(group, dist.ProcessGroup):
            ctx.nccl_groups.add(group)
        return group

    reg = ctx.registry
    for owner in (c10d, dist):  # both homes: libraries call either
        suffix = "" if owner is dist else ".c10d"
        reg.wrap("distributed.init_process_group" + suffix, owner, "init_process_group", init_process_group)
        reg.wrap("distributed.new_group" + suffix, owner, "new_group", new_group)
        reg.replace("distributed.is_nccl_available" + suffix, owner, "is_nccl_available", lambda: True)
    if ctx.profile.set_device_before_init and reg.enabled("distributed.set_device_before_init"):
        _device_before_creator(ctx, dist)
    if hasattr(c10d, "_maybe_attach_flight_recorder"):  # torch >= 2.15
        reg.wrap("distributed.flight_recorder", c10d, "_maybe_attach_flight_recorder", _flight_recorder(ctx))


def _flight_recorder(ctx):
    """torch's flight-recorder attachment, unless torch cannot attach it to the group (module docstring)."""
    import torch.distributed as dist

    said = set()

    def attach(wrapped, instance, args, kwargs):
        try:
            return wrapped(*args, **kwargs)
        except RuntimeError as exc:
            pg = args[0] if args else kwargs.get("pg")
            if pg is None or type(pg) is dist.ProcessGroup:
                raise  # a group torch built itself: torch's own failure, not transfer's to hide
            config = args[1] if len(args) > 1 else kwargs.get("backend_config")
            names = sorted(set(config.get_device_backend_map().values())) if config is not None else []
            backend = ",".join(str(n) for n in names) or type(pg).__name__
            if backend not in said:
                from ..settings import is_rank_zero

                said.add(backend)
                ctx.substitutions[f"flight recorder of {backend} groups"] = (
                    f"off (torch {torch.__version__} cannot attach it to a group the plug-in builds itself)")
                if not is_rank_zero():
                    return None
                logger.warning(
                    "transfer: torch %s cannot attach its flight recorder to %s process groups: the plug-in's "
                    "creator returns %s, a ProcessGroup subclass that torch uses as the group, with no default "
                    "backend (%s). They run without flight recording (as with TORCH_FR_BUFFER_SIZE=0); the "
                    "plug-ins that return a c10d Backend (torch_npu's ProcessGroupHCCL) keep it.",
                    torch.__version__, backend, type(pg).__name__, str(exc).strip().splitlines()[0])
            return None

    return attach


def _device_before_creator(ctx, dist) -> None:
    """Wrap the target backend's registered creator so the device is set first.

    torch calls the creator for every process group it builds, whichever API
    asked (DeviceMesh imports init_process_group and new_group by name, so
    wrapping the public functions alone misses it).
    """
    plugins = getattr(dist.Backend, "_plugins", None)
    key = ctx.profile.backend.upper()
    plugin = None if plugins is None else plugins.get(key)
    if plugin is None or not hasattr(plugin, "_replace"):
        return  # the vendor registers no Python creator here: the public wrappers cover it
    creator = plugin.creator_fn

    def creator_after_set_device(*args, **kwargs):
        if not ctx.device_selected:
            rank = dist.get_rank() if dist.is_initialized() else _creator_rank(args)
            _select_device_for_rank(ctx, rank)
        return creator(*args, **kwargs)

    creator_after_set_device.__name__ = getattr(creator, "__name__", "creator")
    creator_after_set_device.__wrapped__ = creator
    plugins[key] = plugin._replace(creator_fn=creator_after_set_device)

    def undo() -> None:
        if plugins.get(key) is not None and plugins[key].creator_fn is creator_after_set_device:
            plugins[key] = plugin

    ctx.registry.on_revert("distributed.set_device_before_init", undo)


def _creator_rank(args) -> int:
    """The rank a backend creator was called with: (store, rank, size, timeout) or (options, ...)."""
    if len(args) > 1 and isinstance(args[1], int):
        return args[1]
    return getattr(args[0], "group_rank", -1) if args else -1


def _explain(exc: BaseException, ctx, asked, used) -> None:
    """Attach to `exc` a note naming what transfer changed (on stderr where Python has no notes)."""
    changes = ", ".join(f"{k}={v}" for k, v in ctx.env_changes.items()) or "none"
    note = (f"transfer: init_process_group ran with backend {used!r} (the script asked for {asked!r}); "
            f"environment variables set by transfer: {changes}. "
            f"TRANSFER_DISABLE=distributed leaves init_process_group untranslated.")
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:  # Python < 3.11 has no exception notes: say it on stderr, just before the traceback
        logger.warning("%s", note)


def _select_device_for_rank(ctx, rank) -> None:
    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is not None and local_rank.isdigit():
        index = int(local_rank)
    elif isinstance(rank, int) and rank >= 0:
        index = rank % max(1, ctx.runtime.device_count())
    else:
        return
    logger.info("transfer: %s needs the device set before init_process_group; setting %s:%d",
                ctx.profile.backend, ctx.profile.device_type, index)
    ctx.runtime.set_device(index)
    ctx.device_selected = True
