"""Ctrl-C at every line the kit runs inside a trainer's run and inside ``tl.recipes.triage``.

``ChecksCallback`` attaches a session when training begins and detaches it when it ends; triage
trains copies of the model. Each call is interrupted at the line events of the kit's files
(``tests/faults/_sweep.py``, with a stride: a tiny run is 0.1-1 s, so the CI budget is small
and ``TORCHLENS_NB_FULL_SWEEP=1`` sweeps every line). After each run the interrupt reached the
caller (Lightning turns it into ``SystemExit(1)`` after its graceful shutdown and sets
``SIGINT`` to ``SIG_IGN``: its own choice, put back by the harness) and nothing is left: no
gradient or step hook, no attached session, grad mode and the handlers as they were.
"""

from __future__ import annotations

import signal
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.faults._sweep import sweep
from tests.faults.test_interrupt_sweep_capture import global_hooks_and_handler
from tests.faults.test_interrupts import process_state
from torchlens_nb.checks.session._optimizer import ATTACHED

pytestmark = pytest.mark.fault("no_leak")


def trained_state(model: nn.Module, optimizers: Callable[[], list[Any]]) -> dict[str, Any]:
    """``process_state`` less what training changes on purpose (gradients, RNG streams), plus
    what a session installs on the model's parameters and the optimizers."""
    trained = {f"grad {name}" for name, _ in model.named_parameters()}
    kept = {
        k: v
        for k, v in process_state(model).items()
        if k not in trained and not k.startswith("rng ")  # "grad enabled" is kept
    }
    return {
        **kept,
        **global_hooks_and_handler(),
        "grad hooks": [len(p._post_accumulate_grad_hooks or {}) for p in model.parameters()],
        "step hooks": [
            (len(o._optimizer_step_pre_hooks), len(o._optimizer_step_post_hooks))
            for o in optimizers()
        ],
        "attached sessions": len(ATTACHED._owners),
    }


def _triage() -> tuple[Callable[[], object], Callable[[], dict[str, Any]], tuple[str, ...]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    batch = (torch.randn(16, 8), torch.randint(0, 3, (16,)))

    def call() -> object:
        return tl.recipes.triage(model, batch, nn.CrossEntropyLoss(), optimizer=optimizer, steps=20)

    return call, lambda: trained_state(model, lambda: [optimizer]), ()


def _is_interrupted_report(result: Any) -> bool:
    """Triage's answer to Ctrl-C: the partial report, status ``interrupted``."""
    return getattr(result, "status", None) == "interrupted"


def _transformers_trainer() -> tuple[Callable[[], object], Callable[[], dict], tuple[str, ...]]:
    transformers = pytest.importorskip("transformers")
    from tests import models
    from tests.integrations.conftest import token_rows
    from torchlens_nb.integrations.transformers import ChecksCallback

    model = models.tiny_gpt2().train()
    output_dir = tempfile.mkdtemp(prefix="torchlens_nb_sweep_")
    last: list[Any] = []  # the last run's trainer: its optimizer's hooks are compared

    def call() -> object:
        arguments = transformers.TrainingArguments(
            output_dir=output_dir,
            max_steps=2,
            per_device_train_batch_size=1,
            use_cpu=True,
            report_to="none",
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            seed=0,
        )
        trainer = transformers.Trainer(
            model=model, args=arguments, train_dataset=token_rows(2), callbacks=[ChecksCallback()]
        )
        last[:] = [trainer]
        return trainer.train()

    def optimizers() -> list[Any]:
        return [t.optimizer.optimizer for t in last if t.optimizer is not None]

    return call, lambda: trained_state(model, optimizers), ()


def _lightning_trainer() -> tuple[Callable[[], object], Callable[[], dict], tuple[str, ...]]:
    pytest.importorskip("lightning.pytorch")
    from tests.integrations.test_lightning import Regressor, fit
    from torchlens_nb.integrations.lightning import ChecksCallback

    class KeptOptimizer(Regressor):
        """The regressor of the integration tests; keeps its last optimizer for the check."""

        kept: Any = None

        def configure_optimizers(self) -> Any:
            self.kept = super().configure_optimizers()
            return self.kept

    module = KeptOptimizer()

    def call() -> object:
        try:
            return fit([ChecksCallback()], module=module)
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # Lightning's SIG_IGN

    return (
        call,
        lambda: trained_state(module, lambda: [module.kept] if module.kept else []),
        ("raised SystemExit: 1",),
    )


CALLS: dict[str, tuple[Callable[[], tuple[Any, Any, tuple[str, ...]]], int]] = {
    "tl.recipes.triage": (_triage, 40),
    "transformers ChecksCallback": (_transformers_trainer, 25),
    "lightning ChecksCallback": (_lightning_trainer, 40),
}
"""Call -> (its call, state and the outcomes that count as delivered; budget of runs)."""


@pytest.mark.parametrize("entry", CALLS)
def test_a_ctrl_c_at_every_line_the_kit_runs_in_training_leaves_nothing(entry: str) -> None:
    build, budget = CALLS[entry]
    call, state, delivered = build()
    result = sweep(
        call, state, budget=budget, delivered=delivered, reports_interrupt=_is_interrupted_report
    )
    assert result.problems == []
    assert result.interrupted + result.finished == result.runs
    # a run may end before its index: a training run's line count varies with the data
    # order and the global RNG, so only most of the runs are interrupted
    assert result.interrupted >= result.runs // 2
