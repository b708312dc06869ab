"""The checks kit inside a Hugging Face ``transformers.Trainer``: ``ChecksCallback``.

``Trainer(..., callbacks=[ChecksCallback()])`` attaches a ``ChecksSession`` to the trainer's model
and optimizer when training begins, runs each optimizer step as a boundary-mode step (the
trainer's ``global_step``, the micro-batches ``gradient_accumulation_steps`` gives that step), and
detaches when ``train()`` returns or raises. A non-finite gradient stops ``train()`` with the
kit's ``CheckViolationError`` from inside ``optimizer.step()``, before the optimizer writes: the
weights and the optimizer state keep their values of the step before
(``tests/integrations/test_transformers.py``).

What the trainer hands the session:

* the optimizer is accelerate's ``AcceleratedOptimizer`` (``trainer.optimizer``); the session
  hooks the torch optimizer inside it and takes the wrapper's ``.scaler`` as the scaler
  declaration: the GradScaler under ``fp16=True`` on a GPU, None otherwise (``fp16=True`` on CPU
  runs without a GradScaler: accelerate creates none there, measured with accelerate 1.15);
* the step site S-B is ``optimizer.step()``, after the trainer's ``clip_grad_norm_``
  (``max_grad_norm``): the verdict is on the clipped gradients it is about to apply, and the
  culprit is named from the gradients as they arrived, before the clip spread the NaN;
* ``train()`` is wrapped on the trainer instance (found through the ``Trainer.__init__`` or
  ``train()`` frame that calls the callback) so that the session detaches on any exception. A
  callback added with ``trainer.add_callback`` after the trainer was built finds the trainer at
  the first ``on_train_begin``: an exception in that first ``train()`` other than the kit's own
  raise leaves the hooks on until the next ``train()`` or :meth:`ChecksCallback.detach`.

* the trainer does not hand callbacks the batch: a forward pre-hook on the model (with kwargs)
  keeps, by reference, each micro-batch the trainer passes to ``model(**inputs)`` during the
  open step, and the step's ``session.step()`` block opens at the step's first forward, so the
  RNG state kept with it is the one that forward drew from. ``err.investigate()`` (and the
  dashboard's replay button) replays that micro-batch as ``model(**inputs)``; its ``labels``
  make ``output.loss`` the loss. The kept references are dropped when the step ends; the hook
  is removed with the session. A step whose model forward never runs (a ``compute_loss`` that
  does not call the model) is watched without a block (hook-only counting) and keeps no batch.

Importing this module imports ``transformers`` (``pip install -c constraints.txt
"torchlens_nb[transformers]"``); ``import torchlens_nb`` does not.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch

from ..report import CheckReport
from ._attachment import TrainerAttachment, import_framework, micro_batches_of_step

if TYPE_CHECKING:
    import transformers
else:
    transformers = import_framework("transformers", extra="transformers")

MAX_FRAMES = 8
"""Frames walked up from a callback event to find the ``Trainer`` calling it (the event runs 3
frames below ``Trainer.__init__`` and 4 below ``Trainer._inner_training_loop``)."""

_GUARD = "_torchlens_nb_checks_callback"
"""Attribute marking a trainer's ``train`` as wrapped by a callback (the callback it names)."""


__all__ = ["ChecksCallback"]


class ChecksCallback(transformers.TrainerCallback):
    """Training checks on a Hugging Face ``Trainer``: raise before a non-finite gradient is
    written, the skip ledger, the live dashboard, the micro-batch kept for ``err.investigate()``.

    Args:
        checks: ``{check name: register options}``: the checks and their actions (``action=``
            is an option of each). None (default) registers the spec's quick start with the
            session's defaults: ``{"change": {}, "nonfinite_grad": {}, "update_ratio": {}}``.
            Names: ``nonfinite_grad``, ``change``, ``update_ratio``, ``magnitude``,
            ``no_accepted_steps``, ``param_scan``; options: those of
            ``ChecksSession.register_<name>_check``.
        dashboard: show the live dashboard when training begins; None (default) inside a
            Jupyter kernel only.

    Raises:
        DiagnosticArgumentError: a bad ``checks`` or ``dashboard``, at construction.

    Example:
        >>> callback = ChecksCallback()
        >>> trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
        >>> try:
        ...     trainer.train()
        ... except tl.debug.CheckViolationError as err:
        ...     err.fields["culprit"], err.fields["global_step"]
        ('transformer.h.0.attn.c_attn.weight', 4)
        >>> callback.report.status
        'raised'
    """

    def __init__(
        self,
        checks: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        dashboard: bool | None = None,
    ) -> None:
        self._attachment = TrainerAttachment(checks, dashboard)
        self._accumulation = 1
        self._batches_per_epoch: int | None = None
        self._keeper: torch.utils.hooks.RemovableHandle | None = None
        self._pending: tuple[int, int] | None = None
        """(global step, micro-batches) of the step begun whose first forward has not run."""
        self._slots: list[Any] | None = None
        self._forwards = 0
        """Model forwards seen in the open step."""

    @property
    def report(self) -> CheckReport | None:
        """The final ``CheckReport`` of the last ``train()`` (also after it raised); the report
        so far while training runs; None before training began."""
        return self._attachment.report

    @property
    def session(self) -> Any:
        """The attached ``ChecksSession`` while ``train()`` runs, else None."""
        return self._attachment.session

    def detach(self) -> CheckReport | None:
        """Remove the session's hooks now (idempotent); returns the final report."""
        return self._finish(None)

    # ----- trainer events -----------------------------------------------------------------------
    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._guard(_calling_trainer(self))

    def on_train_begin(
        self,
        args: Any,
        state: Any,
        control: Any,
        model: Any = None,
        optimizer: Any = None,
        train_dataloader: Any = None,
        **kwargs: Any,
    ) -> None:
        trainer = _calling_trainer(self)
        self._guard(trainer)
        self._accumulation = args.gradient_accumulation_steps
        self._batches_per_epoch = _length(train_dataloader)
        wrapped = getattr(trainer, "model_wrapped", None) if trainer is not None else None
        is_ddp = isinstance(wrapped, torch.nn.parallel.DistributedDataParallel)
        self._release()
        self._attachment.begin(wrapped if is_ddp else model, optimizer)
        if isinstance(model, torch.nn.Module):
            self._keeper = model.register_forward_pre_hook(self._keep, with_kwargs=True)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._attachment.end_step()
        micro = self._micro_batches(state.global_step)
        self._pending, self._slots, self._forwards = (state.global_step, micro), None, 0
        if self._keeper is None:  # no model to watch: open the block now, with no batch
            self._open(None)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._attachment.end_step()
        self._pending, self._slots = None, None

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._finish(None)

    # ----- internals ----------------------------------------------------------------------------
    def _keep(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Forward pre-hook: keep the micro-batch (a reference); the step's first forward opens
        its block, so the block's RNG state is the one this forward draws from."""
        if self._pending is None and self._slots is None:
            return  # outside a training step (evaluation, generation)
        batch = dict(kwargs) if kwargs and not args else (args if args and not kwargs else None)
        position, self._forwards = self._forwards, self._forwards + 1
        if self._pending is not None:
            self._open(batch)
        elif self._slots is not None and position < len(self._slots):
            self._slots[position] = batch

    def _open(self, batch: Any) -> None:
        assert self._pending is not None
        global_step, micro = self._pending
        self._pending = None
        self._slots = [batch, *([None] * (micro - 1))] if batch is not None else None
        inputs = self._slots if micro > 1 else batch
        self._attachment.begin_step(global_step, micro, inputs)

    def _release(self) -> None:
        """Remove the batch keeper and drop what it kept."""
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.remove()
        self._pending, self._slots = None, None

    def _finish(self, error: BaseException | None) -> CheckReport | None:
        self._release()
        return self._attachment.finish(error)

    def _micro_batches(self, global_step: int) -> int:
        """Micro-batches of the step ``global_step``: the trainer steps every K batches and on
        an epoch's last batch (``Trainer._run_epoch``, transformers 5.24)."""
        k, length = self._accumulation, self._batches_per_epoch
        if length is None:
            return k
        steps_per_epoch = max(1, math.ceil(length / k))
        return micro_batches_of_step((global_step % steps_per_epoch) * k, length, k)

    def _guard(self, trainer: Any) -> None:
        """Wrap ``trainer.train`` once so that the session detaches when it raises."""
        if trainer is None or getattr(trainer.train, _GUARD, None) is self:
            return
        original = trainer.train
        finish = self._finish

        @functools.wraps(original)
        def train(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            except BaseException as error:
                finish(error)
                raise

        setattr(train, _GUARD, self)
        trainer.train = train


def _calling_trainer(callback: ChecksCallback) -> Any:
    """The ``transformers.Trainer`` whose callback handler is calling ``callback`` now, found in
    the frames above (None when none of the nearest :data:`MAX_FRAMES` holds it)."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(MAX_FRAMES):
        if frame is None:
            return None
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, transformers.Trainer) and any(
            c is callback for c in candidate.callback_handler.callbacks
        ):
            return candidate
        frame = frame.f_back
    return None


def _length(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:  # an iterable dataset without a length
        return None
