"""Clean interpreter exit after a distributed job.

Placeholder until measured; see CHANGELOG.
"""

from __future__ import annotations


def apply(ctx) -> None:
    return None
