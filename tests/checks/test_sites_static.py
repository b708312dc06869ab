"""Cost laws of the sites: no per-parameter host read at S-A, one batched norm per backward,
one host read per optimizer attempt."""

from __future__ import annotations

import ast
import inspect
import math
import textwrap

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests import models
from tests.checks.conftest import change_session, hook_counts, nonfinite_session
from torchlens_nb.checks.scans import _norms
from torchlens_nb.checks.session import _sites

_HOST_READS = {"item", "tolist", "cpu", "numpy", "__float__", "__bool__", "__int__"}
_HOST_CASTS = {"float", "int", "bool"}


def _calls(function) -> list[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.append(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_grad_arrival_callback_reads_no_tensor_value() -> None:
    arrival = _calls(_sites.GradSites._on_grad_arrival)
    assert "queue_callback" in arrival  # the source really is the S-A callback
    assert not set(arrival) & (_HOST_READS | _HOST_CASTS)
    backward_end = _calls(_sites.GradSites._on_backward_end)
    assert "device_norms" in backward_end
    assert not set(backward_end) & (_HOST_READS | _HOST_CASTS)


def test_sites_module_never_reads_a_tensor_to_the_host() -> None:
    tree = ast.parse(inspect.getsource(_sites))
    attributes = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not attributes & _HOST_READS


def test_one_batched_norm_per_backward_and_one_host_read_per_attempt(monkeypatch) -> None:
    calls = []
    real = torch._foreach_norm

    def counting(tensors, *args, **kwargs):
        calls.append(len(tensors))
        return real(tensors, *args, **kwargs)

    monkeypatch.setattr(torch, "_foreach_norm", counting)
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_change_check()
    session.register_nonfinite_grad_check()
    with session:
        for _ in range(3):
            optimizer.zero_grad()
            for _ in range(2):  # accumulation: two backwards per attempt
                model(torch.randn(4, 8)).square().mean().backward()
            optimizer.step()
    # per attempt: one call per backward over the 4 gradients that arrived (2), one at the step
    # site over the 4 the optimizer uses; plus the before/after weight norms of the one step the
    # movement sampler took (accepted step 0 of every 50): 3 x 3 + 2 = 11
    assert calls == [4] * 11
    assert session._engine.host_reads == 3  # one per attempt, at S-B


def test_the_batched_norms_equal_per_tensor_norms() -> None:
    torch.manual_seed(0)
    # stacked groups (same shape, <= 2,048 elements), lone small tensors, large ones, fp16,
    # a non-contiguous view, an empty tensor, a sparse one and a complex one
    tensors = [torch.randn(8, 8) for _ in range(3)] + [
        torch.randn(3),
        torch.randn(5000),
        torch.randn(4, 4, dtype=torch.float16),
        torch.randn(4, 4, dtype=torch.float16),
        torch.randn(4, 6).t(),
        torch.randn(6, 4),
        torch.zeros(0),
        torch.sparse_coo_tensor([[0, 2]], [3.0, 4.0], (5,), check_invariants=True),
        torch.tensor([3 + 4j, 0j], dtype=torch.complex64),
    ]
    ((order, norms),) = _norms.device_norms(tensors, range(len(tensors)))
    measured = dict(zip(order, norms.tolist()))
    expected = [torch.linalg.vector_norm(t.to_dense().abs().double()).item() for t in tensors]
    assert sorted(measured) == list(range(len(tensors)))
    assert [measured[i] for i in range(len(tensors))] == pytest.approx(expected, rel=1e-6)
    assert measured[10] == 5.0  # sqrt(3^2 + 4^2)
    assert measured[11] == 5.0  # |3 + 4i| = 5: the norm of the magnitudes


def _train(model, optimizer, steps: int, x: torch.Tensor, clip: bool = False) -> None:
    for _ in range(steps):
        optimizer.zero_grad()
        model(x).square().mean().backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e-3)
        optimizer.step()


def test_the_step_site_read_shares_the_one_host_read_per_attempt() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nonfinite_session(model, optimizer)
    with session:
        # the clip changes every gradient between backward and step: all 4 are read again at
        # the step site, in the same host read as the backward's norms
        _train(model, optimizer, 3, torch.randn(4, 8), clip=True)
    assert session._engine.host_reads == 3
    assert session.report().status == "clean"


def test_a_stable_graph_keeps_one_hook_and_still_stops_a_nan(poison) -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nonfinite_session(model, optimizer)
    x = torch.randn(4, 8)
    with session:
        _train(model, optimizer, 4, x)  # 3 identical backwards: S-A keeps 2 of its 4 hooks
        assert hook_counts(model, optimizer) == (2, 1, 1)
        poison(model[0].weight, math.nan)
        with pytest.raises(tl.debug.CheckViolationError, match="0.weight"):
            _train(model, optimizer, 1, x)
    report = session.report()
    assert (report.counters["backwards"], report.counters["grad_arrivals"]) == (5, 20)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_backward_with_other_parameters_rehooks_every_parameter() -> None:
    model = models.mlp()
    optimizer, session = change_session(model, window=2, min_hits=2)
    x = torch.randn(4, 8)
    with session:
        _train(model, optimizer, 4, x)
        optimizer.zero_grad()
        model[:2](x)[:, :4].square().mean().backward()  # layer 2 takes no part
        optimizer.step()
        assert hook_counts(model, optimizer) == (4, 1, 1)
    facts = {row["param"]: row["grad_fact"] for row in session.report().table("params").dicts()}
    assert facts == {"0.weight": "ok", "0.bias": "ok", "2.weight": "none", "2.bias": "none"}


def test_a_backward_both_kept_hooks_miss_is_judged_at_the_step_site(poison) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nonfinite_session(model, optimizer)
    x = torch.randn(4, 8)
    with session:
        _train(model, optimizer, 4, x)  # stable: hooks stay on the first and last arrivals
        assert hook_counts(model, optimizer)[0] == 2
        model[0].requires_grad_(False)
        model[4].requires_grad_(False)  # now only the middle layer gets gradients
        poison(model[2].weight, math.nan)
        with pytest.raises(tl.debug.CheckViolationError) as caught:
            _train(model, optimizer, 1, x)
        assert hook_counts(model, optimizer)[0] == 4  # layer 2 hooked again; the kept 2 stay
    assert (caught.value.fields["culprit"], caught.value.fields["culprit_site"]) == (
        "2.weight",
        "S-B",
    )
    report = session.report()
    assert any("judged at the step site" in note for note in report.disclosures)
    assert all(torch.isfinite(p).all() for p in model.parameters())
