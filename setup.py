"""Build hook: ship ``transfer.pth`` at the top of site-packages.

Python runs the ``import`` line of every ``.pth`` file in site-packages at
start-up (the `site` module). transfer's line costs one environment lookup
while TRANSFER_DEVICE is unset; when it is set, it arms activation on
``import torch`` (transfer/_autoload.py), which is how TRANSFER_DEVICE works
on torch < 2.5 (no backend autoload) and with TORCH_DEVICE_BACKEND_AUTOLOAD=0.
Same pattern as coverage.py's process_startup and pytest-cov's .pth.
Also the optional C extensions transfer._fastcalls (the hot frames of the call wrappers, see
transfer/fastcalls.py) and transfer.compare._watch (the accuracy mode's per-operation path, see
transfer/compare/watch.py): one build against Python 3.8's limited API serves Python 3.8-3.12
(an abi3 wheel, setup.cfg's [bdist_wheel]); where one cannot be compiled the install goes on
without it and its Python twin runs.
Everything else is declared in setup.cfg.
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

PTH = "transfer.pth"


class build_py_with_pth(build_py):
    """build_py that also places ./transfer.pth at the root of the build (wheel) tree.

    The file lives beside setup.py, not in the package: inside site-packages/transfer/ it would be
    inert, so it is build input only, copied to the top of site-packages."""

    def run(self):
        super().run()
        self.copy_file(PTH, os.path.join(self._root(), PTH), preserve_mode=0)

    def _root(self):
        if getattr(self, "editable_mode", False):
            # `pip install -e .`: setuptools' editable_wheel points install_lib at the
            # editable wheel it is assembling; what is written there is installed as is.
            return self.get_finalized_command("install").install_lib
        return self.build_lib

    def get_outputs(self, include_bytecode=True):
        return list(super().get_outputs(include_bytecode)) + [os.path.join(self._root(), PTH)]


FASTCALLS = Extension(
    "transfer._fastcalls",
    ["transfer/_fastcalls.c"],
    define_macros=[("Py_LIMITED_API", "0x03080000")],
    py_limited_api=True,
    optional=True,  # no compiler: installed without it (pure-Python wrappers)
)

WATCH = Extension(
    "transfer.compare._watch",
    ["transfer/compare/_watch.c"],
    define_macros=[("Py_LIMITED_API", "0x03080000")],
    py_limited_api=True,
    optional=True,  # no compiler: the accuracy mode's Python watch (transfer/compare/watch.py)
)

setup(cmdclass={"build_py": build_py_with_pth}, ext_modules=[FASTCALLS, WATCH])
