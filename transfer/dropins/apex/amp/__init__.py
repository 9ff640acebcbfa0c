"""apex.amp, provided by transfer, on torch.amp (see docs/thirdparty.md).

``initialize`` (O0-O3, apex's properties and overrides, the same returned
structures), ``scale_loss``, ``master_params``, ``state_dict`` /
``load_state_dict``, ``disable_casts`` and the O1 function registries.
apex's half precision is float16 where the target computes in it, else
what the target's autocast makes of float16 (bfloat16 on the cpu target
unless TRANSFER_CPU_AMP_DTYPE=float16). apex's old handle API: ``amp.init``
(`handle.AmpHandle`, ``wrap_optimizer``: `opt.OptimWrapper`).
"""

from ._amp_state import _amp_state, master_params  # noqa: F401
from .amp import (init, half_function, float_function, promote_function, register_half_function,  # noqa: F401
                  register_float_function, register_promote_function)
from .frontend import initialize, load_state_dict, state_dict  # noqa: F401
from .handle import AmpHandle, NoOpHandle, disable_casts, scale_loss  # noqa: F401
