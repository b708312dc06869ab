"""The checks kit inside ``lightning.Trainer.fit``: ``ChecksCallback``.

``Trainer(..., callbacks=[ChecksCallback()])`` attaches a ``ChecksSession`` to the LightningModule
and the trainer's optimizer when training starts, runs each optimizer step as a boundary-mode
step (``trainer.global_step``, the micro-batches ``accumulate_grad_batches`` gives the step, and
the batches themselves, kept for ``err.investigate()``, which replays the module's own
``training_step(batch, batch_idx)``: :class:`TrainingStepReplay`), and detaches when ``fit()``
ends or raises (``on_exception``). A non-finite gradient stops ``fit()`` with the kit's
``CheckViolationError`` before the optimizer writes (``tests/integrations/test_lightning.py``).

Where the check runs. Lightning's automatic optimization calls ``optimizer.step(closure)``: the
forward and backward of the step's last micro-batch run inside ``step()``, after the optimizer's
step pre-hook. The session's pre-hook therefore evaluates the closure first (which runs the
training step, the backward and Lightning's ``on_before_optimizer_step``) and judges the
gradients it produced before the optimizer's own code runs; it never judges at a point before
the closure (``torchlens_nb/checks/session/_optimizer.py``). Under ``precision="16-mixed"`` Lightning's
``MixedPrecision`` runs the closure before ``scaler.step``, and its ``scaler`` is the session's
scaler declaration; every other precision plugin without a ``scaler`` declares none.

One optimizer per trainer: ``configure_optimizers`` returning several is refused when training
starts (a session watches one optimizer). Under a DDP strategy the session gets the strategy's
DDP module (the S-B agreement of ``docs/distributed.md``); that path is not measured here.

Importing this module imports ``lightning`` (``pip install -c constraints.txt
"torchlens_nb[lightning]"``); ``import torchlens_nb`` does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from .._validate import check_bool
from ..errors import DiagnosticArgumentError
from ..report import CheckReport
from ._attachment import TrainerAttachment, import_framework, micro_batches_of_step

if TYPE_CHECKING:
    import lightning.pytorch as pl
else:
    pl = import_framework("lightning.pytorch", extra="lightning")


__all__ = ["ChecksCallback"]


class ChecksCallback(pl.Callback):
    """Training checks on a ``lightning.Trainer``: raise before a non-finite gradient is written,
    the skip ledger, the live dashboard, the batch kept for ``err.investigate()``.

    Args:
        checks: ``{check name: register options}`` (actions are options); None (default) for
            ``{"change": {}, "nonfinite_grad": {}, "update_ratio": {}}`` with the session's
            defaults. Names: ``nonfinite_grad``, ``change``, ``update_ratio``, ``magnitude``,
            ``no_accepted_steps``, ``param_scan``.
        dashboard: show the live dashboard when training starts; None (default) inside a Jupyter
            kernel only.
        keep_batch: keep each step's batches (a reference, released when the step ends) so a
            raise can be replayed with ``err.investigate()``.

    Raises:
        DiagnosticArgumentError: a bad argument, at construction; more than one optimizer, when
            training starts.

    Example:
        >>> callback = ChecksCallback()
        >>> trainer = lightning.Trainer(accelerator="cpu", max_steps=8, callbacks=[callback])
        >>> try:
        ...     trainer.fit(module, loader)
        ... except tl.debug.CheckViolationError as err:
        ...     err.fields["culprit"], err.replay.global_step
        ('layer.0.weight', 4)
    """

    def __init__(
        self,
        checks: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        dashboard: bool | None = None,
        keep_batch: bool = True,
    ) -> None:
        check_bool("keep_batch", keep_batch)
        self._attachment = TrainerAttachment(checks, dashboard)
        self._keep_batch = keep_batch
        self._inputs: list[Any] | None = None
        self._step_end = 0
        """Batch index (in the epoch) of the open step's last micro-batch."""

    @property
    def report(self) -> CheckReport | None:
        """The final ``CheckReport`` of the last ``fit()`` (also after it raised); the report so
        far while training runs; None before training started."""
        return self._attachment.report

    @property
    def session(self) -> Any:
        """The attached ``ChecksSession`` while training runs, else None."""
        return self._attachment.session

    # ----- trainer events -----------------------------------------------------------------------
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        optimizers = trainer.optimizers
        if len(optimizers) != 1:
            raise DiagnosticArgumentError(
                f"ChecksCallback watches one optimizer, the trainer has {len(optimizers)}; "
                "return one optimizer from configure_optimizers, or attach a "
                "tl.debug.ChecksSession per optimizer in a manual-optimization training_step."
            )
        strategy_model = trainer.strategy.model
        is_ddp = isinstance(strategy_model, torch.nn.parallel.DistributedDataParallel)
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        self._attachment.begin(
            strategy_model if is_ddp else pl_module, optimizers[0], scaler=scaler
        )

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._attachment.session is None:
            return
        if not pl_module.automatic_optimization:
            # manual optimization: the training step decides when to step (a loop of its own
            # may accumulate; Lightning forbids accumulate_grad_batches here), so each batch is
            # a block with no declared micro-batches; a block without a step stays open until
            # a step uses its backwards (one attempt) or its gradients are reset (skipped)
            self._step_end = batch_idx
            self._attachment.begin_step(
                trainer.global_step, None, batch if self._keep_batch else None
            )
            return
        k = trainer.accumulate_grad_batches
        if batch_idx % k:  # a later micro-batch of the open step
            if self._inputs is not None:
                self._inputs[batch_idx % k] = batch
            return
        micro = micro_batches_of_step(batch_idx, _batches_per_epoch(trainer), k)
        self._step_end = batch_idx + micro - 1
        self._inputs = [batch, *([None] * (micro - 1))] if self._keep_batch else None
        inputs = self._inputs if micro > 1 else (batch if self._keep_batch else None)
        steps = [TrainingStepReplay(batch_idx + j) for j in range(micro)]
        self._attachment.begin_step(
            trainer.global_step, micro, inputs, steps if micro > 1 else steps[0]
        )

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if batch_idx >= self._step_end:
            self._attachment.end_step()
            self._inputs = None

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._attachment.finish(None)
        self._inputs = None

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._attachment.finish(exception)
        self._inputs = None


class TrainingStepReplay:
    """The replay's ``forward_fn`` under automatic optimization: the module's own
    ``training_step(batch, batch_idx)``, whose returned loss (or ``{"loss": ...}``) is the loss.

    ``self.log`` / ``self.log_dict`` need the trainer's loop, which is gone when
    ``err.investigate()`` runs: they are no-ops for the replay (instance attributes, removed
    afterwards, raises included). Manual optimization is not replayed this way (its
    ``training_step`` runs the backward and the optimizer step itself); its kept batch is
    replayed as ``module(batch)``.
    """

    def __init__(self, batch_idx: int) -> None:
        self.batch_idx = batch_idx

    def __call__(self, module: torch.nn.Module, batch: Any) -> Any:
        if isinstance(module, torch.nn.parallel.DistributedDataParallel):
            module = module.module  # the session's model under DDP (not measured here)
        shadowed = [name for name in _LOGGING if name not in vars(module)]
        for name in shadowed:
            object.__setattr__(module, name, _no_log)
        try:
            return module.training_step(batch, self.batch_idx)  # type: ignore[operator]
        finally:
            for name in shadowed:
                object.__delattr__(module, name)

    def __repr__(self) -> str:
        return (
            f"LightningModule.training_step(batch, batch_idx={self.batch_idx}) with "
            "self.log / self.log_dict as no-ops"
        )


_LOGGING = ("log", "log_dict")
"""The ``LightningModule`` methods that need a running trainer loop."""


def _no_log(*args: Any, **kwargs: Any) -> None:
    """``self.log`` during a replay: nothing is logged."""


def _batches_per_epoch(trainer: pl.Trainer) -> int | None:
    """Training batches per epoch, None when the loader has no length (Lightning reports inf)."""
    count = trainer.num_training_batches
    return int(count) if count != float("inf") else None
