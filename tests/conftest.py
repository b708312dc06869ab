"""Shared fixtures: one per concept (models live in tests/models.py)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
import torch

from tests import models
from tests._process_state import ProcessState, leaks, restore

pytest_plugins = ["tests.browser.fixtures"]  # one chromium per session for every browser test


def pytest_configure(config: pytest.Config) -> None:
    """Give the suite Python's Ctrl-C handler when it was started with ``SIGINT`` ignored.

    A background job of a non-interactive shell (``make test &`` in a script) inherits
    ``SIG_IGN``; the kit leaves such a process alone (``_interrupts.hold_sigint``), so no
    interrupt test could raise ``KeyboardInterrupt`` there: measured, 21 failed from the first
    one that put Python's handler back. The suite runs as a foreground terminal runs it.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def leaves_the_process_as_it_found_it() -> Iterator[None]:
    """Fail the test that leaks process state (grad mode, hooks, modes, the collector, the
    ``SIGINT`` handler, ...: ``tests/_process_state.py``) and put the state back, so one leak is
    one red test, not every later test that needs autograd. Runs first and ends last, after the
    test's own fixtures are torn down (``tests/test_isolation.py`` plants a leak)."""
    before = ProcessState.read()
    yield
    after = ProcessState.read()
    leaked = leaks(before, after)
    if leaked:
        restore(before, after)
        pytest.fail("the test left process state behind:\n  " + "\n  ".join(leaked))


@pytest.fixture
def mlp() -> torch.nn.Sequential:
    return models.mlp()


@pytest.fixture
def small_cnn() -> models.SmallCNN:
    return models.small_cnn()


@pytest.fixture(scope="session")
def tiny_gpt2() -> torch.nn.Module:
    return models.tiny_gpt2()
