"""Exception and warning types of torchlens_nb.

Every error a caller can trigger subclasses :class:`TorchlensNbError` and the built-in exception a
caller would naturally catch (``ValueError``, ``TypeError``, ``KeyError``, ``RuntimeError``), so
``except ValueError`` keeps working while ``except tl.errors.TorchlensNbError`` catches all of ours.
Messages say what was wrong, the value seen, and what to do.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any


class TorchlensNbError(Exception):
    """Base class of every error raised by torchlens_nb."""


class TorchlensNbWarning(UserWarning):
    """Category of every warning torchlens_nb emits (filter it with ``warnings.filterwarnings``)."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str) -> None:
    """Emit a :class:`TorchlensNbWarning` that names the caller's line (the notebook cell or
    script line that called into the kit), not the kit's own code.

    The line is the first frame outside torchlens_nb and torch: a check firing in a backward
    hook is reported at the user's ``loss.backward()``. (Python 3.12's ``skip_file_prefixes``
    does this; 3.11 needs the count.)
    """
    torch = sys.modules.get("torch")
    skipped = (_PACKAGE_DIR,) + (
        (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,)
        if torch is not None and torch.__file__
        else ()
    )
    frame, level = sys._getframe(1), 2  # stacklevel 2: warn's caller
    while frame.f_back is not None and frame.f_code.co_filename.startswith(skipped):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, TorchlensNbWarning, stacklevel=level)


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
    """The model's forward raised; ``partial_trace`` holds what was recorded (None when no
    capture ran, e.g. inside a ``tl.recipes`` call); the exception is the ``__cause__``."""

    def __init__(self, message: str, partial_trace: Any) -> None:
        super().__init__(message)
        self.partial_trace = partial_trace


class BackwardError(TorchlensNbError, RuntimeError):
    """``Trace.backward`` cannot run: the trace was not captured for backward, or autograd failed."""


class PanelError(TorchlensNbError, RuntimeError):
    """A report's panel cannot be built: its bundle is missing or a panel request is invalid."""


class ReportOptionError(TorchlensNbError, ValueError):
    """An argument of a report method (``card``, ``to_html``, ...) is invalid."""


class DiagnosticArgumentError(TorchlensNbError, ValueError):
    """An argument of a ``tl.debug`` diagnostic is out of range or of the wrong kind."""


class UnavailableError(TorchlensNbError, RuntimeError):
    """The evidence a diagnostic needs does not exist in this run; ``code`` names why."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class MissingExtraError(TorchlensNbError, ImportError):
    """An optional framework an integration needs is not installed; the message names the pip
    extra that brings it (``torchlens_nb[transformers]``, ``[lightning]``, ``[accelerate]``)."""


class CheckViolationError(TorchlensNbError, RuntimeError):
    """A ``ChecksSession`` check with ``action="raise"`` stopped the loop at a safe site.

    Raised before ``optimizer.step()`` writes (site S-B) or right after it wrote (site S-C); the
    one exception is a ``step(closure)`` optimizer that re-evaluates its closure (LBFGS), stopped
    before it uses the re-evaluated gradient (``fields["is_mid_step"]``). ``finding`` is the
    :class:`~torchlens_nb.report.Finding`, ``code`` its stable ``fields["code"]``, ``report``
    the ``CheckReport`` at the moment of the raise (final: ``is_final`` with the raise as its
    exit reason), ``replay`` the kept batch of the raised attempt (a frozen
    ``torchlens_nb.checks.Replay``: weak reference to the model, the micro-batch's inputs, the
    RNG states at its start, global_step, attempt, micro-batch index) or None when the session
    kept none (hook-only mode, or ``session.step()`` without ``inputs=``).
    """

    def __init__(self, message: str, finding: Any, report: Any, replay: Any = None) -> None:
        super().__init__(message)
        self.finding = finding
        self.report = report
        self.replay = replay
        self.code: str = finding.fields["code"]
        self.fields = finding.fields
        self.remedy: str | None = finding.remedy

    def investigate(self, loss_fn: Any = None) -> Any:
        """Replay the kept micro-batch and say where the non-finite value was born.

        Calls ``err.replay.investigate(loss_fn)``: ``tl.debug.investigate(model, replay.inputs,
        loss_fn=..., rng_state=...)`` under the kept RNG state (``loss_fn`` defaults to the one
        given to ``session.step(loss_fn=...)``), which restores everything it touched.

        Raises:
            UnavailableError: no batch was kept (``code="no_kept_batch"``) or the model was
                garbage-collected (``code="model_collected"``).
        """
        if self.replay is None:
            raise UnavailableError(
                "this raise kept no batch to replay: keep it with "
                "`with session.step(global_step=i, inputs=batch):` around the attempt, or replay "
                "a batch yourself with tl.debug.investigate(model, batch, loss_fn=...).",
                "no_kept_batch",
            )
        return self.replay.investigate(loss_fn)


class GradFnWalkError(TorchlensNbError, ValueError):
    """``walk_grad_fn`` / ``sketch_grad_fn`` got something with no autograd graph to walk."""


class GraphvizRunError(TorchlensNbError, RuntimeError):
    """Graphviz ``dot`` (or the viewer) could not run to completion; ``reason`` says why.

    ``reason`` is ``"missing"`` (no ``dot`` on PATH), ``"timeout"`` (killed at the time limit)
    or ``"failed"`` (non-zero exit; ``stderr`` holds its last lines).
    """

    def __init__(self, message: str, reason: str, stderr: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.stderr = stderr


class CompileCountsUnavailableError(TorchlensNbError, RuntimeError):
    """This torch exposes no Dynamo compile counters, so ``tl.debug.count_compiles`` cannot count."""


class ModelCopyError(TorchlensNbError, TypeError):
    """``copy.deepcopy`` refused the model; pass ``model_factory=`` to build fresh copies instead."""


__all__ = [
    "BackwardError",
    "CaptureOptionsError",
    "CheckViolationError",
    "CompileCountsUnavailableError",
    "DiagnosticArgumentError",
    "ForwardError",
    "GradFnWalkError",
    "GraphvizRunError",
    "InputFormError",
    "MissingExtraError",
    "ModelCopyError",
    "ModelTypeError",
    "OpNotFoundError",
    "PanelError",
    "ReportOptionError",
    "SelectorError",
    "TorchlensNbError",
    "TorchlensNbWarning",
    "UnavailableError",
]
