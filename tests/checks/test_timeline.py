"""The dashboard's timeline: what the session recorded per attempt and layer, bounded.

A real 30-step loop of the 2-block GPT of ``tests/stability`` (its blocks ``blocks.0`` and
``blocks.1`` run a softmax over explicit attention logits), then the recorder alone for folds and
size at 10,000 attempts.
"""

from __future__ import annotations

import base64
import json
import math

import pytest
import torch

import torchlens_nb as tl
from tests import models
from tests.stability import gpt
from torchlens_nb.checks.dashboard._timeline import (
    COLUMNS,
    MAX_LAYERS,
    TimelineRecorder,
    live_timeline,
)
from torchlens_nb.errors import ReportOptionError
from torchlens_nb.report import Finding
from torchlens_nb.widgets._dashboard import live_message

STEPS = 30


def _block_of(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "blocks" else parts[0]


@pytest.fixture(scope="module")
def gpt_run():
    """(report, losses, per-attempt block gradient norms computed by the loop itself). The
    non-finite check reads gradient norms on every attempt, so the stability check's block norms
    (and the timeline's) come from that read; with the defaults alone they are probed ones."""
    setup = gpt.Setup("timeline", steps=STEPS, lr=3e-3)
    model, optimizer, _ = gpt.build(setup)
    table = gpt.markov_chain(0)
    generator = torch.Generator().manual_seed(0)
    losses: list[float] = []
    norms: list[dict[str, float]] = []
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: threads only contend (4 ms a step on one)
    with session:
        for _ in range(STEPS):
            optimizer.zero_grad()
            loss = gpt.loss_of(model, gpt.markov_batch(table, generator), 0.0)
            loss.backward()
            squares: dict[str, float] = {}
            for name, param in model.named_parameters():
                block = _block_of(name)
                squares[block] = squares.get(block, 0.0) + float(param.grad.double().square().sum())
            norms.append({b: math.sqrt(v) for b, v in squares.items()})
            optimizer.step()
            losses.append(loss.item())
    torch.set_num_threads(threads)
    return session.report(), losses, norms


def test_the_timeline_holds_the_loss_and_block_norms_the_loop_computed(gpt_run) -> None:
    report, losses, norms = gpt_run
    timeline = report.timeline
    assert timeline is not None
    assert (timeline.attempts_per_column, timeline.columns) == (1, STEPS)  # 30 < 256: no fold
    assert timeline.loss_low == pytest.approx(losses, rel=1e-6)
    assert timeline.loss_high == pytest.approx(losses, rel=1e-6)
    grad = timeline.map("grad_norm")
    assert grad is not None
    assert grad.layers == ("embed", "pos", "blocks.0", "blocks.1", "norm", "head")  # model order
    for row, layer in zip(grad.values, grad.layers):
        assert row == pytest.approx([n[layer] for n in norms], rel=1e-4)


def test_sampled_metrics_are_absent_where_not_measured_never_zero(gpt_run) -> None:
    report, _, _ = gpt_run
    timeline = report.timeline
    updates = timeline.map("update_ratio")
    # sampled on the first attempt, then 1 in adam_every=50 (and on surges): only attempt 0 here
    measured = {c for row in updates.values for c, v in enumerate(row) if not math.isnan(v)}
    assert measured == {0}
    assert all(v > 0 for row in updates.values for v in row if not math.isnan(v))
    attention = timeline.map("attention_logit")
    assert attention.layers == ("blocks.0", "blocks.1")
    probed = [c for c, v in enumerate(attention.values[0]) if not math.isnan(v)]
    assert probed == [0, 10, 20]  # the probe runs on attempt 0, then one forward in 10
    rms = timeline.map("activation_rms")
    assert [c for c, v in enumerate(rms.values[0]) if not math.isnan(v)] == probed
    assert dict(timeline.not_measured) == {}


def test_the_payload_is_json_safe_and_its_arrays_match_the_summary(gpt_run) -> None:
    report, _, _ = gpt_run
    payload = report.to_dict()
    json.dumps(payload, allow_nan=False)
    summary = payload["data"]["timeline"]
    assert summary["columns"] == STEPS and summary["has_loss"] is True
    arrays = report.panel_arrays()
    for metric, layers in summary["layers"].items():
        assert arrays[f"timeline_{metric}"]["shape"] == [len(layers), STEPS]
    assert arrays["timeline_loss"]["shape"] == [2, STEPS]


def test_a_model_without_attention_says_the_logit_was_not_measured() -> None:
    session = models.adamw_mlp_session(steps=3)
    timeline = session.report().timeline
    # no check reads gradient norms each attempt: the stability check reads them on probed ones
    grad = timeline.map("grad_norm")
    assert [c for c, v in enumerate(grad.values[0]) if not math.isnan(v)] == [0]
    assert timeline.map("attention_logit") is None
    assert "softmax" in timeline.not_measured["attention_logit"]
    assert "timeline_attention_logit" not in session.report().panel_arrays()
    assert session.report().to_dict()["data"]["timeline"]["layers"].keys() == {
        "grad_norm",
        "update_ratio",
        "activation_rms",
    }


def test_figure_is_the_plotly_version_and_refuses_without_a_timeline(gpt_run) -> None:
    report, _, _ = gpt_run
    figure = report.figure()
    # the loss (max and min traces) plus one heatmap per measured metric
    assert [t.type for t in figure.data] == ["scatter", "scatter"] + ["heatmap"] * 4
    assert list(figure.data[2].y) == list(report.timeline.map("grad_norm").layers)
    model = models.mlp()
    session = tl.debug.ChecksSession(
        model, torch.optim.SGD(model.parameters(), lr=0.1), scaler=None, stability=False
    )
    with pytest.raises(ReportOptionError, match="no timeline"):
        session.report().figure()


def test_folding_keeps_a_one_step_spike_and_the_loss_envelope() -> None:
    recorder = TimelineRecorder(columns=8)
    for attempt in range(100):
        recorder.add("grad_norm", attempt, {"blocks.0": 100.0 if attempt == 77 else 1.0})
        recorder.add_loss(attempt, 2.0 if attempt != 50 else math.inf)
    timeline = recorder.timeline()
    # 100 attempts in 8 columns: 8 * 16 = 128 >= 100, so 16 attempts per column, 7 used
    assert (timeline.attempts_per_column, timeline.columns) == (16, 7)
    assert timeline.map("grad_norm").values[0] == (1.0, 1.0, 1.0, 1.0, 100.0, 1.0, 1.0)
    assert timeline.loss_high[3] == math.inf  # attempt 50: measured, not finite
    assert timeline.loss_low[3] == 2.0


def test_findings_that_name_an_attempt_become_marks() -> None:
    recorder = TimelineRecorder(columns=8)
    for attempt in range(40):
        recorder.add_loss(attempt, 1.0)
    findings = [
        Finding("loss_spike", "info", "m", fields={"first_attempt": 33}),
        Finding("no_step_named", "warning", "m"),
        Finding("param_received_no_gradient", "warning", "m", fields={"attempt": 5}),
    ]
    marks = recorder.timeline(findings).marks
    assert [(m.code, m.attempt, m.column, m.finding) for m in marks] == [
        ("loss_spike", 33, 4, 0),  # 40 attempts in 8 columns of 8: attempt 33 in column 4
        ("param_received_no_gradient", 5, 0, 2),
    ]


def test_a_10000_attempt_live_timeline_stays_bounded() -> None:
    """The largest timeline the recorder keeps (MAX_LAYERS rows in all 4 metrics) as a live
    increment carries it, after 10,000 attempts: its size does not grow with the run."""
    sizes = {}
    for attempts in (2_000, 10_000):
        recorder = TimelineRecorder()
        layers = [f"blocks.{i}" for i in range(MAX_LAYERS)]
        for attempt in range(attempts):
            recorder.add_loss(attempt, 1.0)
            if attempt % 16 == 0:  # sampled, as probes are: the columns fold all the same
                for metric in ("grad_norm", "update_ratio", "activation_rms", "attention_logit"):
                    recorder.add(metric, attempt, dict.fromkeys(layers, 0.5))
        timeline = recorder.timeline()
        assert timeline.columns <= COLUMNS
        message = live_message({"type": "increment", "seq": 1, "timeline": live_timeline(timeline)})
        sizes[attempts] = len(json.dumps(message, allow_nan=False))
        arrays = message["timeline"]["arrays"]
        decoded = base64.b64decode(arrays["timeline_grad_norm"]["base64"])
        assert len(decoded) == 4 * MAX_LAYERS * timeline.columns  # float32 per cell
    # 10,000 attempts: 157 columns of 64; 96 layers x 4 metrics x 157 x 4 B = 241,152 B raw
    assert sizes[10_000] < 4 / 3 * 4 * (4 * MAX_LAYERS + 2) * COLUMNS + 10_000
    print(f"live timeline bytes: {sizes}")


def test_activations_are_disclosed_as_sampled_where_the_probe_read_them() -> None:
    sampled = models.adamw_mlp_session(steps=3).report()
    assert sampled.timeline is not None and sampled.timeline.map("activation_rms") is not None
    activations = next(u for u in sampled.unavailable if u.check == "activations")
    assert activations.code == "sampled" and "one attempt in probe_every" in activations.reason

    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    with tl.debug.ChecksSession(model, optimizer, scaler=None, stability=False) as session:
        optimizer.zero_grad()
        model(torch.randn(4, 8)).square().mean().backward()
        optimizer.step()
    unseen = next(u for u in session.report().unavailable if u.check == "activations")
    assert unseen.code == "not_observed"
