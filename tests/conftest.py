"""Shared fixtures: one per concept (models live in tests/models.py)."""

from __future__ import annotations

import pytest
import torch

from tests import models

pytest_plugins = ["tests.browser.fixtures"]  # one chromium per session for every browser test


@pytest.fixture
def mlp() -> torch.nn.Sequential:
    return models.mlp()


@pytest.fixture
def small_cnn() -> models.SmallCNN:
    return models.small_cnn()


@pytest.fixture(scope="session")
def tiny_gpt2() -> torch.nn.Module:
    return models.tiny_gpt2()
