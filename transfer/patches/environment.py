"""CUDA_* / NCCL_* / TORCH_NCCL_* variables -> the target's, each at the last moment it counts.

`transfer.envvars` classifies every variable (informational, not needed,
translated, built in, unsupported) and says when it takes effect; this area
applies that:

* visible devices (and CUDA_LAUNCH_BLOCKING): translated before the vendor
  plug-in is imported (`before_vendor_import`, called by the selection), since
  vendor runtimes read them when they start;
* collective variables: translated at install and again just before every
  process group is created (torch's ``_new_process_group_helper``, which
  init_process_group, new_group and DeviceMesh all go through), so a variable a
  script sets after ``import torch`` (legal on CUDA) still reaches the backend;
* a variable set or changed after its moment (devices: the plug-in's import;
  collectives: the first process group) gets one warning saying it came too
  late, at the next process-group creation or at exit;
* unsupported variables are named in one warning (rank 0; an error under
  TRANSFER_STRICT, except a value a launcher sets by default), not again by the
  processes that process starts (a launcher's transfer names them, its ranks
  do not repeat it: SAID_ENV); informational ones never are.

A variable the user already set for the target wins. A value a parent
process's transfer set (torchrun's launcher, mp.spawn's parent) is in effect
here too and is reported as such. Every change is undone on uninstall.
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import Callable, Dict, Optional, Set

from .. import envvars
from ..settings import is_rank_zero
from ..errors import TransferError

logger = logging.getLogger("transfer")


def before_vendor_import(registry, profile) -> Callable[[], None]:
    """Translate the variables a vendor runtime reads when it starts (CUDA_VISIBLE_DEVICES,
    CUDA_LAUNCH_BLOCKING) if the user has not set the vendor's own; return the undo."""
    if not registry.enabled("environment.visible_devices"):
        return lambda: None
    done = {}
    for name in envvars._DEVICE_VARIABLES:
        value = os.environ.get(name)
        verdict = envvars.classify(profile, name)
        if value is None or verdict.cls != envvars.TRANSLATED or verdict.target in os.environ:
            continue
        os.environ[verdict.target] = done[verdict.target] = _convert(profile, name, value)

    def undo():
        for target, value in done.items():
            if os.environ.get(target) == value:
                del os.environ[target]

    registry.on_revert("environment.visible_devices", undo)
    return undo


def _convert(profile, name: str, value: str) -> str:
    return profile.env[name].convert(value) if name in profile.env else value


class Environment:
    """This process's translations: what transfer set, and what each moment saw."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.profile = ctx.profile
        self.ours: Dict[str, str] = {}  # target variable -> the value transfer (here or in a parent) gave it
        self.set_here: Set[str] = set()  # ... of which this process set these
        self.seen: Dict[str, Dict[str, Optional[str]]] = {}  # moment -> {variable: value when it passed}
        self.late: Set[str] = set()  # variables already said to be too late
        self.unsupported: Set[str] = set()  # already named in a warning
        self.said_before = os.environ.get(SAID_ENV)  # restored on uninstall

    # ------------------------------------------------------------------ sync
    def sync(self, passing: Optional[str] = None, strict_errors: bool = False) -> None:
        """Translate what is set now; warn about what came too late; `passing`: a moment ends now."""
        current = dict(envvars.environ_items())
        self._too_late(current)
        unsupported = []
        for name, value in current.items():
            verdict = envvars.classify(self.profile, name)
            if verdict.cls == envvars.UNSUPPORTED:
                unsupported.append(name)
            elif verdict.cls == envvars.TRANSLATED and verdict.moment == envvars.COLLECTIVES:
                self._translate(name, value, verdict.target, strict_errors)
            elif verdict.cls == envvars.TRANSLATED and verdict.target in os.environ:
                if os.environ[verdict.target] == _convert(self.profile, name, value):
                    self.ctx.env_changes[verdict.target] = os.environ[verdict.target]  # set before the import
        self._forget_removed(current)
        self._warn_unsupported(unsupported, current)
        if passing is not None and passing not in self.seen:
            self.seen[passing] = {n: v for n, v in current.items() if envvars.moment(n) == passing}

    def _translate(self, name: str, value: str, target: str, strict_errors: bool) -> None:
        try:
            converted = _convert(self.profile, name, value)
        except ValueError as exc:
            if target in os.environ and os.environ[target] != self.ours.get(target):
                return  # the user's own setting for the target: nothing to convert
            if strict_errors:  # a process group is about to be created with it
                raise TransferError(f"{exc}. Set {name} to an interface of this host, or set {target} "
                                    f"yourself (transfer leaves it alone then).") from None
            self.ctx.warn_once(name, f"{name} cannot be given to {self.profile.backend} as {target}: {exc}; "
                                     f"a process group created with it fails")
            return
        present = os.environ.get(target)
        if present is not None and present != self.ours.get(target):
            if present == converted:
                self.ours[target] = present  # set by transfer in a parent process: in effect here too
                self.ctx.env_changes[target] = present
            return  # otherwise the user's own value for the target wins
        if present != converted:
            os.environ[target] = converted
            self.set_here.add(target)
        self.ours[target] = converted
        self.ctx.env_changes[target] = converted

    def _forget_removed(self, current: Dict[str, str]) -> None:
        """A variable the script removed takes its translation with it."""
        for name, rename in self.profile.env.items():
            target = rename.target
            if name in current or target is None or target not in self.ours:
                continue
            if os.environ.get(target) == self.ours[target] and target in self.set_here:
                del os.environ[target]
            self.ours.pop(target)
            self.ctx.env_changes.pop(target, None)

    def _warn_unsupported(self, names, current: Dict[str, str]) -> None:
        said = _said_by_parent()  # a launcher's transfer (torchrun, accelerate) named them already
        new = [n for n in names if n not in self.unsupported and n not in said]
        if not new or not is_rank_zero():
            return
        self.unsupported.update(new)
        if not self.ctx.strict:  # the processes this one starts see the same variables: one warning per job
            os.environ[SAID_ENV] = ",".join(sorted(said | set(new)))
        launcher = [n for n in new if _launcher_default(n, current[n])]
        new = [n for n in new if n not in launcher]
        devices = [n for n in new if envvars.moment(n) == envvars.DEVICES]
        groups = ((devices, f"on the {self.profile.name} target"),
                  ([n for n in new if n not in devices], f"for {self.profile.backend}"))
        for group, where in groups:
            if group:
                self.ctx.warn_once(f"environment:{','.join(group)}", self._unsupported_message(group, where))
        if launcher:  # not the user's setting: said, never an error
            logger.warning("%s (the launcher's default, set for every worker)",
                           self._unsupported_message(launcher, f"for {self.profile.backend}"))

    def _unsupported_message(self, names, where: str) -> str:
        generic = f"no known equivalent for {self.profile.backend}"
        reasons = sorted({envvars.classify(self.profile, n).reason for n in names} - {generic})
        return "transfer: " + envvars.warning_for_unsupported(names, where) + (
            f" ({'; '.join(reasons)})" if reasons else "")

    # ------------------------------------------------------------ too late
    def _too_late(self, current: Dict[str, str]) -> None:
        for passed, then in self.seen.items():
            names = {n for n in current if envvars.moment(n) == passed} | set(then)
            for name in sorted(names - self.late):
                if current.get(name) == then.get(name):
                    continue
                verdict = envvars.classify(self.profile, name)
                if verdict.cls in (envvars.INFORMATIONAL, envvars.NOT_NEEDED, envvars.BUILT_IN):
                    continue
                if verdict.target is not None and self._users_own(name, verdict.target, then.get(name)):
                    continue  # the user's own setting of the target's variable decides, as before
                self.late.add(name)
                if is_rank_zero():
                    logger.warning("transfer: %s", _late_message(self.profile, name, then.get(name), current.get(name),
                                                                passed))

    def _users_own(self, name: str, target: str, before: Optional[str]) -> bool:
        present = os.environ.get(target)
        if present is None or present == self.ours.get(target):
            return False
        try:
            return before is None or present != _convert(self.profile, name, before)
        except ValueError:
            return True

    def at_exit(self) -> None:
        self._too_late(dict(envvars.environ_items()))

    def undo(self) -> None:
        if self.said_before is None:
            os.environ.pop(SAID_ENV, None)
        else:
            os.environ[SAID_ENV] = self.said_before
        for target in self.set_here:
            if os.environ.get(target) == self.ours.get(target):
                del os.environ[target]


def _late_message(profile, name: str, before: Optional[str], now: Optional[str], passed: str) -> str:
    change = f"set to {now!r}" if before is None else ("removed" if now is None else f"changed to {now!r}")
    if passed == envvars.DEVICES:
        when = (f"after {profile.package} was imported: transfer translates the visible devices before it imports "
                f"the plug-in, at install, and not again (on CUDA it counts until the first CUDA call). Set it "
                f"before the process starts (or before `import torch`)")
    else:
        when = ("after the first process group was created; groups created before keep what they were created "
                "with (NCCL reads it once per process as well). Set it before init_process_group")
    return f"{name} was {change} {when}."


#: Unsupported variables a process named in its warning, for the processes it starts (torchrun's or
#: accelerate's launcher, then rank 0): they inherit the same variables and do not name them again; a
#: launcher's default (TORCH_NCCL_ASYNC_ERROR_HANDLING=1) the user had set is then not called the launcher's.
SAID_ENV = "_TRANSFER_ENV_SAID"


def _said_by_parent() -> Set[str]:
    return {n for n in os.environ.get(SAID_ENV, "").split(",") if n}


def _launcher_default(name: str, value: str) -> bool:
    return envvars.LAUNCHER_DEFAULTS.get(name) == value and "TORCHELASTIC_RUN_ID" in os.environ


def apply(ctx) -> None:
    env = Environment(ctx)
    if not ctx.registry.enabled("environment.variables"):
        return
    env.sync()
    if not ctx.profile.is_cpu:
        env.seen[envvars.DEVICES] = {n: os.environ.get(n) for n in envvars._DEVICE_VARIABLES
                                     if os.environ.get(n) is not None}  # the plug-in is imported: it has read them
    _before_process_groups(ctx, env)
    atexit.register(env.at_exit)

    def undo() -> None:
        atexit.unregister(env.at_exit)
        env.undo()

    ctx.registry.on_revert("environment.variables", undo)


def _before_process_groups(ctx, env: Environment) -> None:
    """Sync just before torch creates any process group (and seal the collective moment after the first)."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch without distributed
        return
    if not dist.is_available():
        return
    import torch.distributed.distributed_c10d as c10d

    if not hasattr(c10d, "_new_process_group_helper"):  # every torch 2.x has it; otherwise install time only
        return

    def new_process_group(wrapped, instance, args, kwargs):
        env.sync(strict_errors=True)
        try:
            return wrapped(*args, **kwargs)
        finally:
            env.sync(passing=envvars.COLLECTIVES)

    ctx.registry.wrap("environment.process_group", c10d, "_new_process_group_helper", new_process_group)
