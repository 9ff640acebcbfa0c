"""The TRANSFER_* variables: each declared once (`SETTINGS`), read and checked here.

Layers: this module holds transfer's own settings; `transfer.envvars` the CUDA /
NCCL variables a script brings along (what each means on each target). The
start-up gate keeps one raw lookup of TRANSFER_DEVICE where the cost of an
import counts: ``transfer.torch_backend_entry_point`` (every ``import torch``),
`transfer._autoload`, ``bootstrap/sitecustomize.py`` and the ``transfer.pth``
line; past the gate every read goes through here. Importing this module imports
neither torch nor any other part of transfer.

Yes/no settings (`flag`) take the spellings of the usual tools (pip, setuptools,
Git config):

* unset, empty, ``0``, ``false``, ``no``, ``off``: off;
* ``1``, ``true``, ``yes``, ``on``: on;

case and surrounding spaces ignored. Anything else raises `TransferError`
naming the variable, the value, the closest spelling and both lists:
``TRANSFER_QUIET=0`` means "not quiet", and a typo such as
``TRANSFER_STRICT=ture`` is an error rather than a guess.

`check_environment` checks every value that can be wrong before `transfer.install`
patches anything (a bad value stops the install and leaves torch untouched), each
error one line naming the variable, the value, the closest choice where there are
choices, and the fix: the yes/no settings; TRANSFER_LOG (a directory transfer can
create and write: a file there, or /proc/x, used to break ``import torch`` with
torch's backend-autoload message); TRANSFER_REPORT (its folder must exist: the
report is written at exit, too late to say so); TRANSFER_PLAN (a target, with
TRANSFER_LOG); TRANSFER_CPU_DEVICES (a positive integer); TRANSFER_COMPARE (the accuracy mode's
value, `transfer.compare.options.parse`). Checked where they are
read: TRANSFER_DEVICE (`selection.requested`, with the closest target),
TRANSFER_DISABLE (`Registry.check_disabled`, with the closest name),
TRANSFER_CPU_AMP_DTYPE (`patches.amp.cpu_amp_dtype`, which needs torch). A
TRANSFER_* variable that is no setting but close to one (TRANSFER_DEVCE) gets a
warning naming the setting it likely means (`misspelled_names`).
"""

from __future__ import annotations

import os
import sys
from typing import List, Mapping, NamedTuple, Optional, Tuple


class Setting(NamedTuple):
    """One TRANSFER_* variable."""

    name: str
    kind: str  # FLAG, CHOICE, PATH, COUNT or NAMES
    meaning: str  # what it sets, in a few words


FLAG, CHOICE, PATH, COUNT, NAMES = "yes/no", "choice", "path", "count", "names"

#: Every TRANSFER_* variable transfer reads, one row each.
SETTINGS: Tuple[Setting, ...] = (
    Setting("TRANSFER_DEVICE", CHOICE, "the target: auto, off, cpu or an accelerator's profile name "
            "(transfer/profiles.py; README's table of targets)"),
    Setting("TRANSFER_DISABLE", NAMES, "areas or patches left alone (comma-separated)"),
    Setting("TRANSFER_STRICT", FLAG, "an unsupported CUDA call raises instead of warning once"),
    Setting("TRANSFER_QUIET", FLAG, "no start-up banner"),
    Setting("TRANSFER_NO_FASTCALLS", FLAG, "the Python call wrappers instead of their C stand-ins"),
    Setting("TRANSFER_LOG", PATH, "a directory for the per-call-site log"),
    Setting("TRANSFER_PLAN", CHOICE, "the rehearsal's planned target (with TRANSFER_LOG)"),
    Setting("TRANSFER_REPORT", PATH, "a JSON report written at exit ({pid}, {rank} expanded)"),
    Setting("TRANSFER_CPU_DEVICES", COUNT, "the cpu target's number of virtual devices"),
    Setting("TRANSFER_CPU_AMP_DTYPE", CHOICE, "what CUDA's float16 autocast runs as on the cpu target"),
    Setting("TRANSFER_COMPARE", CHOICE, "the accuracy mode: nonfinite, shadow, record:FILE or against:FILE"),
)
NAMES_OF_SETTINGS = tuple(s.name for s in SETTINGS)

TRUE = ("1", "true", "yes", "on")
FALSE = ("", "0", "false", "no", "off")


def _environ(environ: Optional[Mapping[str, str]]) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def value(name: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """The setting `name` as written, surrounding spaces removed ("" when unset)."""
    assert name in NAMES_OF_SETTINGS, name  # a new variable is a row of SETTINGS first
    return _environ(environ).get(name, "").strip()


def closest(word: str, choices, cutoff: float = 0.6) -> Optional[str]:
    """The choice `word` most likely misspells, or None."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return close[0] if close else None


def did_you_mean(word: str, choices, cutoff: float = 0.6) -> str:
    """`` Did you mean 'x'?`` for the closest choice, or ""."""
    close = closest(word, choices, cutoff)
    return f" Did you mean {close!r}?" if close else ""


def flag(name: str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """The value of the yes/no setting `name` (in `environ`, default os.environ)."""
    raw = _environ(environ).get(name)
    word = "" if raw is None else raw.strip().lower()
    if word in TRUE:
        return True
    if word in FALSE:
        return False
    from .errors import TransferError

    raise TransferError(
        f"{name}={raw!r} is not a yes/no value.{did_you_mean(word, TRUE + FALSE[1:])} Use one of {', '.join(TRUE)} "
        f"to turn it on, or one of {', '.join(v for v in FALSE if v)} (or leave it empty or unset) to turn it off."
    )


def disabled(environ: Optional[Mapping[str, str]] = None) -> List[str]:
    """TRANSFER_DISABLE's names, as written (the registry checks them against the areas and patches)."""
    return _environ(environ).get("TRANSFER_DISABLE", "").split(",")


def log_directory(environ: Optional[Mapping[str, str]] = None) -> str:
    """TRANSFER_LOG ("" when unset)."""
    return value("TRANSFER_LOG", environ)


def report_path(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """TRANSFER_REPORT as written, None when unset."""
    return _environ(environ).get("TRANSFER_REPORT")


def report_file(path: str) -> Optional[str]:
    """This process's file of TRANSFER_REPORT `path`: {pid} and {rank} expanded (RANK, 0 without one). None in
    torchrun's launcher (an elastic agent, no RANK of its own) when `path` names {rank}: its workers write theirs,
    and the launcher, exiting last, would overwrite rank 0's report with its own."""
    if "{rank}" in path and "RANK" not in os.environ \
            and "torch.distributed.elastic.agent.server.api" in sys.modules:
        return None
    return path.replace("{pid}", str(os.getpid())).replace("{rank}", os.environ.get("RANK", "0"))


def plan_name(environ: Optional[Mapping[str, str]] = None) -> str:
    """TRANSFER_PLAN, lower case ("" when unset)."""
    return value("TRANSFER_PLAN", environ).lower()


def cpu_devices(environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """TRANSFER_CPU_DEVICES as a count, None when unset (or not a count: `check_environment` refuses it)."""
    raw = value("TRANSFER_CPU_DEVICES", environ)
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def cpu_amp_dtype_name(environ: Optional[Mapping[str, str]] = None) -> Tuple[str, str]:
    """(TRANSFER_CPU_AMP_DTYPE as written, its lower-case name or "bfloat16" when unset)."""
    raw = _environ(environ).get("TRANSFER_CPU_AMP_DTYPE", "")
    return raw, raw.strip().lower() or "bfloat16"


def is_rank_zero() -> bool:
    """Whether this process says a job's one-time messages: RANK (set by launchers) is unset or 0."""
    return os.environ.get("RANK", "0") == "0"


def misspelled_names(environ: Optional[Mapping[str, str]] = None) -> List[Tuple[str, str]]:
    """(name, the setting it likely means) for each TRANSFER_* variable that is no setting but close to one."""
    found = []
    for name in _environ(environ):
        if name.startswith("TRANSFER_") and name not in NAMES_OF_SETTINGS:
            close = closest(name, NAMES_OF_SETTINGS, cutoff=0.8)
            if close is not None:
                found.append((name, close))
    return sorted(found)


def check_environment(environ: Optional[Mapping[str, str]] = None) -> None:
    """Raise `TransferError` for the first TRANSFER_* value that cannot work (module docstring);
    warn once for each variable that misspells a setting's name."""
    from .errors import TransferError

    env = _environ(environ)
    for setting in SETTINGS:
        if setting.kind == FLAG:
            flag(setting.name, env)
    log = log_directory(env)
    if log:
        _check_log_directory(log)
    report = value("TRANSFER_REPORT", env)
    if report:
        _check_report_path(report)
    plan = value("TRANSFER_PLAN", env)
    if plan:
        from .profiles import PROFILES

        if plan.lower() not in PROFILES:
            raise TransferError(f"TRANSFER_PLAN={plan!r} is not a target.{did_you_mean(plan.lower(), PROFILES)} "
                                f"Use one of {', '.join(PROFILES)}, or unset it")
        if not log:
            raise TransferError(f"TRANSFER_PLAN={plan!r} writes its findings to the call-site log: set "
                                "TRANSFER_LOG=DIR too (transfer-run --plan {0} --log DIR), or unset "
                                "TRANSFER_PLAN".format(plan.lower()))
    compare = value("TRANSFER_COMPARE", env)
    if compare:  # the accuracy mode's grammar and files (transfer/compare/options.py)
        from .compare.options import parse

        parse(compare)
    devices = env.get("TRANSFER_CPU_DEVICES")
    if devices is not None and devices.strip() and cpu_devices(env) is None:
        raise TransferError(f"TRANSFER_CPU_DEVICES={devices!r} is not a device count: set a whole number "
                            "from 1 up (the cpu target's virtual devices), or unset it for the default")
    warn_misspelled_names(env)


_warned_names: set = set()


def warn_misspelled_names(environ: Optional[Mapping[str, str]] = None) -> None:
    """One warning per misspelled TRANSFER_* name per process (`misspelled_names`)."""
    import logging

    for name, meant in misspelled_names(environ):
        if name not in _warned_names:
            _warned_names.add(name)
            logging.getLogger("transfer").warning(
                "%s is not a transfer setting and is ignored; did you mean %s? (the settings: %s)",
                name, meant, ", ".join(NAMES_OF_SETTINGS))


def _check_log_directory(path: str) -> None:
    """TRANSFER_LOG must name a directory transfer can create and write (it is created here)."""
    from .errors import TransferError

    fix = "set it to a directory you can write (created if missing), or unset it"
    if os.path.exists(path) and not os.path.isdir(path):
        raise TransferError(f"TRANSFER_LOG={path!r} is a file, not a directory: the log writes one file per rank "
                            f"in a directory; {fix}")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise TransferError(f"TRANSFER_LOG={path!r}: cannot create the log directory ({exc.strerror or exc}); "
                            f"{fix}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise TransferError(f"TRANSFER_LOG={path!r}: the directory is not writable; {fix}")


def _check_report_path(path: str) -> None:
    """TRANSFER_REPORT's folder must exist and be writable now: the report is written at exit."""
    from .errors import TransferError

    concrete = path.replace("{pid}", str(os.getpid())).replace("{rank}", os.environ.get("RANK", "0"))  # as a rank's
    folder = os.path.dirname(os.path.abspath(concrete))
    fix = "set it to a file in an existing folder you can write (e.g. /tmp/report-{rank}.json), or unset it"
    if os.path.isdir(concrete):
        raise TransferError(f"TRANSFER_REPORT={path!r} is a directory; the report is one JSON file: {fix}")
    if not os.path.isdir(folder):
        raise TransferError(f"TRANSFER_REPORT={path!r}: the folder {folder} does not exist; {fix}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise TransferError(f"TRANSFER_REPORT={path!r}: the folder {folder} is not writable; {fix}")
