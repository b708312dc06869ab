"""Spike forensics (``session.spike_forensics()``): on a real spike it names the layers whose
gradients jumped as the run itself measured them; a planted foreign sample is ranked first; a
healthy step shows nothing jumped; the model, the RNG stream and the hooks are left as found."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.stability import gpt
from tests.stability.cases import LR_GROWTH
from torchlens_nb.checks.stability import _spike_keep as spike_keep
from torchlens_nb.errors import DiagnosticArgumentError


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the runs are seeded; one thread keeps them exactly reproducible
    yield
    torch.set_num_threads(threads)


def _owner(name: str) -> str:
    return name.rpartition(".")[0] or "(root)"


def _train(
    setup: gpt.Setup,
    session_of,
    *,
    plant_at: int | None = None,
) -> tuple[gpt.GPT, tl.debug.ChecksSession, list[dict[str, float]]]:
    """``gpt.train``'s loop, recording each step's per-module gradient norm (the run's own
    measurement) and planting a foreign sequence as sample 5 at step ``plant_at``."""
    model, optimizer, scheduler = gpt.build(setup)
    table = gpt.markov_chain(setup.seed)
    gen = torch.Generator().manual_seed(setup.seed)
    foreign = gpt.markov_batch(gpt.markov_chain(7), torch.Generator().manual_seed(7))[0]
    session = session_of(model, optimizer)
    norms: list[dict[str, float]] = []
    with session:
        for step in range(setup.steps):
            tokens = gpt.markov_batch(table, gen)
            if step == plant_at:
                tokens[5] = foreign  # a sequence of another Markov chain
            optimizer.zero_grad()
            loss = gpt.loss_of(model, tokens, setup.z_loss)
            loss.backward()
            squares: dict[str, float] = {}
            for name, param in model.named_parameters():
                owner = _owner(name)
                squares[owner] = squares.get(owner, 0.0) + float(param.grad.square().sum())
            norms.append({k: math.sqrt(v) for k, v in squares.items()})
            optimizer.step()
            scheduler.step()
    return model, session, norms


def _session(keep: str = "spikes"):
    def attach(model: nn.Module, optimizer: torch.optim.Optimizer) -> tl.debug.ChecksSession:
        session = tl.debug.ChecksSession(model, optimizer, scaler=None)
        session.register_stability_check(action="collect", keep=keep)
        return session

    return attach


def test_a_real_spike_names_the_layers_whose_gradients_jumped_as_the_run_measured() -> None:
    model, session, norms = _train(LR_GROWTH, _session())
    check = session.report()
    spike = next(f for f in check.findings if f.code == "loss_spike")
    report = session.spike_forensics()
    # the first spike of the episode is kept, with the previous step's weights: the loss
    # EMA was already rising (the check armed the keeper at attempt 182)
    assert (
        (report.attempt, report.trigger)
        == (spike.fields["first_attempt"], "spike")
        == (
            193,
            "spike",
        )
    )
    assert report.status == "jumped"
    assert report.loss == pytest.approx(spike.fields["loss"])
    step = report.attempt
    layers = {r["layer"]: r for r in report.table("layers").dicts()}
    run_ratio = {k: norms[step][k] / norms[step - 1][k] for k in norms[step]}
    # the re-run's loss leaves out the last position (its target is not an input), so its
    # gradients match the run's to within 15%, not exactly
    for name, norm in norms[step].items():
        assert layers[name]["grad_norm"] == pytest.approx(norm, rel=0.15)
        assert layers[name]["grad_norm_before"] == pytest.approx(norms[step - 1][name], rel=0.15)
    jumped = [r["layer"] for r in report.table("layers").dicts() if (r["grad_jump"] or 0) >= 2]
    assert set(jumped) == {k for k, v in run_ratio.items() if v >= 2}
    top = max(run_ratio, key=run_ratio.__getitem__)  # blocks.1.ln1: 5.9x in the run
    grad = next(f for f in report.findings if f.code == "grad_jump")
    assert grad.where.module == top == "blocks.1.ln1"
    assert all(name.startswith("blocks.1.") for name in jumped[:3])
    # the loss rose across the batch: no single sample carries it
    assert [f.code for f in report.findings if f.code.startswith(("samples", "loss"))] == [
        "loss_across_batch"
    ]
    assert report.rerun_loss == pytest.approx(report.loss, rel=0.01)
    # the session report's exit runs the same forensics
    exit_ = next(e for e in check.exits if e.action == "spike_forensics")
    assert exit_.code == "session.spike_forensics()"
    assert check.run_action("spike_forensics") == report
    del model


def test_a_planted_foreign_sample_is_ranked_first_and_carries_the_loss() -> None:
    setup = gpt.Setup("healthy", steps=100, lr=1e-3)
    model, session, _ = _train(setup, _session("every_step"), plant_at=99)
    report = session.spike_forensics()
    samples = report.table("samples").dicts()
    assert report.attempt == 99 and report.trigger == "every_step"
    assert samples[0]["sample"] == 5 and samples[0]["carries"]  # 5.16 = 2.7x the median
    assert [s["sample"] for s in samples if s["carries"]] == [5]
    carry = next(f for f in report.findings if f.code == "samples_carry_loss")
    assert carry.severity == "info"  # kept on request, not at a detected spike
    assert carry.fields["samples"] == (5,)
    del model  # held by the test: the keeper holds it by weak reference
    assert session.spike_forensics().status == "not_kept"


def test_a_healthy_step_shows_nothing_jumped_and_leaves_everything_as_found() -> None:
    setup = gpt.Setup("healthy", steps=100, lr=1e-3)
    model, session, _ = _train(setup, _session("every_step"))
    hooks = [
        (len(m._forward_hooks), len(m._forward_pre_hooks), len(m._forward_pre_hooks_with_kwargs))
        for m in model.modules()
    ]
    assert hooks == [(0, 0, 0)] * len(hooks)  # the session removed its hooks at exit
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    rng = torch.get_rng_state()
    report = session.spike_forensics()
    assert report.status == "nothing_jumped", report.card()
    assert report.unavailable == ()
    assert report.loss_kind == "next_token_cross_entropy"
    assert [e.label for e in session.report().exits] == ["Explain the last step"]
    assert report.num_samples == gpt.BATCH
    assert all(not r["is_jumped"] for r in report.table("layers").dicts())
    assert [f.code for f in report.findings] == ["loss_across_batch"]
    assert all(torch.equal(p, weights[n]) for n, p in model.named_parameters())
    assert all(torch.equal(p.grad, grads[n]) for n, p in model.named_parameters())
    assert torch.equal(torch.get_rng_state(), rng)
    after = [
        (len(m._forward_hooks), len(m._forward_pre_hooks), len(m._forward_pre_hooks_with_kwargs))
        for m in model.modules()
    ]
    assert after == hooks
    # the weights twice (this step's and the previous one's), the gradients, Adam's exp_avg and
    # exp_avg_sq: 5 x 4 bytes per parameter; a 4-byte step count per tensor; two batches of
    # 16 x 32 int64 tokens
    params = list(model.parameters())
    numel = sum(p.numel() for p in params)
    assert report.kept_bytes == 5 * 4 * numel + 4 * len(params) + 2 * gpt.BATCH * gpt.SEQ * 8


def test_the_report_is_strict_json_with_a_bounded_card() -> None:
    setup = gpt.Setup("healthy", steps=30, lr=1e-3)
    _model, session, _ = _train(setup, _session("every_step"))
    report = session.spike_forensics()
    payload = report.to_dict()
    json.dumps(payload, allow_nan=False)
    assert payload["report_type"] == "spike"
    assert [t["name"] for t in payload["tables"]] == ["layers", "samples"]
    assert len(report.card().splitlines()) <= 12
    figure = report.figure()  # plotly: three jump traces per layer, one loss bar per sample
    assert [trace.name for trace in figure.data] == [
        "activations (RMS)",
        "gradient norm",
        "update ratio",
        "loss",
    ]
    assert len(figure.data[3].y) == gpt.BATCH
    assert list(report.to_pandas("samples").columns) == [
        "sample",
        "loss",
        "loss_to_median",
        "share",
        "carries",
    ]


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _classifier_session(**kwargs) -> tuple[tl.debug.ChecksSession, torch.Tensor, nn.Module]:
    torch.manual_seed(0)
    model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None, **kwargs)
    if "stability" not in kwargs:
        session.register_stability_check(keep="every_step")
    x, y = torch.randn(6, 8), torch.tensor([0, 1, 2, 0, 1, 2])
    with session:
        for _ in range(3):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    return session, y, model


def test_a_loss_the_session_cannot_derive_is_unavailable_until_loss_fn_gives_it() -> None:
    session, y, _model = _classifier_session()
    report = session.spike_forensics()
    assert report.status in ("partly_seen", "jumped")
    assert [u.code for u in report.unavailable] == ["no_loss"]
    assert report.table("samples").rows == ()
    given = session.spike_forensics(
        loss_fn=lambda out, x: nn.functional.cross_entropy(out, y, reduction="none")
    )
    assert given.loss_kind == "loss_fn" and given.num_samples == 6
    assert given.unavailable == ()
    with pytest.raises(DiagnosticArgumentError, match="one loss per sample"):
        session.spike_forensics(loss_fn=lambda out, x: nn.functional.cross_entropy(out, y))
    with pytest.raises(DiagnosticArgumentError, match="attempt 0 was not kept"):
        session.spike_forensics(attempt=0)
    with pytest.raises(DiagnosticArgumentError, match="attempt must be an int >= 0"):
        session.spike_forensics("x")  # type: ignore[arg-type]
    with pytest.raises(DiagnosticArgumentError, match="loss_fn must be callable"):
        session.spike_forensics(loss_fn="cross_entropy")  # type: ignore[arg-type]


def test_a_batch_refilled_in_place_is_not_taken_for_the_previous_one() -> None:
    torch.manual_seed(0)
    model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    x, y = torch.empty(6, 8), torch.tensor([0, 1, 2, 0, 1, 2])
    with session:
        for step in range(30):
            x.copy_(torch.randn(6, 8) * (30.0 if step == 29 else 1.0))  # one buffer, refilled
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    report = session.spike_forensics()
    assert (report.attempt, report.trigger) == (29, "spike")  # the 30x batch spiked the loss
    gone = next(u for u in report.unavailable if u.code == "no_previous")
    assert "refilled the input tensor in place" in gone.reason
    assert all(r["activation_rms_before"] is None for r in report.table("layers").dicts())


def test_without_the_stability_check_nothing_is_kept_and_it_says_why() -> None:
    session, _, _model = _classifier_session(stability=False)
    report = session.spike_forensics()
    assert report.status == "not_kept"
    assert report.unavailable[0].reason.startswith("the stability check is off")


def test_a_model_above_the_arming_size_is_explained_without_the_previous_weights(
    monkeypatch,
) -> None:
    monkeypatch.setattr(spike_keep, "ARM_MAX_BYTES", 0)  # the 0.44 MB GPT counts as too big
    model, session, _ = _train(LR_GROWTH, _session())
    report = session.spike_forensics()
    assert report.attempt == 193
    assert report.disclosures[0].startswith("The previous step's weights were not kept")
    # the previous batch was released by the loop and not copied: nothing to compare against
    assert "previous_batch" in [u.check for u in report.unavailable]
    assert report.kept_bytes < 4 * 4 * sum(p.numel() for p in model.parameters()) + 8192
