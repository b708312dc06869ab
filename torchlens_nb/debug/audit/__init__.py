"""``trace.audit()``: every trace-local health diagnostic in one report."""

from ._audit import audit

__all__ = ["audit"]
