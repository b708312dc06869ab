"""``ChecksCallback`` on a real ``lightning.Trainer(accelerator="cpu", max_steps=8)``.

The module is a seeded MLP regressor; the NaN is written into one gradient at the 5th optimizer
step by a tensor hook, inside the closure Lightning's automatic optimization passes to
``optimizer.step``.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.checks.conftest import is_bitwise_equal, poison_next_backward, snapshot
from tests.integrations.conftest import (
    POISONED_STEP,
    Poisoner,
    all_hooks,
    assert_clean_run,
    counters,
)

pl = pytest.importorskip("lightning.pytorch")
from torchlens_nb.integrations.lightning import ChecksCallback  # noqa: E402

STEPS = 8
CULPRIT = "layer.0.weight"


class Regressor(pl.LightningModule):
    """Linear(8, 16) -> ReLU -> Linear(16, 4), mean squared error, AdamW(lr=1e-2)."""

    def __init__(self, optimizers: int = 1) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        self.optimizer_count = optimizers
        if optimizers > 1:
            self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.layer(x), y)
        if not self.automatic_optimization:
            self.manual_backward(loss)
        return loss

    def configure_optimizers(self) -> Any:
        optimizers = [torch.optim.AdamW(self.parameters(), lr=1e-2)]
        return optimizers * self.optimizer_count if self.optimizer_count > 1 else optimizers[0]


def loader(batches: int) -> torch.utils.data.DataLoader:
    """``batches`` seeded batches of 4 rows."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4 * batches, 8, generator=generator)
    y = torch.randn(4 * batches, 4, generator=generator)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)


class PoisonAtStep(pl.Callback):
    """Runs a :class:`Poisoner` at the first micro-batch of its step; keeps that batch."""

    def __init__(self, poisoner: Poisoner) -> None:
        self.poisoner = poisoner
        self.batch: Any = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.poisoner.at_step and self.batch is None:
            self.batch = batch
            self.poisoner.maybe_poison(trainer.global_step, pl_module, trainer.optimizers[0])


def fit(callbacks: list[Any], *, accumulate: int = 1, module: Any = None, **options: Any) -> Any:
    module = module if module is not None else Regressor()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=STEPS,
        accumulate_grad_batches=accumulate,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        **options,
    )
    trainer.fit(module, loader(STEPS * accumulate))
    return trainer, module


@pytest.mark.parametrize("accumulate", [1, 2], ids=["K=1", "K=2"])
def test_a_nan_gradient_stops_fit_before_the_fifth_write(accumulate: int) -> None:
    poisoner = Poisoner(CULPRIT)
    spy, callback, module = PoisonAtStep(poisoner), ChecksCallback(), Regressor()
    with pytest.raises(tl.debug.CheckViolationError, match=f"nonfinite_grad.*{CULPRIT}") as caught:
        fit([spy, callback], accumulate=accumulate, module=module)
    optimizer = module.trainer.optimizers[0]
    assert poisoner.before is not None
    assert is_bitwise_equal(snapshot(module, optimizer), poisoner.before)  # as after step 4
    assert module.trainer.global_step == POISONED_STEP
    error = caught.value
    assert (error.fields["culprit"], error.fields["global_step"]) == (CULPRIT, POISONED_STEP)
    report = callback.report
    assert report.status == "raised" and report.findings[0].fields["culprit"] == CULPRIT
    assert counters(report, "attempts", "accepted", "raised") == (5, 4, 1)
    assert all_hooks(module, optimizer) == (0, 0, 0)
    # the step's batch is kept for err.investigate(): the poisoned micro-batch itself
    assert error.replay is not None and error.replay.global_step == POISONED_STEP
    assert error.replay.micro_batch == 0
    assert all(torch.equal(a, b) for a, b in zip(error.replay.inputs, spy.batch))


def test_a_clean_run_ends_clean_with_the_trainers_step_counts() -> None:
    callback = ChecksCallback()
    trainer, module = fit([callback])
    report = callback.report
    assert trainer.global_step == STEPS
    assert_clean_run(report, STEPS)
    assert all_hooks(module, trainer.optimizers[0]) == (0, 0, 0)


def test_accumulate_grad_batches_2_is_counted_exactly() -> None:
    callback = ChecksCallback()
    trainer, _ = fit([callback], accumulate=2)
    report = callback.report
    # 8 optimizer steps of 2 micro-batches (the second runs inside optimizer.step's closure)
    assert trainer.global_step == STEPS
    assert counters(report, "attempts", "accepted", "backwards", "accumulation_factor") == (
        STEPS,
        STEPS,
        2 * STEPS,
        2,
    )
    assert report.counters["backwards_per_attempt"] == {"2": STEPS}
    assert report.status == "clean"


def test_the_check_judges_the_gradients_the_closure_produced() -> None:
    # the session's step pre-hook runs before Lightning's closure: it must evaluate the
    # closure first, so the NaN of this very step is found (not the previous step's gradient)
    seen: list[bool] = []

    class GradientsAtPreStep(pl.Callback):
        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            seen.append(bool(torch.isfinite(pl_module.layer[0].weight.grad).all()))

    poisoner = Poisoner(CULPRIT)
    with pytest.raises(tl.debug.CheckViolationError):
        fit([PoisonAtStep(poisoner), GradientsAtPreStep(), ChecksCallback()])
    assert seen == [True] * POISONED_STEP + [False]  # the raise came after the 5th closure


def test_16_mixed_on_cpu_runs_as_bf16_without_a_scaler_and_the_session_is_told_so() -> None:
    # Lightning replaces precision="16-mixed" by "bf16-mixed" on CPU (with a warning): no
    # GradScaler runs, and the plugin's scaler=None is the declaration
    callback = ChecksCallback()
    with pytest.warns(UserWarning, match="AMP with fp16 is not supported on CPU"):
        trainer, _ = fit([callback], precision="16-mixed")
    assert trainer.precision_plugin.precision == "bf16-mixed"
    assert callback.report.ledgers["scale"]["method"] == "not_applicable"
    assert callback.report.counters["accepted"] == STEPS


def test_the_16_mixed_plugins_gradscaler_is_the_sessions_skip_ledger() -> None:
    # Stand-in for 16-mixed on a GPU: Lightning's own MixedPrecision plugin with its CPU
    # GradScaler (passed as a plugin, Lightning keeps it); an inf at step 2 makes it skip
    from lightning.pytorch.plugins.precision import MixedPrecision

    class InfAtStep(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step == 2 and batch_idx == 2:
                poison_next_backward(pl_module.layer[0].weight, math.inf)

    callback = ChecksCallback()
    trainer, _ = fit([InfAtStep(), callback], plugins=[MixedPrecision("16-mixed", "cpu")])
    report = callback.report
    assert isinstance(trainer.precision_plugin.scaler, torch.amp.GradScaler)
    assert report.ledgers["scale"]["method"] == "scale_decrements"
    # Lightning counts the skipped step too (global_step advances): 8 attempts, 1 skipped
    assert counters(report, "attempts", "accepted", "skipped_by_scaler", "raised") == (
        STEPS,
        STEPS - 1,
        1,
        0,
    )
    assert report.ledgers["scale"]["skipped"] == 1


def test_a_foreign_exception_leaves_no_hook_and_a_final_report() -> None:
    class Broken(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if self.trainer.global_step == 3:
                raise RuntimeError("the data pipeline broke")
            return super().training_step(batch, batch_idx)

    callback, module = ChecksCallback(), Broken()
    with pytest.raises(RuntimeError, match="the data pipeline broke"):
        fit([callback], module=module)
    assert all_hooks(module, module.trainer.optimizers[0]) == (0, 0, 0)
    report = callback.report
    assert report.is_final and report.exit_reason == "exception RuntimeError"
    assert report.counters["accepted"] == 3


def test_two_optimizers_are_refused_before_any_step() -> None:
    callback, module = ChecksCallback(), Regressor(optimizers=2)
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="watches one optimizer, the"):
        fit([callback], module=module)
    assert all(torch.equal(before[n], p) for n, p in module.named_parameters())
    assert callback.session is None


def test_keep_batch_must_be_a_bool() -> None:
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="keep_batch must be True"):
        ChecksCallback(keep_batch=1)


class ManualAccumulation(Regressor):
    """Manual optimization with the module's own accumulation: a step every 2nd batch (Lightning
    forbids ``accumulate_grad_batches`` here)."""

    def __init__(self, poison_batch: int | None = None) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.poison_batch = poison_batch
        self.before: dict[str, torch.Tensor] | None = None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        optimizer = self.optimizers()
        x, y = batch
        if batch_idx == self.poison_batch:  # the first micro-batch of its step
            self.before = snapshot(self, optimizer.optimizer)
            poison_next_backward(self.layer[0].weight, math.nan)
        loss = nn.functional.mse_loss(self.layer(x), y) / 2
        self.manual_backward(loss)
        if batch_idx % 2 == 1:
            optimizer.step()
            optimizer.zero_grad()
        return loss


def manual_fit(module: ManualAccumulation, callback: ChecksCallback) -> Any:
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    trainer.fit(module, loader(8))  # 8 batches: 4 optimizer steps of 2 micro-batches
    return trainer


def test_manual_optimization_with_its_own_accumulation_is_counted_as_the_steps_it_took() -> None:
    callback, module = ChecksCallback(), ManualAccumulation()
    trainer = manual_fit(module, callback)
    report = callback.report
    assert trainer.global_step == 4
    assert counters(report, "attempts", "accepted", "skipped", "backwards") == (4, 4, 0, 8)
    assert report.counters["backwards_per_attempt"] == {"2": 4}
    assert report.status == "clean"
    assert all_hooks(module, trainer.optimizers[0]) == (0, 0, 0)


def test_manual_accumulation_stops_a_nan_of_the_first_micro_batch_before_the_write() -> None:
    callback, module = ChecksCallback(), ManualAccumulation(poison_batch=4)
    with pytest.raises(tl.debug.CheckViolationError, match=CULPRIT) as caught:
        manual_fit(module, callback)
    assert module.before is not None
    optimizer = module.trainer.optimizers[0]
    assert is_bitwise_equal(snapshot(module, optimizer), module.before)
    report = callback.report
    assert counters(report, "attempts", "accepted", "skipped", "raised") == (3, 2, 0, 1)
    assert caught.value.fields["attempt"] == 2
    codes = [f.code for f in report.findings]
    assert "nonfinite_grad_skipped_by_loop" not in codes


class SqrtRegressor(pl.LightningModule):
    """``forward(self, x)`` scales by ``sqrt(x[:, 0] + 10)``; ``training_step`` computes the loss,
    calls ``self.log`` and returns ``{"loss": ...}``. A batch with ``x[:, 0] < -10`` makes a NaN
    born in the forward (the batch itself is finite)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x) * torch.sqrt(x[:, :1] + 10.0)  # the NaN's birth

    def training_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return {"loss": loss}

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=1e-2)


def test_err_investigate_replays_the_training_step_and_names_the_forward_birth() -> None:
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(4 * STEPS, 8, generator=generator), torch.randn(4 * STEPS, 4)
    x[4 * POISONED_STEP + 2, 0] = -20.0  # one row of the 5th step's batch
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
    callback, module = ChecksCallback(), SqrtRegressor()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    with pytest.raises(tl.debug.CheckViolationError) as caught:
        trainer.fit(module, data)
    error = caught.value
    assert error.replay is not None and error.replay.global_step == POISONED_STEP
    report = error.investigate()  # the replay calls training_step, not module(x, y)
    assert report.status == "found" and report.phase == "forward"
    born = report.first_bad_thing
    assert (born.func, born.kind) == ("sqrt", "nan")
    assert (
        born.code.strip() == "return self.layer(x) * torch.sqrt(x[:, :1] + 10.0)  # the NaN's birth"
    )
    assert report.loss_source == "output['loss']"
    assert any("training_step(batch, batch_idx=4)" in note for note in report.disclosures)
    assert "log" not in vars(module) and "log_dict" not in vars(module)  # the no-ops are gone
    # self.log raises once fit() is gone (MisconfigurationException); the replay's training
    # step runs past it: on a finite batch the whole step, backward included, is checked
    with pytest.raises(
        pl.utilities.exceptions.MisconfigurationException, match="result collection is not"
    ):
        module.log("train_loss", torch.tensor(1.0))
    clean = (x[:4], y[:4])
    finite = tl.debug.investigate(module, clean, forward_fn=error.replay.forward_fn)
    assert finite.status == "not_reproduced" and finite.backward is not None
    assert all_hooks(module, trainer.optimizers[0]) == (0, 0, 0)
