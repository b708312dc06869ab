"""When one bug masks the probe another bug needs, triage judges the other on what the fix will
have: layers kept in plain containers are registered on triage's working copy, the step size is
judged with a double softmax undone, and a vanishing gradient is read on the stack of
saturating activations (which a layer repeated by ``[layer] * n`` does not hide)."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

import torchlens_nb as tl
from tests.recipes.state import assert_untouched, snapshot
from torchlens_nb.recipes.triage._output_vs_loss import loss_as_fixed, output_vs_loss
from torchlens_nb.recipes.triage._registration import register_strays, unregistered_findings
from torchlens_nb.recipes.triage._saturation import saturating_stack

from ._kit import CLASSES, FEATURES, mlp, tabular


class ListStack(nn.Module):
    def __init__(self, act: type[nn.Module] = nn.ReLU, shared: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = nn.Linear(FEATURES, 32)
        self.hidden = 4 * [nn.Linear(32, 32)] if shared else [nn.Linear(32, 32) for _ in range(4)]
        self.act = act()
        self.head = nn.Linear(32, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.first(x))
        for layer in self.hidden:
            x = self.act(layer(x))
        return self.head(x)


def test_a_plain_list_is_registered_on_the_copy_and_the_finding_says_so() -> None:
    model = ListStack()
    copy_ = copy.deepcopy(model)
    x, y = tabular(1)
    before = model(x)
    findings = unregistered_findings(copy_, (x, y), nn.CrossEntropyLoss())
    assert [f.code for f in findings] == ["params_not_registered"]
    assert list(findings[0].fields["registered_on_copy"]) == ["hidden"]
    assert "registered" in findings[0].message
    assert isinstance(copy_.hidden, nn.ModuleList)
    assert len(list(copy_.parameters())) == 4 + 8
    assert isinstance(model.hidden, list)  # the caller's model is another object
    assert torch.equal(copy_(x), before)  # same weights, same forward


def test_nothing_is_registered_on_a_model_that_registers_its_layers() -> None:
    model = mlp()
    x, y = tabular(1)
    assert register_strays(model, (x, y), nn.CrossEntropyLoss()) == ()
    assert unregistered_findings(model, (x, y), nn.CrossEntropyLoss()) == []


def test_a_vanishing_gradient_is_read_on_a_shared_sigmoid_stack_not_on_relu() -> None:
    x, y = tabular(1)
    shared = ListStack(nn.Sigmoid, shared=True)
    shared.first.weight.grad = torch.ones_like(shared.first.weight)
    held = shared.first.weight.grad
    finding = saturating_stack(shared, (x, y), nn.CrossEntropyLoss())
    assert finding is not None and finding.code == "grad_vanishing"
    assert finding.fields["activations"] == 5 and finding.fields["decades"] >= 2.0
    assert shared.first.weight.grad is held  # .grad put back
    assert saturating_stack(ListStack(nn.ReLU), (x, y), nn.CrossEntropyLoss()) is None
    shallow = mlp((FEATURES, 32, CLASSES), act=nn.Sigmoid)
    assert saturating_stack(shallow, (x, y), nn.CrossEntropyLoss()) is None


def test_the_step_size_loss_undoes_a_double_softmax_exactly() -> None:
    x, y = tabular(1)
    logits_model = mlp()
    softmax_model = nn.Sequential(copy.deepcopy(logits_model), nn.Softmax(dim=1))
    report = output_vs_loss(softmax_model, (x, y), nn.CrossEntropyLoss())
    fixed = loss_as_fixed(report, nn.CrossEntropyLoss())
    assert fixed is not None
    torch.testing.assert_close(
        fixed(softmax_model(x), y), F.cross_entropy(logits_model(x), y), rtol=1e-5, atol=1e-6
    )
    plain = output_vs_loss(logits_model, (x, y), nn.CrossEntropyLoss())
    assert loss_as_fixed(plain, nn.CrossEntropyLoss()) is None


def test_triage_names_the_lr_behind_a_plain_list_and_leaves_the_model_as_it_was() -> None:
    model = ListStack()
    x, y = tabular(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=4.0, momentum=0.9)
    before = snapshot(model)
    report = tl.recipes.triage(
        model, (x, y), nn.CrossEntropyLoss(), optimizer=optimizer, live=False
    )
    assert_untouched(before, model)
    assert isinstance(model.hidden, list)
    codes = {f.code for f in report.findings if f.severity in ("warning", "critical")}
    assert {"params_not_registered", "lr_too_high"} <= codes, report.card()
