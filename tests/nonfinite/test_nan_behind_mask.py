"""A real NaN that meets an intentional -inf mask is named at its own op, never at the mask.

The mask is built first (``full_1``), so "first non-finite op that reaches a NaN" would name it:
``h @ h.T + mask`` is NaN, but the NaN came from ``h``; the mask only met a value that was NaN
already. Every forward tool, live and on a trace, and ``investigate`` must agree on ``log_1``.
"""

from __future__ import annotations

import pytest
import torch

import torchlens_nb as tl

from .masked_models import NaNBehindMask
from .nan_models import line_of

X = torch.linspace(-1.0, 1.0, 2 * 4 * 8).reshape(2, 4, 8)
LOG_LINE = line_of(NaNBehindMask.forward, "torch.log(x - 10.0)")


TOOLS = {
    "nonfinite_origin live": lambda model: tl.debug.nonfinite_origin(model, X),
    "nonfinite_origin saved": lambda model: tl.debug.nonfinite_origin(tl.trace(model, X)),
    "trace.find_nan": lambda model: tl.trace(model, X).find_nan(),
    "find_nan live": lambda model: tl.debug.find_nan(model, X),
    "investigate": lambda model: tl.debug.investigate(model, X, loss_fn=lambda out: out.sum()),
}


@pytest.mark.parametrize("name", list(TOOLS))
def test_every_tool_names_the_log_not_the_mask(name: str) -> None:
    origin = TOOLS[name](NaNBehindMask()).first_bad_thing
    assert (origin.op, origin.kind, origin.line) == ("log_1", "nan", LOG_LINE), name


def test_the_mask_is_disclosed_as_hidden_behind_the_nan_not_as_another_birth() -> None:
    report = tl.debug.nonfinite_origin(NaNBehindMask(), X)
    # the -inf meets the NaN at add_1 (scores + mask), whose other input matmul_1 is NaN already
    assert report.other_births == ()
    hidden = [d for d in report.disclosures if "meets a NaN only in ops that already" in d]
    assert hidden == [
        "the Inf born at full_1 meets a NaN only in ops that already had a NaN input (add_1): "
        "the NaN, not the Inf, made them NaN, so whether the Inf would have been neutralised "
        "cannot be told; fix the NaN and check again."
    ]
    assert "full_1" not in report.lead
