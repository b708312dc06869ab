"""FLOP counting cost and agreement: torchlens_nb's formulas vs FlopCounterMode on GPT-2 small.

Model: GPT-2 small (``GPT2Config()`` random init, eager attention, 1x64 tokens), eval mode,
under ``torch.no_grad``. Contenders, interleaved round by round (``_timing.interleaved``):

* ``plain forward``: the baseline of the ratios;
* ``FlopCounterMode forward``: one forward under ``FlopCounterMode(display=False)`` (dispatch-
  level counting, what ``tl.report.flops_vs_dispatch`` runs as its native side);
* ``hot_path(by="flops")``: our per-op formulas plus the per-line aggregation, on an existing
  ``save=False`` trace (analysis only: the trace is captured once, untimed).

Then one ``tl.report.flops_vs_dispatch`` call prints both totals: the matmul family must agree
to the FLOP (``comparable_delta == 0``); ``delta`` is what our element-wise, normalization and
reduction formulas add on top. No target: the point is to see the analysis is cheap next to a
forward. Run: ``.venv/bin/python benchmarks/bench_flops.py`` (about 1 minute on 2 cores).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing

import torchlens_nb as tl


def gpt2() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(attn_implementation="eager")).eval()
    return model, {"input_ids": torch.randint(0, 50257, (1, 64))}


def main() -> int:
    torch.set_grad_enabled(False)
    model, inputs = gpt2()
    trace = tl.trace(model, inputs, save=False)

    def counted() -> int:
        with FlopCounterMode(display=False) as counter:
            model(**inputs)
        return counter.get_total_flops()

    timings = _timing.interleaved(
        [
            ("plain forward", lambda: model(**inputs)),
            ("FlopCounterMode forward", counted),
            ('hot_path(by="flops")', lambda: tl.debug.hot_path(trace, by="flops")),
        ],
        rounds=5,
        warmup=1,
    )
    _timing.print_table(
        _timing.ratio_rows(timings, "plain forward", case=f"GPT-2 small 1x64 ({len(trace)} ops)")
    )
    report = tl.report.flops_vs_dispatch(model, inputs)
    print(
        f"\nours {report.ours_total:,} vs native {report.native_total:,} FLOPs: delta "
        f"{report.delta:+,}, comparable (matmul/conv/attention) delta "
        f"{report.comparable_delta:+,}; {report.unknown_ops} op(s) without a formula"
    )
    return 0 if report.comparable_delta == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
