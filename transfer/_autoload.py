"""torch's backend autoload entry point (group ``torch.backends``).

``import torch`` calls `activate` near the end of its own import. It costs one
environment lookup unless TRANSFER_DEVICE is set, so a process that never sets
it, or never imports torch, is unaffected.
"""

import os


def activate() -> None:
    if not os.environ.get("TRANSFER_DEVICE", "").strip():
        return
    install_or_exit()


def install_or_exit() -> None:
    """install(), turning a configuration error into a one-line exit message.

    The environment asked for transfer, so running without it would be wrong;
    a SystemExit passes torch's `except Exception` around entry points and
    prints just the message, not a traceback through torch's import.
    """
    from . import install
    from .errors import TransferError

    try:
        install()
    except TransferError as exc:
        raise SystemExit(f"transfer: {exc}") from None
