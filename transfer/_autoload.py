"""torch's backend autoload entry point (group ``torch.backends``).

``import torch`` calls `activate` near the end of its own import. It costs one
environment lookup unless TRANSFER_DEVICE is set, so a process that never sets
it, or never imports torch, is unaffected.
"""

import os


def activate() -> None:
    if not os.environ.get("TRANSFER_DEVICE", "").strip():
        return
    from . import install

    install()
