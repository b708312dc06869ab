"""Every NaN report: JSON-safe with NaN/Inf present, bounded card, shared vocabulary."""

from __future__ import annotations

import gc
import json
import weakref

import pytest
import torch

import torchlens_nb as tl

from .nan_models import Float16Overflow, LogOfNegative, Net, SqrtAtZero, X, line_of

CARD_LINE_MAX_CHARS = 240


def _reports() -> dict[str, tl.report.Report]:
    model = Net(LogOfNegative())
    trace = tl.trace(model, X)
    backward = tl.trace(Net(SqrtAtZero()), X, capture=tl.options.CaptureOptions(save_grads=True))
    backward.backward(backward.output.sum())
    return {
        "find_nan": tl.debug.find_nan(model, X),
        "find_nan saved": trace.find_nan(),
        "bisect_nan": tl.debug.bisect_nan(trace),
        "nonfinite": tl.debug.nonfinite_origin(trace),
        "nonfinite fp16": tl.debug.nonfinite_origin(Net(Float16Overflow()), X),
        "lineage": tl.debug.lineage(trace, "linear_2", direction="both"),
        "backward_nan": tl.debug.bisect_nan_backward(backward),
    }


@pytest.fixture(scope="module")
def reports() -> dict[str, tl.report.Report]:
    return _reports()


def test_every_report_is_strict_json_with_nan_and_inf_present(reports) -> None:
    for name, report in reports.items():
        text = json.dumps(report.to_dict(), allow_nan=False)
        payload = json.loads(text)
        assert payload["report_type"] == report.report_type, name
        assert payload["schema"] == "torchlens_nb.report/1", name


def test_every_card_is_bounded(reports) -> None:
    for name, report in reports.items():
        lines = report.card().splitlines()
        # lead, <= 5 findings (+ remainder), <= 3 notes (+ remainder), next steps
        assert len(lines) <= 1 + 6 + len(report.unavailable) + 4 + 1, name
        assert max(len(line) for line in lines) <= CARD_LINE_MAX_CHARS, name
        assert str(report) == report.card()


def test_the_origin_card_reads_as_a_verdict(reports) -> None:
    card = reports["nonfinite"].card().splitlines()
    line = line_of(LogOfNegative.forward, "torch.log(shifted)")
    assert card[0] == (
        f"nonfinite [found] Net (saved, 6 ops): nan born at log_1 in block "
        f"(line {line}: `return torch.log(shifted)  # log(0.5 - 1) = nan`); its "
        "inputs were checked finite; 2 downstream ops propagate it."
    )
    assert card[1].startswith(
        "  CRITICAL nonfinite_origin: log_1 (log) turned finite inputs "
        "(all checked) into nan: nan=1 +inf=0 -inf=0 of 2"
    )


def test_payload_data_carries_the_lead_card_fields(reports) -> None:
    data = reports["nonfinite fp16"].to_dict()["data"]
    origin = data["first_bad_thing"]
    assert (origin["op"], origin["module"], origin["kind"], origin["phase"]) == (
        "mul_1",
        "block",
        "inf",
        "forward",
    )
    assert origin["stats"]["posinf_count"] == 1  # 3 * 60000 overflows, 0.5 * 60000 does not
    assert (data["num_checked"], data["num_nonfinite"], data["num_propagated"]) == (7, 4, 3)
    # an Inf born in a float16 op: the forward AMP paragraph applies (issue 18)
    assert data["amp_hint"].startswith(
        "mul_1 computes in float16, whose largest finite value is 65504"
    )
    assert data["is_certain"] is True


def test_a_float32_origin_carries_no_amp_hint(reports) -> None:
    report = reports["nonfinite"]  # nan of log(-0.5) in float32: no autocast, no scaler
    assert report.amp_hint == ""
    assert not any("float16" in d or "GradScaler" in d for d in report.disclosures)


def test_forward_and_backward_results_share_the_first_bad_thing_vocabulary(reports) -> None:
    forward = reports["nonfinite"].first_bad_thing
    backward = reports["backward_nan"].first_bad_thing
    assert type(forward) is type(backward) is tl.debug.FirstBadThing
    assert (forward.phase, backward.phase) == ("forward", "backward")
    assert (backward.node, backward.op) == ("SqrtBackward0", "sqrt_1")


def test_the_backward_ledger_is_a_table_with_its_birth_row_marked(reports) -> None:
    report = reports["backward_nan"]
    table = report.to_dict()["tables"][0]
    assert table["name"] == "transitions"
    assert table["columns"] == [
        "order",
        "node",
        "transition",
        "ops",
        "incoming",
        "outgoing",
        "kind",
    ]
    birth = table["attrs"]["highlight_order"]
    assert table["rows"][birth][2] == "birth"
    assert report.to_dict()["data"]["birth_order"] == birth


def test_lineage_payload_is_capped_for_large_traces() -> None:
    chain = torch.nn.Sequential(*[torch.nn.Tanh() for _ in range(450)])
    trace = tl.trace(chain, torch.ones(1, 2))
    report = tl.debug.lineage(trace, trace.output_layers[0])
    data = report.to_dict()["data"]
    # 451 nodes (input + 450 tanh); the payload ships the nearest 400
    assert (len(report.nodes), data["num_nodes"], data["num_shipped"]) == (451, 451, 400)
    assert len(data["nodes"]) == 400


def test_reports_do_not_keep_a_saved_trace_alive() -> None:
    trace = tl.trace(Net(LogOfNegative()), X)
    ref = weakref.ref(trace)
    report = tl.debug.nonfinite_origin(trace)
    del trace
    gc.collect()
    assert ref() is None
    assert report.found
