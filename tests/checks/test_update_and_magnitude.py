"""Update ratios (raw and lr-normalised) at S-C, and the pre-clip magnitude check."""

from __future__ import annotations

import math

import pytest
import torch

import torchlens_nb as tl
from tests import models


def _step(model, optimizer, x, clip: float | None = None, scale: float = 1.0) -> None:
    optimizer.zero_grad()
    (model(x).square().mean() * scale).backward()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()


def test_sgd_update_ratio_is_lr_times_grad_norm_over_weight_norm() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(
        [
            {"params": model[0].parameters(), "lr": 0.1},
            {"params": model[2].parameters(), "lr": 0.01},
        ]
    )
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_update_ratio_check(every=1)
    x = torch.randn(4, 8)
    weight = model[0].weight.detach().clone()
    model(x).square().mean().backward()
    grad = model[0].weight.grad.clone()
    model.zero_grad()
    with session:
        _step(model, optimizer, x)
    rows = {r["param"]: r for r in session.report().table("params").dicts()}
    # plain SGD: dw = -lr * g, so ||dw|| / ||w|| = 0.1 * ||g|| / ||w||
    expected = 0.1 * grad.norm().item() / weight.norm().item()
    assert rows["0.weight"]["update_ratio"] == pytest.approx(expected, rel=1e-5)
    assert rows["0.weight"]["update_ratio_lr_normalized"] == pytest.approx(expected / 0.1, rel=1e-5)
    assert (rows["0.weight"]["update_stage"], rows["0.weight"]["update_scale_provenance"]) == (
        "post_clip_applied",
        "unscaled",
    )
    series = session.report().table("series").dicts()
    assert [(r["group"], r["lr"]) for r in series] == [(0, 0.1), (1, 0.01)]
    assert all(r["update_ratio"] > 0 for r in series)


def test_cpu_snapshot_is_kept_between_sampled_steps_and_freed_at_detach() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_update_ratio_check(every=1)
    sampler = session._engine._sampler
    x = torch.randn(4, 8)
    with session:
        _step(model, optimizer, x)
        kept = [t.data_ptr() for t in sampler._kept]
        # the second sampled step copies into the same tensors, and still measures exactly
        weight = model[0].weight.detach().clone()
        optimizer.zero_grad()
        model(x).square().mean().backward()
        grad = model[0].weight.grad.clone()
        optimizer.step()
        assert [t.data_ptr() for t in sampler._kept] == kept
        rows = {r["param"]: r for r in session.report().table("params").dicts()}
        expected = 0.1 * grad.norm().item() / weight.norm().item()
        assert rows["0.weight"]["update_ratio"] == pytest.approx(expected, rel=1e-5)
    assert sampler._kept == []  # detached: the 4 parameters' copy is freed


def test_update_ratio_band_flags_parameters_out_of_band_on_a_sustained_window() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    # every SGD step here moves each parameter by far more than 1e-11 of its norm
    session.register_update_ratio_check(every=1, band=(1e-12, 1e-11), window=3, min_hits=3)
    x = torch.randn(4, 8)
    with session:
        for step in range(3):
            _step(model, optimizer, x)
            if step < 2:
                assert session.report().findings == ()  # 1 or 2 of 3: not sustained yet
    finding = session.report().findings[0]
    assert finding.code == "update_ratio_out_of_band"
    assert [row["param"] for row in finding.fields["params"]] == [
        "0.weight",
        "0.bias",
        "2.weight",
        "2.bias",
    ]
    assert all(row["first_attempt"] == 2 for row in finding.fields["params"])
    assert list(finding.fields["band"]) == [1e-12, 1e-11]


def test_zero_weight_has_an_unknown_ratio_not_zero() -> None:
    model = models.mlp()
    with torch.no_grad():
        model[2].bias.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_update_ratio_check(every=1)
    with session:
        _step(model, optimizer, torch.randn(4, 8))
    rows = {r["param"]: r for r in session.report().table("params").dicts()}
    assert rows["2.bias"]["update_ratio"] is None
    assert rows["2.bias"]["update_ratio_lr_normalized"] is None


def test_magnitude_check_judges_the_pre_clip_norm_the_clip_would_hide() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_magnitude_check(high=10.0, window=2, min_hits=2, action="collect")
    x = torch.randn(4, 8)
    with session:
        for _ in range(2):
            _step(model, optimizer, x, clip=1.0, scale=1e4)  # pre-clip norms ~1e3, clipped to 1
    finding = session.report().findings[0]
    assert finding.code == "grad_norm_exploding"
    row = finding.fields["params"][0]
    assert row["grad_norm"] > 10.0 and row["stage"] == "pre_clip_unscaled"


def test_magnitude_at_the_step_site_is_unavailable_where_clipping_censored_it() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_magnitude_check(high=10.0, site="S-B", window=2, min_hits=2)
    x = torch.randn(4, 8)
    with session:
        _step(model, optimizer, x, clip=1.0, scale=1e4)  # clipped: censored
        _step(model, optimizer, x)  # not clipped: judged
    report = session.report()
    censored = [u for u in report.unavailable if u.code == "censored_by_clipping"]
    assert len(censored) == 1 and "1 attempt(s)" in censored[0].reason
    assert report.check("magnitude").evaluations == 1
    assert report.check("magnitude").site == "S-B"


def test_unknown_scale_gives_unknown_magnitude_verdicts_never_a_pass() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer)  # scaler not declared
    session.register_magnitude_check()
    with session:
        _step(model, optimizer, torch.randn(4, 8))
    report = session.report()
    assert report.status == "incomplete"
    assert report.check("magnitude").state == "unavailable"
    assert "scale_unknown" in {u.code for u in report.unavailable if u.check == "magnitude"}
    series = report.table("series").dicts()[0]
    assert (series["grad_stage"], series["grad_scale_provenance"]) == ("pre_clip_scaled", "unknown")


def test_gradscaler_norms_are_unscaled_by_the_recorded_scale() -> None:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    session = tl.debug.ChecksSession(model, optimizer, scaler=scaler)
    session.register_magnitude_check()
    with session:
        optimizer.zero_grad()
        scaler.scale(model(torch.randn(4, 8)).square().mean()).backward()
        scaler.step(optimizer)
        scaler.update()
    row = session.report().table("series").dicts()[0]
    assert (row["grad_stage"], row["grad_scale_provenance"]) == ("pre_clip_scaled", "gradscaler")
    assert row["grad_norm"] == pytest.approx(row["grad_norm_raw"] / 256.0)
    assert math.isfinite(row["grad_norm"])


def test_each_out_of_band_episode_is_a_row_with_its_own_peak_ratio() -> None:
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    # lr 0 leaves the weights in place (ratio 0, in band); any lr > 0 moves them out of it
    session.register_update_ratio_check(every=1, band=(0.0, 1e-9), window=2, min_hits=2)
    x = torch.randn(4, 8)
    lrs = (0.0, 1e-3, 4e-3, 1e-3, 0.0, 0.0, 0.0, 1e-2, 1e-2, 0.0)
    with session:
        for lr in lrs:
            optimizer.param_groups[0]["lr"] = lr
            _step(model, optimizer, x)
    rows = [r for r in session.report().findings[0].fields["params"] if r["param"] == "0.weight"]
    # two episodes, sustained (2 of 2 out of band) at attempts 2-3 and at 8, each row with its
    # own most out-of-band ratio: lr 4e-3 at attempt 2, lr 1e-2 at attempt 8
    assert [(r["first_attempt"], r["last_attempt"]) for r in rows] == [(2, 3), (8, 8)]
    assert rows[0]["peak_attempt"] == 2
    assert rows[1]["update_ratio"] > 2 * rows[0]["update_ratio"] > 0


class _Attention(torch.nn.Module):
    """One softmax attention head with a key bias (zero gradient by construction)."""

    def __init__(self) -> None:
        super().__init__()
        self.query = torch.nn.Linear(8, 8)
        self.key = torch.nn.Linear(8, 8)
        self.value = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.query(x) @ self.key(x).transpose(-1, -2) / 8**0.5
        return scores.softmax(-1) @ self.value(x)


def test_a_key_bias_whose_gradient_is_zero_by_construction_is_not_vanishing() -> None:
    torch.manual_seed(0)
    model = _Attention()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_magnitude_check(low=1e-4, window=3, min_hits=3)
    with session:
        for _ in range(4):
            optimizer.zero_grad()
            model(torch.randn(2, 5, 8)).square().mean().backward()
            optimizer.step()
    report = session.report()
    assert [f.code for f in report.findings] == ["grad_zero_by_construction"]
    assert report.findings[0].severity == "info"
    assert [r["param"] for r in report.findings[0].fields["params"]] == ["key.bias"]
    assert report.status != "found"


def test_a_layer_whose_weight_and_bias_gradients_both_vanish_is_still_warned() -> None:
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_magnitude_check(low=1e-3, window=2, min_hits=2, action="collect")
    with session:
        for _ in range(2):
            _step(model, optimizer, torch.randn(4, 8), scale=1e-9)
    assert [f.code for f in session.report().findings] == ["grad_norm_vanishing"]
