"""Attention sinks and outlier residual dimensions: SinkProbe and attention_sinks.

``FusedAttentionMode``, ``FusedCall`` and ``SDPA`` are the fused-attention recompute machinery,
shared with ``tl.bridge.transformers.record_attention``.
"""

from ._attention_sinks import attention_sinks
from ._fused import SDPA, FusedAttentionMode, FusedCall
from ._probe import SinkProbe

__all__ = ["SDPA", "FusedAttentionMode", "FusedCall", "SinkProbe", "attention_sinks"]
