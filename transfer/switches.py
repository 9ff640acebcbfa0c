"""The TRANSFER_* variables: the yes/no switches read in one place, and every value checked at install.

`flag` is the one reader of every boolean variable (TRANSFER_QUIET,
TRANSFER_STRICT, TRANSFER_NO_FASTCALLS). The spellings are those of the usual tools (pip,
setuptools, Git config):

* unset, empty, ``0``, ``false``, ``no``, ``off``: off;
* ``1``, ``true``, ``yes``, ``on``: on;

case and surrounding spaces ignored. Anything else raises `TransferError`
naming the variable, the value and both lists: ``TRANSFER_QUIET=0`` means
"not quiet", and a typo such as ``TRANSFER_STRICT=ture`` is an error rather
than a guess. `transfer.install` reads the switches before it patches
anything, so a bad value stops the install and leaves torch untouched.

`check_environment` is that check for every variable whose value can be wrong
(the audit of issue 24 item 3), each error one line naming the variable, the
value and the fix: the switches; TRANSFER_LOG (a directory transfer can
create and write: a file there, or /proc/x, used to break ``import torch``
with torch's backend-autoload message); TRANSFER_REPORT (its folder must
exist: the report is written at exit, too late to say so); TRANSFER_PLAN (a
target, with TRANSFER_LOG); TRANSFER_COMPARE (the accuracy mode's value, `transfer.compare.settings`);
TRANSFER_CPU_DEVICES (a positive integer; other
values used to be ignored). Checked where they are read: TRANSFER_DEVICE
(`selection.requested`, with the closest target), TRANSFER_DISABLE
(`Registry.check_disabled`), TRANSFER_CPU_AMP_DTYPE (`patches.amp.cpu_amp_dtype`,
which needs torch).
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

from .errors import TransferError

BOOLEANS = ("TRANSFER_QUIET", "TRANSFER_STRICT", "TRANSFER_NO_FASTCALLS")
TRUE = ("1", "true", "yes", "on")
FALSE = ("", "0", "false", "no", "off")


def flag(name: str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """The value of the boolean switch `name` (in `environ`, default os.environ)."""
    raw = (os.environ if environ is None else environ).get(name)
    value = "" if raw is None else raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise TransferError(
        f"{name}={raw!r} is not a yes/no value. Use one of {', '.join(TRUE)} to turn it on, "
        f"or one of {', '.join(v for v in FALSE if v)} (or leave it empty or unset) to turn it off."
    )


def check_environment(environ: Optional[Mapping[str, str]] = None) -> None:
    """Raise `TransferError` for the first TRANSFER_* value that cannot work (module docstring)."""
    env = os.environ if environ is None else environ
    for name in BOOLEANS:
        flag(name, env)
    log = env.get("TRANSFER_LOG", "").strip()
    if log:
        _check_log_directory(log)
    report = env.get("TRANSFER_REPORT", "").strip()
    if report:
        _check_report_path(report)
    plan = env.get("TRANSFER_PLAN", "").strip()
    if plan:
        from .profiles import PROFILES

        if plan.lower() not in PROFILES:
            raise TransferError(f"TRANSFER_PLAN={plan!r} is not a target: use one of {', '.join(PROFILES)}, "
                                "or unset it")
        if not log:
            raise TransferError(f"TRANSFER_PLAN={plan!r} writes its findings to the call-site log: set "
                                "TRANSFER_LOG=DIR too (transfer-run --plan {0} --log DIR), or unset "
                                "TRANSFER_PLAN".format(plan.lower()))
    compare = env.get("TRANSFER_COMPARE", "").strip()
    if compare:  # the accuracy mode's value (transfer/compare/settings.py)
        from .compare.settings import parse

        parse(compare)
    devices = env.get("TRANSFER_CPU_DEVICES")
    if devices is not None and devices.strip() and not (devices.strip().isdigit() and int(devices) > 0):
        raise TransferError(f"TRANSFER_CPU_DEVICES={devices!r} is not a device count: set a whole number "
                            "from 1 up (the cpu target's virtual devices), or unset it for the default")


def _check_log_directory(path: str) -> None:
    """TRANSFER_LOG must name a directory transfer can create and write (it is created here)."""
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
    concrete = path.replace("{pid}", str(os.getpid())).replace("{rank}", os.environ.get("RANK", "0"))
    folder = os.path.dirname(os.path.abspath(concrete))
    fix = "set it to a file in an existing folder you can write (e.g. /tmp/report-{rank}.json), or unset it"
    if os.path.isdir(concrete):
        raise TransferError(f"TRANSFER_REPORT={path!r} is a directory; the report is one JSON file: {fix}")
    if not os.path.isdir(folder):
        raise TransferError(f"TRANSFER_REPORT={path!r}: the folder {folder} does not exist; {fix}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise TransferError(f"TRANSFER_REPORT={path!r}: the folder {folder} is not writable; {fix}")
