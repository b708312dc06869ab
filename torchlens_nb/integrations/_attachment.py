"""What the trainer callbacks share: the checks to run, and one ``ChecksSession`` per training run.

A trainer builds its optimizer inside ``train()`` / ``fit()``, so the session can only be made
when training begins. :class:`TrainerAttachment` makes it then (:meth:`~TrainerAttachment.begin`),
brackets each optimizer step as a boundary-mode ``session.step()`` block with the trainer's
global step, the micro-batches the trainer will run for that step and, where the trainer hands it
out, the batch (:meth:`~TrainerAttachment.begin_step` / :meth:`~TrainerAttachment.end_step`), and
detaches on every exit (:meth:`~TrainerAttachment.finish`): the end of training, the kit's own
raise, any other exception. The callbacks (``transformers.py``, ``lightning.py``) only translate
their trainer's events into these calls.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any, Literal, cast, get_args

import torch

from .._validate import check_bool
from ..checks import ChecksSession
from ..errors import DiagnosticArgumentError, MissingExtraError
from ..report import CheckReport

CheckName = Literal[
    "nonfinite_grad", "change", "update_ratio", "magnitude", "no_accepted_steps", "param_scan"
]
"""A check a callback can register, by the name it has in the report (``report.checks_run``)."""

_REGISTER: dict[str, Callable[..., None]] = {
    "nonfinite_grad": ChecksSession.register_nonfinite_grad_check,
    "change": ChecksSession.register_change_check,
    "update_ratio": ChecksSession.register_update_ratio_check,
    "magnitude": ChecksSession.register_magnitude_check,
    "no_accepted_steps": ChecksSession.register_no_accepted_steps_check,
    "param_scan": ChecksSession.register_param_scan,
}

DEFAULT_CHECKS: Mapping[CheckName, Mapping[str, Any]] = {
    "change": {},
    "nonfinite_grad": {},
    "update_ratio": {},
}
"""The spec's quick start, each with the session's defaults: the change check (warn), the
non-finite gradient check (raise before the optimizer writes), update ratios (collect, one
sampled step in 50). The death-spiral watchdog runs in every session without being named."""

CheckPlan = tuple[tuple[CheckName, Mapping[str, Any]], ...]


def plan_checks(checks: Mapping[str, Mapping[str, Any]] | None) -> CheckPlan:
    """The validated ``checks=`` argument of a callback: ``{name: register options}``.

    Every name must be a :data:`CheckName`; its options are the keyword arguments of the
    session's ``register_*`` method (``{"nonfinite_grad": {"action": "warn"}}``). Each entry is
    registered once on a throwaway session here, so a bad name, option or value is refused when
    the callback is built, before any trainer runs.

    Raises:
        DiagnosticArgumentError: ``checks`` is not a mapping of mappings, names an unknown check,
            or gives an option or value its ``register_*`` method refuses.
    """
    chosen = DEFAULT_CHECKS if checks is None else checks
    if not isinstance(chosen, Mapping):
        raise DiagnosticArgumentError(
            f"checks must be a mapping {{check name: options}}, got {type(chosen).__name__}; "
            f'e.g. checks={{"nonfinite_grad": {{}}, "change": {{"window": 16}}}}.'
        )
    probe = ChecksSession(
        torch.nn.Linear(1, 1), torch.optim.SGD([torch.zeros(1)]), scaler=None, invariants=False
    )  # validates the options only: its optimizer holds nothing to train on purpose
    plan: list[tuple[CheckName, Mapping[str, Any]]] = []
    for name, options in chosen.items():
        register = _REGISTER.get(name)
        if register is None:
            raise DiagnosticArgumentError(
                f"checks names an unknown check {name!r}; the checks are {list(get_args(CheckName))}."
            )
        if not isinstance(options, Mapping):
            raise DiagnosticArgumentError(
                f"the options of check {name!r} must be a mapping of keyword arguments, got "
                f"{type(options).__name__}; pass {{}} for the defaults."
            )
        accepted = [p for p in inspect.signature(register).parameters if p != "self"]
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise DiagnosticArgumentError(
                f"check {name!r} has no option(s) {unknown}; its options are {accepted}."
            )
        register(probe, **options)
        plan.append((cast(CheckName, name), dict(options)))  # a CheckName: checked above
    return tuple(plan)


def micro_batches_of_step(
    first_batch: int, batches_per_epoch: int | None, accumulation: int
) -> int:
    """Backwards in the optimizer step whose first micro-batch is batch ``first_batch`` of its
    epoch: the accumulation factor K, or fewer for an epoch's last step when K does not divide the
    epoch (both trainers step on an epoch's last batch). ``batches_per_epoch=None`` (an iterable
    dataset without a length) gives K."""
    if batches_per_epoch is None:
        return accumulation
    return max(1, min(accumulation, batches_per_epoch - first_batch))


def import_framework(module: str, extra: str) -> ModuleType:
    """Import the framework an integration adapts (``lightning.pytorch``, ``transformers``).

    Raises:
        MissingExtraError: it is not installed; the message names the pip extra.
    """
    try:
        return importlib.import_module(module)
    except ImportError as missing:
        raise MissingExtraError(
            f"this integration needs {module.split('.')[0]}: pip install -c constraints.txt "
            f'"torchlens_nb[{extra}]" (the constraint keeps your torch).'
        ) from missing


def is_kernel_running() -> bool:
    """True inside a Jupyter kernel (an IPython shell with a kernel attached); never imports
    IPython."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


class TrainerAttachment:
    """One attached ``ChecksSession`` per training run, and the final report of the last one.

    Args:
        checks: ``{check name: register options}`` (:func:`plan_checks`); None for
            :data:`DEFAULT_CHECKS`.
        dashboard: show the session's live dashboard (``session.dashboard()``) when training
            begins; None (default) shows it only inside a Jupyter kernel, where it is a panel that
            updates while the trainer runs (outside one the session would print its final
            report instead).

    Raises:
        DiagnosticArgumentError: a bad ``checks`` (see :func:`plan_checks`) or ``dashboard``.
    """

    def __init__(self, checks: Mapping[str, Mapping[str, Any]] | None, dashboard: bool | None):
        if dashboard is not None:
            check_bool(
                "dashboard", dashboard, expect="True, False or None (inside a Jupyter kernel only)"
            )
        self._plan = plan_checks(checks)
        self._dashboard = dashboard
        self._session: ChecksSession | None = None
        self._step: AbstractContextManager[None] | None = None
        self._final: CheckReport | None = None

    @property
    def session(self) -> ChecksSession | None:
        """The attached session while training runs, else None."""
        return self._session

    @property
    def report(self) -> CheckReport | None:
        """The final report of the last run once it ended; while a run is attached, the report
        so far (one host read); None before training began."""
        if self._session is not None:
            return self._session.report()
        return self._final

    def begin(self, model: Any, optimizer: Any, **session_options: Any) -> None:
        """Make, register and attach the run's session; open the dashboard.

        The session detaches itself when a check raises (``detach_on_raise=True``): the error
        leaves the trainer's ``train()`` / ``fit()`` with no hook left, whatever the trainer does
        with it. ``session_options`` go to ``ChecksSession`` (``scaler=`` when the trainer
        declares one)."""
        self._detach(None, restarted=True)
        session = ChecksSession(model, optimizer, detach_on_raise=True, **session_options)
        for name, options in self._plan:
            _REGISTER[name](session, **options)
        session.attach()
        self._session, self._final = session, None
        if self._dashboard or (self._dashboard is None and is_kernel_running()):
            from IPython.display import display  # only reached inside a kernel, or when asked

            display(session.dashboard())

    def begin_step(
        self,
        global_step: int,
        micro_batches: int | None,
        inputs: Any = None,
        forward_fn: Any = None,
    ) -> None:
        """Open the ``session.step()`` block of one optimizer step (closing one left open);
        ``inputs`` and ``forward_fn`` are kept for the replay (``session.step``'s)."""
        if self._session is None:
            return
        self.end_step()
        block = self._session.step(
            global_step=global_step,
            micro_batches=micro_batches,
            inputs=inputs,
            forward_fn=forward_fn if inputs is not None else None,
        )
        block.__enter__()
        self._step = block

    def end_step(self) -> None:
        """Close the open step block: the attempt is settled exactly (accepted or skipped)."""
        block, self._step = self._step, None
        if block is not None:
            block.__exit__(None, None, None)

    def finish(self, error: BaseException | None = None) -> CheckReport | None:
        """Detach (idempotent): ``error`` is the exception that ended training, None when it
        completed. Returns the final report (None when no run began)."""
        self._detach(error, restarted=False)
        return self._final

    def _detach(self, error: BaseException | None, *, restarted: bool) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        try:
            self.end_step()
        finally:
            if restarted:
                session.detach("training restarted before the previous run ended")
            else:
                session.__exit__(type(error) if error is not None else None, error, None)
            self._final = session.report()
