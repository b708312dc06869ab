"""``ChecksCallback`` on a real ``transformers.Trainer``: a tiny GPT-2 (random init, CPU), 8 steps.

Each test builds its trainer; the NaN is written into one gradient at the 5th optimizer step by a
tensor hook (``Poisoner``), the way a bad batch or a broken kernel would produce it.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import torchlens_nb as tl
from tests import models
from tests.checks.conftest import is_bitwise_equal, poison_next_backward, snapshot
from tests.integrations.conftest import (
    CULPRIT,
    POISONED_STEP,
    Poisoner,
    all_hooks,
    assert_clean_run,
    counters,
    token_rows,
)

transformers = pytest.importorskip("transformers")
from torchlens_nb.integrations import _attachment  # noqa: E402
from torchlens_nb.integrations.transformers import ChecksCallback  # noqa: E402

STEPS = 8


class PoisonAtStep(transformers.TrainerCallback):
    """Runs a :class:`Poisoner` when its step begins (before the step's first backward)."""

    def __init__(self, poisoner: Poisoner) -> None:
        self.poisoner = poisoner

    def on_step_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.poisoner.maybe_poison(state.global_step, model, optimizer.optimizer)


class RaiseAtStep(transformers.TrainerCallback):
    """A foreign failure: raises ``RuntimeError`` when step ``at`` begins."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            raise RuntimeError("the data pipeline broke")


def trainer_for(
    callbacks: list[Any], tmp_path: Any, *, accumulation: int = 1, **arguments: Any
) -> Any:
    """A ``Trainer`` on a fresh tiny GPT-2: batch 1, ``STEPS`` optimizer steps, AdamW, no
    logging or saving."""
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=STEPS,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=accumulation,
        learning_rate=1e-3,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        seed=0,
        **arguments,
    )
    return transformers.Trainer(
        model=models.tiny_gpt2().train(),
        args=args,
        train_dataset=token_rows(STEPS * accumulation),
        callbacks=callbacks,
    )


def test_a_nan_gradient_stops_train_before_the_fifth_write(tmp_path) -> None:
    poisoner = Poisoner()
    callback = ChecksCallback()
    trainer = trainer_for([PoisonAtStep(poisoner), callback], tmp_path)
    with pytest.raises(tl.debug.CheckViolationError, match=f"nonfinite_grad.*{CULPRIT}") as caught:
        trainer.train()
    optimizer = trainer.optimizer.optimizer  # the torch AdamW inside accelerate's wrapper
    # every weight and every AdamW moment still holds its value after step 4
    assert poisoner.before is not None
    assert is_bitwise_equal(snapshot(trainer.model, optimizer), poisoner.before)
    assert trainer.state.global_step == POISONED_STEP
    assert (caught.value.fields["culprit"], caught.value.fields["global_step"]) == (
        CULPRIT,
        POISONED_STEP,
    )
    report = callback.report
    assert report.status == "raised" and report.is_final
    assert report.findings[0].fields["culprit"] == CULPRIT
    assert counters(report, "attempts", "accepted", "raised") == (5, 4, 1)
    assert all_hooks(trainer.model, optimizer) == (0, 0, 0)
    assert callback.session is None


def test_a_clean_run_ends_clean_with_the_trainers_step_counts(tmp_path) -> None:
    callback = ChecksCallback()
    trainer = trainer_for([callback], tmp_path)
    trainer.train()
    report = callback.report
    assert trainer.state.global_step == STEPS
    assert_clean_run(report, STEPS)
    assert all_hooks(trainer.model, trainer.optimizer.optimizer) == (0, 0, 0)


def test_gradient_accumulation_counts_optimizer_steps_and_an_exact_k(tmp_path) -> None:
    callback = ChecksCallback()
    trainer = trainer_for([callback], tmp_path, accumulation=4)
    trainer.train()
    report = callback.report
    # 8 optimizer steps of 4 micro-batches: 32 backwards, K declared and observed 4 at every step
    assert trainer.state.global_step == STEPS
    assert counters(report, "attempts", "accepted", "backwards", "accumulation_factor") == (
        STEPS,
        STEPS,
        4 * STEPS,
        4,
    )
    assert report.counters["backwards_per_attempt"] == {"4": STEPS}
    assert [r["micro_batches"] for r in report.ledgers["steps"]] == [4] * STEPS
    assert report.status == "clean"


def test_the_last_step_of_an_uneven_epoch_declares_its_fewer_micro_batches(tmp_path) -> None:
    callback = ChecksCallback()
    # 10 rows at K=4: steps of 4, 4, 2 micro-batches per epoch; 6 steps = 2 epochs
    trainer = trainer_for([callback], tmp_path, accumulation=4)
    trainer.train_dataset = token_rows(10)
    trainer.args.max_steps = 6
    trainer.train()
    report = callback.report
    assert [r["micro_batches"] for r in report.ledgers["steps"]] == [4, 4, 2, 4, 4, 2]
    assert [r["backwards"] for r in report.ledgers["steps"]] == [4, 4, 2, 4, 4, 2]
    assert not [f for f in report.findings if f.code == "micro_batches_mismatch"]


def test_fp16_on_cpu_runs_without_a_gradscaler_and_the_session_is_told_so(tmp_path) -> None:
    # accelerate makes no GradScaler on CPU (fp16=True autocasts only): the wrapper's
    # scaler=None is the declaration, so no skip is blamed on a scaler that does not exist
    callback = ChecksCallback()
    trainer = trainer_for([callback], tmp_path, fp16=True)
    trainer.train()
    assert trainer.accelerator.scaler is None
    assert callback.report.ledgers["scale"]["method"] == "not_applicable"
    assert callback.report.counters["accepted"] == STEPS


def test_the_trainers_gradscaler_is_the_sessions_skip_ledger(tmp_path) -> None:
    # Stand-in for fp16 on a GPU (CPU has no fp16 GradScaler path in the Trainer): the
    # trainer's accelerator is given a CPU GradScaler before train(), so accelerate scales
    # the loss, unscales before the clip and steps through the scaler, as on a GPU.
    callback = ChecksCallback()

    class InfAtStep(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kwargs):
            if state.global_step == 2:
                poison_next_backward(dict(model.named_parameters())[CULPRIT], math.inf)

    trainer = trainer_for([InfAtStep(), callback], tmp_path)
    trainer.accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    trainer.train()
    report = callback.report
    # the scaler skipped step 2 (its scale halved once): counted as a skip, nothing raised
    assert report.ledgers["scale"]["method"] == "scale_decrements"
    assert report.ledgers["scale"]["skipped"] == 1
    assert counters(report, "attempts", "accepted", "skipped_by_scaler", "raised") == (
        STEPS,
        STEPS - 1,
        1,
        0,
    )
    assert [r["status"] for r in report.ledgers["steps"]][2] == "skipped"


def test_a_foreign_exception_leaves_no_hook_and_a_final_report(tmp_path) -> None:
    callback = ChecksCallback()
    trainer = trainer_for([RaiseAtStep(3), callback], tmp_path)
    with pytest.raises(RuntimeError, match="the data pipeline broke"):
        trainer.train()
    assert all_hooks(trainer.model, trainer.optimizer.optimizer) == (0, 0, 0)
    report = callback.report
    assert report.is_final and report.exit_reason == "exception RuntimeError"
    assert counters(report, "accepted") == (3,)


def test_a_callback_added_after_construction_detaches_on_its_own_raise(tmp_path) -> None:
    poisoner = Poisoner()
    trainer = trainer_for([PoisonAtStep(poisoner)], tmp_path)
    callback = ChecksCallback()
    trainer.add_callback(callback)
    with pytest.raises(tl.debug.CheckViolationError):
        trainer.train()
    assert all_hooks(trainer.model, trainer.optimizer.optimizer) == (0, 0, 0)
    assert callback.report.status == "raised"


def test_a_second_train_call_gets_a_new_session_and_report(tmp_path) -> None:
    callback = ChecksCallback()
    trainer = trainer_for([callback], tmp_path)
    trainer.train()
    first = callback.report
    trainer.train()
    assert callback.report is not first
    assert callback.report.counters["attempts"] == STEPS


def test_checks_and_their_actions_are_constructor_arguments(tmp_path) -> None:
    callback = ChecksCallback({"nonfinite_grad": {"action": "collect"}})
    poisoner = Poisoner()
    trainer = trainer_for([PoisonAtStep(poisoner), callback], tmp_path)
    trainer.train()  # collected, not raised: the NaN is written and training goes on
    report = callback.report
    assert [run.name for run in report.checks_run] == [
        "nonfinite_grad",
        "optimizer_roster",
        "fresh_grads",
        "step_moves",
        "outside_writes",
        "stability",
        "no_accepted_steps",
    ]
    assert trainer.state.global_step == STEPS
    # step 4 and every step after it (the written NaN poisons every later gradient)
    assert [f.fields["global_step"] for f in report.findings] == [4, 5, 6, 7]
    assert report.findings[0].fields["culprit"] == CULPRIT


@pytest.mark.parametrize(
    ("checks", "match"),
    [
        ({"nonfinite": {}}, r"unknown check 'nonfinite'; the checks are \['nonfinite_grad'"),
        ({"change": {"windw": 4}}, r"check 'change' has no option\(s\) \['windw'\]"),
        ({"change": {"action": "explode"}}, r"action must be one of"),
        ({"change": 4}, r"options of check 'change' must be a mapping"),
        (["change"], r"checks must be a mapping"),
    ],
    ids=["unknown-check", "unknown-option", "bad-action", "options-not-mapping", "a-list"],
)
def test_bad_checks_are_refused_when_the_callback_is_built(checks, match) -> None:
    with pytest.raises(tl.errors.DiagnosticArgumentError, match=match):
        ChecksCallback(checks)


def test_inside_a_kernel_the_sessions_dashboard_is_displayed(tmp_path, monkeypatch) -> None:
    shown: list[Any] = []
    monkeypatch.setattr(_attachment, "is_kernel_running", lambda: True)
    monkeypatch.setattr("IPython.display.display", shown.append)
    sessions: list[Any] = []

    class Spy(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            sessions.append(callback.session)

    callback = ChecksCallback()
    trainer_for([callback, Spy()], tmp_path).train()
    # the one object shown is the session's own dashboard (its feed's view)
    assert len(shown) == 1 and shown[0] is sessions[0].dashboard()


def test_outside_a_kernel_nothing_is_displayed(tmp_path, monkeypatch) -> None:
    shown: list[Any] = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    trainer_for([ChecksCallback()], tmp_path).train()
    assert shown == []


class ArmedLogGelu(torch.nn.Module):
    """GPT-2's MLP activation as ``log(gelu(x) + offset)``: finite while ``offset`` is 1 (gelu
    is above -0.17), a NaN born here once a callback sets it to -10."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("offset", torch.tensor(1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.nn.functional.gelu(x) + self.offset)  # the NaN's birth


class ArmAtStep(transformers.TrainerCallback):
    """Sets the activation's offset to -10 when step :data:`POISONED_STEP` begins."""

    def __init__(self, act: ArmedLogGelu) -> None:
        self.act = act

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == POISONED_STEP:
            self.act.offset.fill_(-10.0)


def test_err_investigate_replays_the_kept_micro_batch_and_names_the_forward_birth(
    tmp_path,
) -> None:
    act = ArmedLogGelu()
    callback = ChecksCallback()
    trainer = trainer_for([callback], tmp_path)
    trainer.model.transformer.h[0].mlp.act = act
    trainer.add_callback(ArmAtStep(act))
    with pytest.raises(tl.debug.CheckViolationError) as caught:
        trainer.train()
    error = caught.value
    assert error.replay is not None and error.replay.global_step == POISONED_STEP
    # the micro-batch the trainer handed to the model's forward: a row of the (shuffled) data
    kept = error.replay.inputs
    assert {"input_ids", "labels"} <= set(kept)
    assert any(torch.equal(kept["input_ids"][0], row["input_ids"]) for row in token_rows(STEPS))
    report = error.investigate()
    assert report.status == "found" and report.phase == "forward"
    born = report.first_bad_thing
    assert (born.func, born.kind, born.module) == ("log", "nan", "transformer.h.0.mlp.act")
    assert born.code.strip().endswith("# the NaN's birth")
    assert report.loss_source == "output.loss" and report.rng == "kept"
    assert all_hooks(trainer.model, trainer.optimizer.optimizer) == (0, 0, 0)
    assert not trainer.model._forward_pre_hooks  # the batch keeper is removed with the session
