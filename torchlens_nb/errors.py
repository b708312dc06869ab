"""Exception and warning types of torchlens_nb.

Every error a caller can trigger subclasses :class:`TorchlensNbError` and the built-in exception a
caller would naturally catch (``ValueError``, ``TypeError``, ``KeyError``, ``RuntimeError``), so
``except ValueError`` keeps working while ``except tl.errors.TorchlensNbError`` catches all of ours.
Messages say what was wrong, the value seen, and what to do.
"""

from __future__ import annotations

from typing import Any


class TorchlensNbError(Exception):
    """Base class of every error raised by torchlens_nb."""


class TorchlensNbWarning(UserWarning):
    """Category of every warning torchlens_nb emits (filter it with ``warnings.filterwarnings``)."""


class CaptureOptionsError(TorchlensNbError, ValueError):
    """An argument of ``tl.trace`` or ``CaptureOptions`` is invalid."""


class InputFormError(TorchlensNbError, TypeError):
    """The model inputs have a form that ``tl.trace`` cannot pass to ``forward``."""


class ModelTypeError(TorchlensNbError, TypeError):
    """Something other than an ``nn.Module`` was passed where a model belongs."""


class SelectorError(TorchlensNbError, ValueError):
    """A ``tl.func`` / ``tl.module`` selector pattern is empty or malformed."""


class OpNotFoundError(TorchlensNbError, KeyError):
    """A label, index or module address does not exist in the trace."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class ForwardError(TorchlensNbError, RuntimeError):
    """The model's forward raised during capture; ``partial_trace`` holds what was recorded."""

    def __init__(self, message: str, partial_trace: Any) -> None:
        super().__init__(message)
        self.partial_trace = partial_trace


class BackwardError(TorchlensNbError, RuntimeError):
    """``Trace.backward`` cannot run: the trace was not captured for backward, or autograd failed."""


class ReportOptionError(TorchlensNbError, ValueError):
    """An argument of a report method (``card``, ``to_html``, ...) is invalid."""


class DiagnosticArgumentError(TorchlensNbError, ValueError):
    """An argument of a ``tl.debug`` diagnostic is out of range or of the wrong kind."""


class UnavailableError(TorchlensNbError, RuntimeError):
    """The evidence a diagnostic needs does not exist in this run; ``code`` names why."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


__all__ = [
    "BackwardError",
    "CaptureOptionsError",
    "DiagnosticArgumentError",
    "ForwardError",
    "InputFormError",
    "ModelTypeError",
    "OpNotFoundError",
    "ReportOptionError",
    "SelectorError",
    "TorchlensNbError",
    "TorchlensNbWarning",
    "UnavailableError",
]
