"""Bootstrap put first on PYTHONPATH by transfer-run.

Runs at interpreter start in every process of the job: arranges for transfer to
activate when torch is imported (not before: a process that never imports torch
is unaffected), then runs the user's own sitecustomize, if any.
"""

import os
import sys


def _chain_user_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _arm():
    if not os.environ.get("TRANSFER_DEVICE", "").strip():
        return
    try:
        from transfer._autoload import arm
    except ImportError as exc:  # never break an interpreter over this
        sys.stderr.write(f"transfer bootstrap: TRANSFER_DEVICE is set, but this Python ({sys.executable}) cannot "
                         f"import transfer ({exc}); the program runs without it. Install transfer for this "
                         f"interpreter, or run the command with the Python that has it.\n")
        return
    arm()


_arm()
_chain_user_sitecustomize()
