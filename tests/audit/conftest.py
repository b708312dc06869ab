"""The dead-block MLP fixtures of ``tests/gradients/conftest.py``, shared (not copied)."""

from tests.gradients.conftest import batch, dead_trace, healthy_trace

__all__ = ["batch", "dead_trace", "healthy_trace"]
