"""Fixtures of the probe tests: the offline MiniLM (trained and a random-init twin) and its
padded batch of the four fixed sentences (tests/probes/minilm.py)."""

from __future__ import annotations

import pytest

from tests.attention_sinks import minilm as _minilm


@pytest.fixture(scope="session")
def minilm_tokenizer():
    return _minilm.tokenizer()


@pytest.fixture(scope="session")
def minilm():
    return _minilm.trained()


@pytest.fixture(scope="session")
def minilm_random():
    return _minilm.random_twin()


@pytest.fixture(scope="session")
def minilm_batch(minilm_tokenizer):
    """The four sentences, padded to 16 tokens (``input_ids``, ``attention_mask``, ...)."""
    return minilm_tokenizer(list(_minilm.SENTENCES), padding=True, return_tensors="pt")
