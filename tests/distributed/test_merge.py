"""The rank merge of ``report(gather=True)`` in one process, and the typed errors outside a group.

The merge is the pure part of the gather: rank reports in, one ``CheckReport`` out (the real
2-rank gather is exercised by ``test_ddp_checks.py``).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

import torchlens_nb as tl
from tests import models
from torchlens_nb.checks.distributed._distributed import _portable, merge_reports


def rank_report(nan_at_step: int | None) -> tl.report.CheckReport:
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    session.register_nonfinite_grad_check(action="collect")
    with session:
        for step in range(3):
            optimizer.zero_grad()
            loss = model(torch.randn(4, 8)).square().mean()
            (loss * math.nan if step == nan_at_step else loss).backward()
            optimizer.step()
    return session.report()


def test_merge_tags_ranks_sums_attempts_and_stays_json_safe() -> None:
    merged = merge_reports([_portable(rank_report(None)), _portable(rank_report(1))])
    assert merged.status == "found"
    # step 1's NaN loss smears every gradient; collect lets it into the weights, so step 2
    # is non-finite too: two findings, both on rank 1
    assert [(f.code, f.fields["rank"]) for f in merged.findings] == [("nonfinite_grad", 1)] * 2
    assert merged.findings[0].fields["attribution"] == "smeared"
    assert merged.findings[0].message.startswith("[rank 1] ")
    assert (merged.counters["attempts"], merged.counters["world_size"]) == (6, 2)
    assert [c["attempts"] for c in merged.counters["per_rank"]] == [3, 3]
    assert merged.check("nonfinite_grad").evaluations == 6
    ranks = merged.table("ranks").dicts()
    assert [(r["rank"], r["status"], r["findings"]) for r in ranks] == [
        (0, "clean", 0),
        (1, "found", 2),
    ]
    series = merged.table("series").dicts()
    assert any(
        r["rank"] == 1 and r["grad_norm"] is not None and math.isnan(r["grad_norm"]) for r in series
    )
    json.dumps(merged.to_dict(), allow_nan=False)  # the NaN norms are encoded
    assert len(merged.card()) < 4000


def test_gather_needs_a_distributed_session() -> None:
    model = models.mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    session = tl.debug.ChecksSession(model, optimizer, scaler=None)
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="distributed session"):
        session.report(gather=True)
    with pytest.raises(tl.errors.DiagnosticArgumentError, match="init_process_group"):
        tl.debug.ChecksSession(model, optimizer, scaler=None, distributed=True)
