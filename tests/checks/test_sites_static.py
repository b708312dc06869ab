"""Cost laws of the sites: no per-parameter host read at S-A, one batched norm per backward,
one host read per optimizer attempt."""

from __future__ import annotations

import ast
import inspect
import textwrap

import torch

import torchlens_nb as tl
from tests import models
from torchlens_nb.checks import _sites

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
    # one call per backward over the 4 gradients that arrived (6), plus the before/after weight
    # norms of the one step the movement sampler took (accepted step 0 of every 50): 8
    assert calls == [4, 4, 4, 4, 4, 4, 4, 4]
    assert session._engine.host_reads == 3  # one per attempt, at S-B
