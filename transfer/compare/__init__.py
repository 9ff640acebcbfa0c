"""The accuracy mode: where does this run stop computing what CUDA computes (docs/accuracy.md).

Switched on by ``TRANSFER_COMPARE=MODE[:OPTIONS]`` (or ``transfer-run --compare MODE[:OPTIONS]``), read
at install (`transfer.install` calls `from_environment` once the target is ready; on a real CUDA machine
too, where ``record:FILE`` writes the reference). Modes (`settings`): ``nonfinite`` (`nonfinite.py`),
``shadow`` (`shadow.py`), ``record:FILE`` / ``against:FILE`` (`digest.py`); what each operation is and
where it comes from: `session.py`; what runs per operation (in C where built): `watch.py`; the cheap level
that runs instead in the steps not watched operation by operation (module outputs, gradients, the
optimizer's results) and its replays: `sentinels.py`, `replay.py`; the report: `report.py`.

The run itself is untouched: the operations run as they would, on the script's tensors; the checks read
them or work on copies, never draw random numbers, and never synchronise per operation. torch.compile:
while the mode is on, compiled regions run eagerly (dynamo is disabled; a note in the report, and the
summary line says so when a torch.compile'd module ran), so that every operation is seen and checked; the
run then computes what eager mode computes.

Importing this package does not import torch.
"""

from __future__ import annotations

import sys
from typing import Optional

from .options import Settings, parse

__all__ = ["parse", "start", "stop", "active", "from_environment", "Settings"]

_session = None


def active():
    """The running session, or None."""
    return _session


def from_environment(device: str) -> None:
    """Start the mode when TRANSFER_COMPARE is set (validated at install by `transfer.settings.check_environment`)."""
    from .. import settings as transfer_settings

    value = transfer_settings.value("TRANSFER_COMPARE")
    if value and _session is None:
        start(parse(value), device)


def start(settings: Settings, device: str = "cpu", python: bool = False):
    """Start checking this process's operations; the summary line is printed at `stop` or at exit.
    `python`: the Python watch even where the C one is built (`watch.py`)."""
    global _session
    import atexit

    from .report import Report
    from .session import Session

    if _session is not None:
        stop()
    report = Report(settings, device)
    if settings.mode == "nonfinite":
        from .nonfinite import NonFinite

        checker = NonFinite(report)
    elif settings.mode == "shadow":
        from .shadow import Shadow

        checker = Shadow(report, settings)
    else:
        from .digest import Digests

        checker = Digests(report, settings)
    session = Session(settings, checker, report, python, device)
    checker.session = session
    _run_compiled_regions_eagerly(session)
    session.start()
    _session = session
    if not getattr(start, "_registered", False):
        atexit.register(stop)
        start._registered = True
    return session


def stop() -> Optional[str]:
    """Stop checking, write the report's end and print the summary line (stderr); returns it."""
    global _session
    session, _session = _session, None
    if session is None:
        return None
    session.stop()
    if session.restore is not None:
        session.restore()
    line = session.report.close(session.step + 1)
    if line is not None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    return line


def _run_compiled_regions_eagerly(session) -> None:
    session.restore = None
    try:
        import torch._dynamo.config as config
    except Exception:  # no dynamo on this torch: nothing is compiled
        return
    if getattr(config, "disable", None) is None or config.disable:
        return
    config.disable = True
    session.report.note("torch.compile regions run eagerly while the mode is on (every operation checked)",
                        summary=False)

    def restore():
        config.disable = False

    session.restore = restore
