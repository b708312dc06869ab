"""``tl.bridge``: adapters that read what a framework's own seams know about a model.

``tl.bridge.transformers`` records the attention probabilities of Hugging Face models through
their attention interface. Importing this package imports no framework: each bridge imports its
framework when it is used.
"""

from . import transformers

__all__ = ["transformers"]
