"""apex.normalization, provided by transfer: see fused_layer_norm.py."""

from .fused_layer_norm import (  # noqa: F401
    FusedLayerNorm,
    FusedRMSNorm,
    MixedFusedLayerNorm,
    MixedFusedRMSNorm,
)
