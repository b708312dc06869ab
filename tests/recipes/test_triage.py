"""tl.recipes.triage: copies only, skipped checks never counted as a pass, progress, the partial
report of an interrupted run, and bad arguments refused (the bug zoo is tests/recipes/test_zoo.py)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.recipes.state import assert_untouched, snapshot
from tests.recipes.zoo import MLP, batch
from torchlens_nb.errors import DiagnosticArgumentError, InputFormError, ModelTypeError
from torchlens_nb.recipes.triage._optimizer_spec import read_optimizer
from torchlens_nb.recipes.triage._progress import TriageProgress
from torchlens_nb.report import TriageReport

CE = nn.CrossEntropyLoss()


def run_untouched(args: dict[str, Any], **options: Any) -> TriageReport:
    """triage(**args) asserting that the model (weights, buffers, .grad, modes, RNG), the
    optimizer's state and the batch are bitwise what they were."""
    model, optimizer, (x, y) = args["model"], args["optimizer"], args["batch"]
    before, state = snapshot(model), optimizer.state_dict()
    data = (x.clone(), y.clone())
    report = tl.recipes.triage(**args, live=False, **options)
    assert_untouched(before, model)
    assert optimizer.state_dict() == state
    assert torch.equal(x, data[0]) and torch.equal(y, data[1])
    return report


def test_without_an_optimizer_the_step_size_is_skipped_never_passed() -> None:
    model = MLP()
    report = tl.recipes.triage(model, batch(), CE, live=False)
    row = next(r for r in report.rows if r.check == "update_ratio")
    assert row.status == "skipped" and "pass optimizer=" in (row.reason or "")
    assert report.status == "incomplete"
    assert report.lead == (
        "8 of 10 checks passed and none failed; not judged: training_setup (inconclusive), "
        "update_ratio (skipped)."
    )  # without an optimizer instance its param groups are not read either
    assert [u.check for u in report.unavailable] == [
        "update_ratio",
        "training_setup: optimizer param groups",
    ]


def test_a_batch_of_one_skips_batch_independence_with_the_reason() -> None:
    x, y = batch()
    report = tl.recipes.triage(
        MLP(), (x[:1], y[:1]), CE, checks=["batch_independence", "weight_distribution"], live=False
    )
    (row, _) = report.rows
    assert (row.status, row.reason) == (
        "skipped",
        "the batch holds 1 example: independence needs 2 or more",
    )


def test_checks_picks_a_subset_and_runs_it_in_run_order() -> None:
    report = tl.recipes.triage(
        MLP(), batch(), CE, checks=["weight_distribution", "init_loss"], live=False
    )
    assert [r.check for r in report.rows] == ["init_loss", "weight_distribution"]


def test_causal_dependency_runs_when_told_the_sequence_axis() -> None:
    from tests.recipes.planted import CausalAttention

    class Classify(nn.Module):  # (B, T, 4) -> (B, T, 4) scores, classes on the last axis
        def __init__(self, diagonal: int) -> None:
            super().__init__()
            self.attention = CausalAttention(diagonal=diagonal)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attention(x)

    torch.manual_seed(0)
    x, y = torch.randn(2, 6, 4), torch.randint(0, 4, (2, 6))
    loss = lambda out, t: nn.functional.cross_entropy(out.transpose(1, 2), t)  # noqa: E731
    leaky = tl.recipes.triage(
        Classify(diagonal=2), (x, y), loss, checks=["causal_dependency"], seq_dim=1, live=False
    )
    causal = tl.recipes.triage(
        Classify(diagonal=1), (x, y), loss, checks=["causal_dependency"], seq_dim=1, live=False
    )
    assert leaky.root_cause is not None and leaky.root_cause.code == "causal_leak"
    assert causal.status == "pass"


class InterruptAfter:
    """A cross-entropy loss that raises KeyboardInterrupt on its ``calls``-th call."""

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def __call__(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.calls -= 1
        if self.calls == 0:
            raise KeyboardInterrupt
        return nn.functional.cross_entropy(out, y)


def test_a_keyboard_interrupt_returns_the_partial_report() -> None:
    model = MLP(dead_bias=-100.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    args = {"model": model, "batch": batch(), "optimizer": optimizer}
    # init_loss, output_vs_loss and gradient_flow call the loss once each, then 20 overfit steps
    report = run_untouched({**args, "loss_fn": InterruptAfter(3 + 20)}, loss_kind="cross_entropy")
    assert report.status == "interrupted"
    assert [(r.check, r.status) for r in report.rows] == [
        ("training_setup", "pass"),
        ("data_sanity", "pass"),
        ("init_loss", "pass"),
        ("output_vs_loss", "pass"),
        ("gradient_flow", "warn"),
        ("batch_independence", "inconclusive"),
        ("overfit_one_batch", "skipped"),
        ("random_input_test", "skipped"),
        ("update_ratio", "skipped"),
        ("weight_distribution", "skipped"),
    ]
    assert report.rows[6].reason == "interrupted while it ran"
    assert report.lead.startswith(
        "interrupted during overfit_one_batch: 6 of 10 checks finished; root cause in gradient_flow"
    )
    assert list(report.reports) == [r.check for r in report.rows[:6]]


def test_outside_a_notebook_a_text_line_shows_the_progress(capsys: pytest.CaptureFixture) -> None:
    tl.recipes.triage(MLP(), batch(), CE, checks=["init_loss", "weight_distribution"])
    assert capsys.readouterr().err.splitlines()[:2] == [
        "[torchlens_nb] triage 1/2: init_loss",
        "[torchlens_nb] triage 2/2: weight_distribution",
    ]


class Recorder:
    """Stands in for the live panel sink: keeps every report pushed to it."""

    pushed: ClassVar[list[TriageReport]] = []

    def __call__(self, report: TriageReport) -> None:
        Recorder.pushed.append(report)


def test_the_live_panel_gets_each_check_and_the_overfit_curve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torchlens_nb.recipes.triage import _progress as _triage_progress

    Recorder.pushed = []
    monkeypatch.setattr(_triage_progress, "PanelSink", Recorder)
    monkeypatch.setattr("torchlens_nb.recipes.training._overfit.LIVE_INTERVAL_S", 0.0)  # every step
    final = tl.recipes.triage(
        MLP(), batch(), CE, checks=["init_loss", "overfit_one_batch"], steps=5, live=True
    )
    pushed = Recorder.pushed
    assert [(r.status, r.current, r.progress["done"]) for r in pushed[:2]] == [
        ("running", "init_loss", 0),
        ("running", "overfit_one_batch", 1),
    ]
    curves = [len(r.live_chart["labels"]) for r in pushed if r.live_chart is not None]
    assert curves == [1, 2, 3, 4, 5]  # the loss curve grows while overfit_one_batch trains
    assert pushed[-1] is final and final.status == "fail"  # 5 steps cannot memorise the batch
    assert final.live_chart is None and final.progress == {"done": 2, "total": 2, "current": None}


def test_an_optimizer_is_read_never_stepped() -> None:
    model = MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    report = run_untouched(
        {"model": model, "batch": batch(), "loss_fn": CE, "optimizer": optimizer},
        checks=["update_ratio"],
    )
    assert "update_ratio judged SGD lr=0.05 over 10 steps" in report.disclosures


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"checks": ["overfit"]}, DiagnosticArgumentError, r"unknown checks \['overfit'\]"),
        ({"checks": "init_loss"}, DiagnosticArgumentError, r"checks must be a list"),
        ({"optimizer": "adam"}, DiagnosticArgumentError, r"optimizer must be your optimizer"),
        (
            {"optimizer": lambda groups: torch.optim.SGD(groups, lr=0.1), "lr": 0.1},
            DiagnosticArgumentError,
            r"a factory sets its own lr",
        ),
        ({"seq_dim": 0}, DiagnosticArgumentError, r"seq_dim must be None or an int >= 1"),
        ({"steps": 0}, DiagnosticArgumentError, r"steps must be an int in \[1, 100000\], got 0"),
        ({"live": "yes"}, DiagnosticArgumentError, r"live must be True, False or None"),
    ],
    ids=["unknown-check", "checks-string", "optimizer-string", "factory-with-lr", "seq-dim-0",
         "steps-0", "live-string"],
)  # fmt: skip
def test_bad_arguments_are_refused_before_anything_runs(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    model = MLP()
    before = snapshot(model)
    with pytest.raises(error, match=match):
        tl.recipes.triage(model, batch(), CE, **kwargs)
    assert_untouched(before, model)


def test_models_triage_cannot_copy_or_run_are_refused() -> None:
    scripted = torch.jit.script(nn.Sequential(nn.Linear(20, 10)))
    with pytest.raises(ModelTypeError, match=r"TorchScript module .*triage trains a deep copy"):
        tl.recipes.triage(scripted, batch(), CE, live=False)
    with pytest.raises(InputFormError, match=r"on the meta device: it has no values to run"):
        tl.recipes.triage(nn.Linear(20, 10, device="meta"), batch(), CE, live=False)


def test_in_a_notebook_one_live_panel_is_displayed_and_updated_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import IPython.display

    shown: list[Any] = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, display_id=False: shown.append(obj))
    final = tl.recipes.triage(
        MLP(), batch(), CE, checks=["init_loss", "weight_distribution"], live=True
    )
    (widget,) = shown  # tl.report.live_panel's widget, displayed once
    assert (widget.panel, widget.report) == ("triage", final)
    assert widget.payload["status"] == "pass" and widget.payload["data"]["progress"]["done"] == 2


class RaiseAfter(InterruptAfter):
    """A cross-entropy loss that raises ValueError on its ``calls``-th call."""

    def __call__(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.calls -= 1
        if self.calls == 0:
            raise ValueError("labels out of range")
        return nn.functional.cross_entropy(out, y)


def test_a_loss_fn_that_raises_mid_run_ends_the_progress_in_a_final_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shown: list[TriageReport] = []
    monkeypatch.setattr(TriageProgress, "show", lambda _, r: shown.append(r))
    with pytest.raises(ValueError, match="labels out of range"):
        tl.recipes.triage(MLP(), batch(), RaiseAfter(3 + 5), loss_kind="cross_entropy")
    final = shown[-1]
    assert final.status == "interrupted" and final.tables
    assert final.lead.startswith(
        "overfit_one_batch raised ValueError: labels out of range: 6 of 10 checks finished"
    )
    assert final.rows[6].reason == "raised ValueError: labels out of range"
    assert final.rows[7].reason == (
        "not run: overfit_one_batch raised ValueError: labels out of range"
    )


class OtherModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(20, 10)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"loss_kind": "bogus"}, DiagnosticArgumentError, r"loss_kind must be None or one of"),
        ({"seq_dim": 2}, DiagnosticArgumentError, r"seq_dim=2 but the input has 2 dimensions"),
        (
            {"optimizer": torch.optim.Adam(OtherModel().parameters())},
            DiagnosticArgumentError,
            r"none is a parameter of this model",
        ),
        (
            {"loss_fn": lambda out, y: float(CE(out, y))},
            DiagnosticArgumentError,
            r"loss_fn returned float .*do not call .item\(\)",
        ),
        (
            {"loss_fn": lambda out, y: (out.argmax(1) != y).sum()},
            DiagnosticArgumentError,
            r"loss_fn returned a torch.int64 tensor of shape \(\)",
        ),
        ({"batch": (torch.zeros(0, 20), torch.zeros(0, dtype=torch.long))},
         DiagnosticArgumentError, r"the batch holds no sample"),
    ],
    ids=["loss-kind-bogus", "seq-dim-out-of-range", "optimizer-of-another-model",
         "loss-returns-float", "loss-returns-int-tensor", "empty-batch"],
)  # fmt: skip
def test_bad_input_is_refused_with_an_error_naming_the_argument(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    model = MLP()
    before = snapshot(model)
    args = {"batch": batch(), "loss_fn": CE, **kwargs}
    with pytest.raises(error, match=match):
        tl.recipes.triage(model, live=False, **args)
    assert_untouched(before, model)


def test_an_adamw_instance_is_rebuilt_from_its_groups_and_its_constructor() -> None:
    model = MLP()
    groups = [
        {"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": 0.05},
        {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=5e-4)  # its defaults hold decoupled_weight_decay
    report = run_untouched(
        {"model": model, "batch": batch(), "loss_fn": CE, "optimizer": optimizer},
        checks=["training_setup", "update_ratio"],
    )
    assert [(r.check, r.status) for r in report.rows] == [
        ("training_setup", "pass"),
        ("update_ratio", "pass"),
    ]
    assert "update_ratio judged AdamW lr=0.0005 over 10 steps" in report.disclosures
    setup = report.check_report("training_setup")
    assert [g["weight_decay"] for g in setup.table("param_groups").dicts()] == [0.05, 0.0]


class NeedsClosure(torch.optim.Optimizer):
    """An optimizer whose constructor takes a required argument its groups do not carry."""

    def __init__(self, params: Any, schedule: Any, lr: float = 0.1) -> None:
        super().__init__(params, {"lr": lr})
        self.schedule = schedule


def test_an_optimizer_that_cannot_be_rebuilt_is_a_skipped_row_with_the_reason() -> None:
    model = MLP()
    optimizer = NeedsClosure(model.parameters(), schedule=lambda step: 1.0)
    report = tl.recipes.triage(
        model, batch(), CE, optimizer=optimizer, checks=["update_ratio"], live=False
    )
    (row,) = report.rows
    assert row.status == "skipped"
    assert (row.reason or "").startswith("NeedsClosure could not be rebuilt from its param groups")
    assert "pass optimizer= a factory" in (row.reason or "")


def test_wrapped_optimizers_are_read_through_their_wrapper() -> None:
    from lightning.pytorch.core.optimizer import LightningOptimizer

    model = MLP()
    inner = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    report = tl.recipes.triage(
        model,
        batch(),
        CE,
        optimizer=LightningOptimizer(inner),
        checks=["update_ratio"],
        live=False,
    )
    assert "update_ratio judged SGD lr=0.05 over 10 steps" in report.disclosures


def test_a_trained_model_below_chance_is_compared_with_a_reinitialised_copy() -> None:
    from tests.recipes.planted import teacher_classifier

    trained, x, y = teacher_classifier()  # it IS the labelling rule: its loss is far below ln 3
    report = tl.recipes.triage(trained, (x, y), CE, checks=["init_loss"], live=False)
    (row,) = report.rows
    assert row.status == "pass" and report.findings == ()
    assert "a re-initialised copy scores" in row.lead and "not a shortcut" in row.lead


class LabelInInputs(nn.Module):
    """An untrained model that reads the label off its input: a real shortcut."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(x[:, 0].long(), 3).float() * 10


def test_a_model_below_chance_even_when_reinitialised_is_still_a_shortcut() -> None:
    from tests.recipes.planted import teacher_classifier

    _, x, y = teacher_classifier()
    leaky = torch.cat([y[:, None].float(), x], dim=1)
    report = tl.recipes.triage(LabelInInputs(), (leaky, y), CE, checks=["init_loss"], live=False)
    assert report.root_cause is not None and report.root_cause.code == "loss_far_below_expected"


def test_a_root_cause_row_shown_above_its_own_status_says_why() -> None:
    torch.manual_seed(0)
    dead = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
    with torch.no_grad():
        dead[0].bias.fill_(-100.0)  # every ReLU unit dead: no gradient reaches layer 0
    data = (torch.randn(64, 8), torch.randint(0, 3, (64,)))
    report = tl.recipes.triage(
        dead, data, nn.CrossEntropyLoss(), checks=["gradient_flow", "overfit_one_batch"], live=False
    )
    row = next(r for r in report.rows if r.check == "gradient_flow")
    assert (row.is_root_cause, row.status, report.reports["gradient_flow"].status) == (
        True,
        "fail",
        "warn",
    )
    assert row.reason is not None and row.reason.endswith(
        "Shown as fail, though the check alone reads warn: as the root cause it explains "
        "overfit_one_batch.cannot_overfit."
    )
    # a row at its check's own status carries no such word
    assert next(r for r in report.rows if r.check == "overfit_one_batch").reason is None


def test_the_step_size_check_judges_a_warmups_peak_lr_not_its_first_step() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 100))
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)  # the warmup's first step
    spec = read_optimizer(optimizer, None, model)
    # the schedule's base lr (0.1), the one the warmup reaches, is what is judged
    assert spec.lr == pytest.approx(0.1)
    assert "the first step runs at 0.001" in spec.label
    assert spec is not None and spec.make is not None
    rebuilt = spec.make([{"params": list(model.parameters())}])
    assert rebuilt.param_groups[0]["lr"] == pytest.approx(0.1)
