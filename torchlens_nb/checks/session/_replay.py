"""The batch that broke training, kept so the raise can be replayed: ``session.step(inputs=...)``.

Boundary mode keeps, for the CURRENT attempt only, a reference to its inputs and a copy of every
initialised torch RNG state at the start of each micro-batch (nothing accumulates over steps: the
block drops both when it exits). Without accumulation the attempt is one micro-batch, whose RNG
state is taken when the block opens. With ``micro_batches=K``, ``inputs=`` is the sequence of the
K micro-batches in the order their backwards run; the RNG state at the start of micro-batch
``j > 0`` is taken when backward ``j - 1`` completes (site S-D), which is exact when nothing
draws from the RNG between that backward and the next forward (data augmentation drawing from
torch's global RNG in between makes the replay's dropout masks differ; it then reports
``not_reproduced`` rather than a wrong origin).

When a check raises, the engine knows which backward first produced the non-finite gradient
(the S-D norms are per backward) and the :class:`Replay` on ``CheckViolationError.replay`` holds
that micro-batch, its RNG state, the step ids and a weak reference to the model.

Cost per attempt with ``inputs=``: one CPU RNG state copy (5 KB, about 1 us here) per
micro-batch, plus one per initialised CUDA device (``benchmarks/bench_checks.py`` prints the
per-step figure).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ...errors import UnavailableError

if TYPE_CHECKING:
    from ...report import InvestigationReport


@dataclass(frozen=True)
class RngState:
    """Every initialised torch RNG stream at one moment.

    ``cpu`` is ``torch.get_rng_state()``; ``cuda`` is ``torch.cuda.get_rng_state_all()`` when
    CUDA is initialised in this process, else None (taking it would initialise CUDA).
    """

    cpu: torch.Tensor
    cuda: tuple[torch.Tensor, ...] | None

    @classmethod
    def capture(cls) -> RngState:
        """Copy the current states (host work only: no device sync)."""
        cuda = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            cuda = tuple(torch.cuda.get_rng_state_all())
        return cls(torch.get_rng_state(), cuda)

    def as_mapping(self) -> dict[str, Any]:
        """The ``rng_state`` mapping ``tl.debug.investigate`` takes: ``{"cpu": ..., "cuda": [...]}``
        (no ``cuda`` key when CUDA was not initialised)."""
        states: dict[str, Any] = {"cpu": self.cpu}
        if self.cuda is not None:
            states["cuda"] = list(self.cuda)
        return states

    def restore(self) -> None:
        """Make these the current states (for a replay; the session itself never calls it)."""
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(list(self.cuda))


@dataclass(frozen=True)
class Replay:
    """What ``CheckViolationError.investigate()`` replays: one micro-batch of the raised attempt.

    Holds the caller's inputs object itself (not a copy) and the model by weak reference.
    """

    model: weakref.ref[torch.nn.Module]
    """The session's model (dead once the caller dropped it)."""
    inputs: Any
    """The micro-batch, exactly the object passed to ``session.step(inputs=...)``."""
    rng_state: RngState
    """The RNG streams at the start of that micro-batch."""
    global_step: int | None
    attempt: int
    micro_batch: int
    """Index of the micro-batch whose backward first produced the non-finite gradient (0
    without accumulation)."""
    micro_batches: int | None
    """The declared accumulation factor K (None when not declared)."""
    loss_fn: Callable[..., Any] | None = None
    """The ``loss_fn`` given to ``session.step(loss_fn=...)``: the replay's default loss."""
    forward_fn: Callable[[torch.nn.Module, Any], Any] | None = None
    """How the replay calls the model on ``inputs`` (``session.step(forward_fn=...)``: a
    trainer's own training step); None for ``model(*inputs)`` / ``model(**inputs)``."""

    def investigate(self, loss_fn: Callable[..., Any] | None = None) -> InvestigationReport:
        """Replay this micro-batch with ``tl.debug.investigate`` under the kept RNG state.

        ``loss_fn`` defaults to the one kept from ``session.step(loss_fn=...)``, then to
        ``tl.debug.investigate``'s own default (``output.loss``, ``output["loss"]``, or a
        one-element output). The forward is called through the kept ``forward_fn`` when there
        is one.

        Raises:
            UnavailableError: the model was garbage-collected (``code="model_collected"``).
        """
        model = self.model()
        if model is None:
            raise UnavailableError(
                "the model of this raise was garbage-collected; replay the kept batch yourself "
                "with tl.debug.investigate(model, err.replay.inputs, loss_fn=..., "
                "rng_state=err.replay.rng_state.as_mapping()).",
                "model_collected",
            )
        # checks -> debug: the one upward edge of the checks kit, only in this explicit
        # follow-up (tests/test_layering.py lists it); the session itself never captures.
        from ...debug import investigate

        return investigate(
            model,
            self.inputs,
            loss_fn=loss_fn if loss_fn is not None else self.loss_fn,
            rng_state=self.rng_state.as_mapping(),
            forward_fn=self.forward_fn,
        )


class KeptBatch:
    """The inputs and per-micro-batch RNG states of the open ``session.step()`` block."""

    def __init__(
        self,
        inputs: Any,
        micro_batches: int | None,
        loss_fn: Callable[..., Any] | None = None,
        forward_fn: Any = None,
    ) -> None:
        self._inputs = inputs
        self.loss_fn = loss_fn
        """What ``session.step(loss_fn=...)`` gave: the replay's loss."""
        self._forward_fn = forward_fn
        self._expected = micro_batches if micro_batches is not None else 1
        self._is_split = self._expected > 1
        self._states = [RngState.capture()]

    def backward_done(self) -> None:
        """S-D of one backward: the next micro-batch starts here (kept up to K states)."""
        if self._is_split and len(self._states) < self._expected:
            self._states.append(RngState.capture())

    def micro_batch(self, position: int) -> tuple[Any, RngState] | None:
        """(inputs, RNG state) of the micro-batch at ``position``, None when none was kept."""
        if not 0 <= position < len(self._states):
            return None
        inputs: Sequence[Any] | Any = self._inputs
        return (inputs[position] if self._is_split else inputs), self._states[position]

    def forward_fn(self, position: int) -> Callable[[torch.nn.Module, Any], Any] | None:
        """The ``forward_fn`` of the micro-batch at ``position`` (one callable for all, or the
        one at ``position`` of a list given per micro-batch)."""
        chosen = self._forward_fn
        if isinstance(chosen, (list, tuple)):
            return chosen[position]
        return chosen
