"""tl.debug.investigate: replay one step and name where its NaN/Inf was born (issue 19).

Forward-born, loss-born and backward-born values, a batch that already holds NaN, a NaN that
only one dropout mask produces (reproduced under the kept RNG state, not under another), a
Hugging Face model with ``labels=``, every input form, and the user's state left bitwise as it
was.
"""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest
import torch
import transformers
from torch import nn

import torchlens_nb as tl
from tests.faults._guards import untouched
from tests.faults.fault_models import owned
from torchlens_nb.errors import DiagnosticArgumentError

from . import nan_models
from .nan_models import Finite, LogOfNegative, Net, X, line_of


def _sum(output: torch.Tensor) -> torch.Tensor:
    return output.sum()


def test_a_forward_born_nan_is_named_at_its_op_module_and_line() -> None:
    report = tl.debug.investigate(Net(LogOfNegative()), X, loss_fn=_sum)
    origin = report.first_bad_thing
    assert (report.status, report.phase, report.evidence) == ("found", "forward", "nonfinite")
    assert (origin.op, origin.func, origin.module) == ("log_1", "log", "block")
    assert (origin.file, origin.line) == (
        nan_models.__file__,
        line_of(LogOfNegative.forward, "torch.log(shifted)"),
    )
    assert report.forward.origin == origin and report.backward is None
    # mul, head's linear and the loss's sum carry it
    assert (report.num_propagated, report.loss_source) == (3, "loss_fn")
    assert report.lead.startswith("replayed step: nan born at log_1 in block (line ")


def test_a_nan_born_in_the_loss_function_is_named_at_the_loss_line() -> None:
    def log_loss(output: torch.Tensor) -> torch.Tensor:
        return torch.log(output - 100.0).mean()  # head's outputs are far below 100

    report = tl.debug.investigate(Net(Finite()), X, loss_fn=log_loss)
    origin = report.first_bad_thing
    assert (report.status, origin.func, origin.module) == ("found", "log", "")
    assert origin.line == line_of(log_loss, "torch.log(output - 100.0)")


class RowNorm(nn.Module):
    """The length of each row: sqrt(0) = 0 for an all-zero row, and d sqrt/dx there is inf."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        return torch.sqrt((h**2).sum(dim=-1))


def test_a_backward_born_nan_is_named_at_its_grad_fn_with_the_forward_line() -> None:
    torch.manual_seed(0)
    batch = torch.randn(3, 3)
    batch[1] = 0.0  # the all-zero row
    report = tl.debug.investigate(RowNorm(), batch, loss_fn=_sum)
    birth = report.first_bad_thing
    assert (report.status, report.phase, report.evidence) == ("found", "backward", "backward_nan")
    assert (birth.node, birth.op, birth.func) == ("SqrtBackward0", "sqrt_1", "sqrt")
    assert birth.line == line_of(RowNorm.forward, "torch.sqrt((h**2).sum(dim=-1))")
    assert report.forward.status == "clean" and report.backward.found
    assert report.lead.startswith("finite forward and loss (")
    # the lineage exit opens the forward op of the birth, from the replay's own record
    lineage = report.run_action("lineage", label="sqrt_1")
    assert (lineage.root, lineage.highlight_role) == ("sqrt_1", "forward op of the birth")


class DropoutLog(nn.Module):
    """NaN only when dropout zeroes unit 0: log(0 - 1) = nan; log(2 - 1) = 0 otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(x)
        return self.fc(h) + torch.log(h[:, :1] - 1.0)


def test_a_nan_of_one_dropout_mask_reproduces_only_under_the_kept_rng_state() -> None:
    model, batch = DropoutLog().train(), torch.ones(1, 4)
    torch.manual_seed(0)  # under seed 0 dropout zeroes unit 0; under seed 1 it keeps it
    kept = torch.get_rng_state()  # what ChecksSession keeps at the step's start
    assert bool(model(batch).isnan().any())  # the training step that failed
    reproduced = tl.debug.investigate(model, batch, loss_fn=_sum, rng_state={"cpu": kept})
    assert (reproduced.status, reproduced.first_bad_thing.func, reproduced.rng) == (
        "found",
        "log",
        "kept",
    )
    torch.manual_seed(1)
    other = torch.get_rng_state()
    changed = tl.debug.investigate(model, batch, loss_fn=_sum, rng_state={"cpu": other})
    assert (changed.status, changed.first_bad_thing, changed.phase) == (
        "not_reproduced",
        None,
        None,
    )
    assert changed.likely_reasons[0].startswith("the kept RNG state does not cover every stream")
    assert torch.equal(torch.get_rng_state(), other)  # the caller's stream is where it was


def test_a_one_element_output_is_the_default_loss() -> None:
    report = tl.debug.investigate(Net(Finite()), X)  # head's (1, 1) output
    assert (report.status, report.loss_source) == ("not_reproduced", "output")


class DictLoss(nn.Module):
    """Returns ``{"loss": ..., "logits": ...}`` as a Lightning ``training_step`` does."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(2, 1)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.head(x)
        return {"loss": torch.log(logits - 100.0).mean(), "logits": logits}


def test_a_dict_with_a_loss_tensor_is_the_default_loss() -> None:
    report = tl.debug.investigate(DictLoss(), X)
    assert (report.status, report.loss_source) == ("found", "output['loss']")
    assert report.first_bad_thing.func == "log"


def test_an_x_y_batch_with_a_loss_of_the_batch_calls_the_forward_with_x() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(4, 3), torch.randn(4, 1)
    batch = [x, y]
    report = tl.debug.investigate(
        nn.Linear(3, 1), batch, loss_fn=lambda out, b: ((out - b[1]) ** 2).mean()
    )
    assert report.status == "not_reproduced"  # the whole step ran: finite, nothing to find
    assert report.loss_source == "loss_fn" and report.backward is not None
    assert any("model(inputs[0])" in note for note in report.disclosures)
    y[1, 0] = float("nan")  # the label is an input of the loss: the NaN is the batch's own
    bad = tl.debug.investigate(
        nn.Linear(3, 1), batch, loss_fn=lambda out, b: ((out - b[1]) ** 2).mean()
    )
    assert bad.status == "nonfinite_input" and bad.nonfinite_inputs[0].field == "inputs[1]"
    assert bad.nonfinite_inputs[0].rows == (1,)


def test_forward_fn_replays_the_step_as_the_loop_calls_the_model() -> None:
    def training_step(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(batch["x"]).sum()

    report = tl.debug.investigate(Net(LogOfNegative()), {"x": X}, forward_fn=training_step)
    assert (report.status, report.phase, report.first_bad_thing.func) == ("found", "forward", "log")
    assert report.loss_source == "output"
    assert any("training_step(model, batch)" in note for note in report.disclosures)


def test_a_forward_that_refuses_the_batch_says_how_to_replay_it() -> None:
    report = tl.debug.investigate(nn.Linear(3, 1), [torch.ones(2, 3), torch.ones(2, 1)])
    assert report.status == "incomplete"
    assert "raised TypeError" in report.lead and "forward_fn=lambda model, batch" in report.lead


def test_the_cuda_states_of_the_checks_kit_are_accepted() -> None:
    state = {"cpu": torch.get_rng_state(), "cuda": []}  # no CUDA here: get_rng_state_all() == []
    report = tl.debug.investigate(Net(Finite()), X, loss_fn=_sum, rng_state=state)
    assert (report.status, report.rng) == ("not_reproduced", "kept")


def test_a_batch_that_already_holds_nan_names_its_fields_and_rows() -> None:
    class TwoFields(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 1)

        def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
            return (self.fc(x) * weight).mean()

    x = torch.ones(5, 2)
    x[1, 0] = float("nan")
    x[3, 1] = float("inf")
    report = tl.debug.investigate(TwoFields(), {"x": x, "weight": torch.ones(5, 1)})
    (fault,) = report.nonfinite_inputs
    assert (report.status, report.loss_source) == ("nonfinite_input", "output")
    assert (fault.field, fault.op, fault.kind, fault.rows, fault.num_rows) == (
        "x",
        "input_1",
        "mixed",
        (1, 3),
        2,
    )
    assert report.lead == (
        "the batch already holds NaN and Inf in x (rows 1, 3): the value comes from the data, "
        "not the model."
    )
    assert report.findings[0].code == "nonfinite_batch"


def test_an_intentional_mask_in_the_batch_is_not_a_fault() -> None:
    class MaskedScores(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.fc(x) + mask, dim=-1)[:, 0].sum()

    mask = torch.zeros(2, 4)
    mask[:, 1:] = float("-inf")  # an additive mask, neutralised by softmax
    report = tl.debug.investigate(MaskedScores(), (torch.ones(2, 4), mask))
    assert (report.status, report.nonfinite_inputs) == ("not_reproduced", ())
    assert report.intentional_infinities == ("input_2",)


@pytest.fixture
def gpt2_with_labels(tiny_gpt2) -> dict[str, torch.Tensor]:
    ids = torch.arange(8).unsqueeze(0)
    return {"input_ids": ids, "labels": ids}


def test_a_hugging_face_model_with_labels_uses_output_loss(tiny_gpt2, gpt2_with_labels) -> None:
    clean = tl.debug.investigate(tiny_gpt2, gpt2_with_labels)
    assert (clean.status, clean.loss_source) == ("not_reproduced", "output.loss")
    assert clean.loss == pytest.approx(tiny_gpt2(**gpt2_with_labels).loss.item(), rel=1e-5)
    weight = tiny_gpt2.transformer.h[1].mlp.c_fc.weight
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            weight[0, 0] = float("nan")
        broken = tl.debug.investigate(tiny_gpt2, gpt2_with_labels)
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    assert (broken.status, broken.first_bad_thing.module) == ("found", "transformer.h.1.mlp.c_fc")
    assert broken.nonfinite_params == ("transformer.h.1.mlp.c_fc.weight",)


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 1)

    def forward(self, a: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        return torch.log(self.fc(a) - 10.0).mean() + (0.0 if b is None else b.sum())


FORMS: list[Any] = [
    pytest.param(lambda a, b: a, id="tensor"),
    pytest.param(lambda a, b: (a, b), id="tuple"),
    pytest.param(lambda a, b: [a, b], id="list"),
    pytest.param(lambda a, b: {"a": a, "b": b}, id="dict"),
    pytest.param(lambda a, b: transformers.BatchEncoding({"a": a, "b": b}), id="BatchEncoding"),
]


@pytest.mark.parametrize("form", FORMS)
def test_every_input_form_of_trace_is_accepted(form) -> None:
    torch.manual_seed(0)
    report = tl.debug.investigate(Pair(), form(torch.ones(3, 2), torch.ones(3)))
    assert (report.status, report.first_bad_thing.func, report.loss_source) == (
        "found",
        "log",
        "output",
    )


def test_the_replay_leaves_everything_the_user_owns_bitwise_as_it_was() -> None:
    user = owned()  # train mode: BatchNorm buffers, Dropout, AdamW state, populated .grad
    ce = nn.CrossEntropyLoss()
    state = {"cpu": torch.get_rng_state()}
    grads = [p.grad for p in user.model.parameters()]
    with untouched([user.model], [user.optimizer], user.batch):
        finite = tl.debug.investigate(
            user.model, user.x, loss_fn=lambda out: ce(out, user.y), rng_state=state
        )
    assert finite.status == "not_reproduced"  # the full path ran: forward, forward, backward
    assert all(p.grad is g for p, g in zip(user.model.parameters(), grads))  # same tensors back
    x = user.x.clone()
    x[2, 0] = float("nan")
    with untouched([user.model], [user.optimizer], x):
        found = tl.debug.investigate(user.model, x, loss_fn=lambda out: ce(out, user.y))
    assert found.status == "nonfinite_input" and found.nonfinite_inputs[0].rows == (2,)


def test_the_report_renders_with_the_nonfinite_panel_and_its_lineage_outlives_the_replay() -> None:
    report = tl.debug.investigate(Net(LogOfNegative()), X, loss_fn=_sum)
    payload = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    data = payload["data"]
    assert (payload["report_type"], tl.widgets.panel_name(report)) == ("investigation", "nonfinite")
    assert (data["first_bad_thing"]["op"], data["uncertainty_zone"], data["mode"]) == (
        "log_1",
        [],
        "live",
    )
    assert [node["label"] for node in data["lineage_nodes"]] == ["log_1", "sub_1", "mul_1"]
    assert "forward" not in data and data["evidence"] == "nonfinite"
    gc.collect()  # the replay's trace is held by the actions, metadata only
    ring = report.run_action("expand", label="sub_1", direction="ancestors")
    assert [n.label for n in ring.nodes] == ["sub_1", "linear_1"]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        pytest.param(
            lambda: tl.debug.investigate(nn.Linear(2, 3), X),
            r"the model returned a torch.float32 tensor of shape \(1, 3\) on cpu with no tensor "
            r"\.loss.*pass loss_fn=lambda output",
            id="no-loss",
        ),
        pytest.param(
            lambda: tl.debug.investigate(Net(Finite()), X, loss_fn=lambda out: out.expand(2, 2)),
            r"loss_fn returned a torch.float32 tensor of shape \(2, 2\) on cpu; it must return",
            id="loss-not-scalar",
        ),
        pytest.param(
            lambda: tl.debug.investigate(Net(Finite()), X, loss_fn=lambda out: {}["logits"]),
            r"loss_fn raised KeyError: 'logits'; it is called as loss_fn\(output\)",
            id="loss-raises",
        ),
        pytest.param(
            lambda: tl.debug.investigate(Net(Finite()), X, loss_fn=3),
            r"loss_fn must be callable",
            id="loss-not-callable",
        ),
        pytest.param(
            lambda: tl.debug.investigate(Net(Finite()), X, forward_fn=3),
            r"forward_fn must be callable as forward_fn\(model, inputs\)",
            id="forward-fn-not-callable",
        ),
        pytest.param(
            lambda: tl.debug.investigate(Net(Finite()), X, rng_state={"gpu": 1}),
            r"rng_state has unknown key\(s\) \['gpu'\]; pass rng_state=\{'cpu'",
            id="rng-key",
        ),
        pytest.param(
            lambda: tl.debug.investigate(Net(Finite()), X, rng_state={"cpu": torch.ones(3)}),
            r"rng_state\['cpu'\] must be a 1-D uint8 CPU tensor",
            id="rng-cpu",
        ),
    ],
)
def test_what_investigate_refuses(call, match) -> None:
    with pytest.raises(DiagnosticArgumentError, match=match):
        call()
