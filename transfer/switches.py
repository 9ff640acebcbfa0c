"""The yes/no TRANSFER_* switches, read in one place.

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
