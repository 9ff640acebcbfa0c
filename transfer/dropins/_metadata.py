"""importlib.metadata distributions for the packages transfer provides.

Loaded only when a program asks importlib.metadata (which is then imported
already). A provided package presents METADATA (Name, Version, Summary) and
``top_level.txt``, so ``importlib.metadata.version('flash-attn')`` and
``packages_distributions()['flash_attn']`` answer as for an installed wheel;
it has no RECORD (``files`` is None) and no entry points. Refused packages
(no ``home``) present no distribution.
"""

from __future__ import annotations

import os
import re
from importlib.metadata import Distribution, DistributionFinder


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


class ProvidedDistribution(Distribution):
    """One distribution; several packages may share it (apex's wheel installs apex and amp_C)."""

    def __init__(self, package, folder: str, top_level=()):
        self._package = package
        self._folder = folder
        self._top_level = list(top_level) or [package.name]

    def read_text(self, filename):
        package = self._package
        if filename == "METADATA":
            return (f"Metadata-Version: 2.1\nName: {package.distribution}\nVersion: {package.version}\n"
                    f"Summary: {package.summary}\n")
        if filename == "top_level.txt":
            return "".join(name + "\n" for name in self._top_level)
        if filename == "INSTALLER":
            return "transfer\n"
        return None

    def locate_file(self, path):
        return os.path.join(self._folder, str(path))


def distributions(finder, context=None):
    name = getattr(context, "name", None) if context is not None else None
    wanted = _normal(name) if name else None
    by_distribution = {}  # normalized distribution name -> its served packages, first one's metadata
    for package in list(finder.packages.values()):
        if package.home is None or (wanted is not None and _normal(package.distribution) != wanted):
            continue
        if finder.serves(package.name) is None:
            continue
        by_distribution.setdefault(_normal(package.distribution), []).append(package)
    folder = os.path.dirname(os.path.abspath(__file__))
    return iter([ProvidedDistribution(packages[0], folder, [p.name for p in packages])
                 for packages in by_distribution.values()])


__all__ = ["DistributionFinder", "ProvidedDistribution", "distributions"]
