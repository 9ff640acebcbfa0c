"""``from transfer import auto as _``: activate transfer when imported.

The target comes from TRANSFER_DEVICE, defaulting to 'auto'.
"""

from . import install

status = install()
