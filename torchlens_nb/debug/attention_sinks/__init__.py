"""Attention sinks and outlier residual dimensions: SinkProbe and attention_sinks."""

from ._attention_sinks import attention_sinks
from ._probe import SinkProbe

__all__ = ["SinkProbe", "attention_sinks"]
