"""``tl.bridge.transformers``: Hugging Face models seen through their own attention interface.

``record_attention(model)`` imports ``transformers`` when called; importing this module does not.
"""

from ._record import AttentionRecording, SdpaCheck, UnrecordedCall, record_attention

__all__ = ["AttentionRecording", "SdpaCheck", "UnrecordedCall", "record_attention"]
