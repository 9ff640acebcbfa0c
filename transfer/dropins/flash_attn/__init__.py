"""flash_attn 2.x, provided by transfer (see transfer/dropins/__init__.py).

Loaded under the public name ``flash_attn`` where the real package cannot run.
The interface functions run on torch's scaled_dot_product_attention, or
torch_npu.npu_fusion_attention on npu (transfer/dropins/_attention.py).
"""

from transfer.dropins import FLASH_ATTN_VERSION as __version__  # noqa: E402,F401

from flash_attn.flash_attn_interface import (  # noqa: E402,F401
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)
