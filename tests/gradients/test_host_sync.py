"""One batched host sync per device: no per-op ``.item()`` (counted at run time and by ast)."""

from __future__ import annotations

import ast
import pathlib

import pytest
import torch

import torchlens_nb as tl
from torchlens_nb.debug import _host_sync, _segment_stats
from torchlens_nb.debug.activations import _dead_neurons, _dtype_range
from torchlens_nb.debug.gradients import _grad_health

SYNCING = ("item", "__float__", "__int__", "__bool__", "__index__")


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every device-to-host read made through a tensor method, by name."""
    seen: list[str] = []
    for name in (*SYNCING, "tolist"):
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _name=name, _original=original):
            seen.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counting)
    return seen


# Each report also keeps, for its lineage row clicks, the finiteness of every saved output
# (debug/lineage/_graph.py): one more batched read, made once per trace and shared.
GRAPH_READ = ["tolist"]


def test_grad_health_reads_every_norm_with_one_tolist(dead_trace, syncs) -> None:
    report = tl.debug.grad_health(dead_trace)  # 11 gradients on one device (CPU)
    assert len(report.table().rows) == 11
    assert syncs == ["tolist", *GRAPH_READ]


def test_dead_neurons_reads_every_layer_with_one_tolist(dead_trace, syncs) -> None:
    report = tl.debug.dead_neurons(dead_trace)
    assert report.num_counted == 11
    assert syncs == ["tolist", *GRAPH_READ]


def test_dtype_range_reads_every_output_with_one_tolist(dead_trace, syncs) -> None:
    report = tl.debug.dtype_range(dead_trace)  # every statistic in one segmented pass
    assert report.num_audited_ops == 12
    assert syncs == ["tolist", *GRAPH_READ]


def test_reports_on_one_trace_share_the_graph_read(dead_trace, syncs) -> None:
    tl.debug.grad_health(dead_trace)
    tl.debug.dead_neurons(dead_trace)
    assert syncs == ["tolist", *GRAPH_READ, "tolist"]


@pytest.mark.parametrize(
    "module",
    [_grad_health, _dead_neurons, _dtype_range, _host_sync, _segment_stats],
    ids=lambda m: m.__name__.rsplit(".", 1)[-1],
)
def test_no_per_value_sync_in_the_source(module) -> None:
    tree = ast.parse(pathlib.Path(module.__file__).read_text(encoding="utf-8"))
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    attrs = [c.func.attr for c in calls if isinstance(c.func, ast.Attribute)]
    assert "item" not in attrs
    assert attrs.count("tolist") == (1 if module in (_host_sync, _segment_stats) else 0)
