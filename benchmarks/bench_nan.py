"""NaN forensics cost: live ``find_nan`` vs a plain forward, memory vs a full trace, and the scans
of a 23,000-op saved trace.

Model: GPT-2 small (``GPT2Config()`` random init, eager attention, 1x64 tokens) with one NaN
written into ``transformer.h[11].mlp.c_fc.weight`` (the last block), so the first non-finite
output is that block's ``c_fc`` matmul, about 93% of the way through the forward. The second
table runs the same model fed an additive ``-inf`` causal mask (``attention_mask`` of shape
``(1, 1, 64, 64)``, ``torch.full(..., -inf).triu(1)``): an intentional infinity that softmax
neutralises in every block, so the live run must keep going past it (issue 23) and stop at the
real NaN in the last block.

Time (one process, contenders interleaved, min of 7 rounds; target from issue 4:
``find_nan`` live <= 1.5x the plain forward):

* ``plain forward``: the model call itself;
* ``find_nan live``: stops after the first NaN (c_fc), so the lm_head matmul (~30% of the
  FLOPs) never runs;
* ``find_nan live, clean model``: the same weights without the NaN, every op checked to the end
  (the cost when there is nothing to find);
* ``nonfinite_origin live``: runs to the end to count what the NaN poisoned;
* ``trace save=True + find_nan``: the save-everything alternative.

Memory: each contender runs in a fresh subprocess started with ``MALLOC_MMAP_THRESHOLD_=65536``
(so glibc returns every freed activation to the OS and the resident set follows live memory).
After one warm-up call the peak-RSS mark is reset (``/proc/self/clear_refs``, Linux); then
``peak_MB`` is the growth of the peak resident set (``VmHWM``) during one call and ``held_MB`` the
growth that remains afterwards (what the result keeps alive: a full trace holds every
activation; a live report holds none). tracemalloc is not used: it does not see torch's C++
allocations, and torch has no CPU allocator statistics.

Saved-trace scans (issue 22): a 48-layer attention model written as a per-head loop (48 heads
of width 2, 8 tokens, a ``masked_fill(-inf)`` causal mask per head: 23,329 ops, 2,304 of them
holding an intentional -inf), captured once with ``save=True``; ``trace.find_nan()``,
``bisect_nan`` and ``nonfinite_origin(trace)`` each timed (min and median of 5; target < 1 s).

Run: ``.venv/bin/python benchmarks/bench_nan.py`` (about 4 minutes on 2 cores).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing

import torchlens_nb as tl
from torchlens_nb.debug._values import is_all_finite, value_classes

CONTENDERS = (
    "plain forward",
    "find_nan live",
    "find_nan live, clean model",
    "nonfinite_origin live",
    "trace save=True + find_nan",
)
MASKED = (
    "plain forward, -inf mask",
    "find_nan live, -inf mask",
    "nonfinite_origin live, -inf mask",
)
TOKENS = 64


def gpt2_small(*, with_nan: bool) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """GPT-2 small (random init, eager attention, eval) and a 1x64 batch; with one NaN weight in
    the last block's ``mlp.c_fc`` when ``with_nan``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(attn_implementation="eager")).eval()
    if with_nan:
        with torch.no_grad():
            model.transformer.h[-1].mlp.c_fc.weight[0, 0] = float("nan")
    return model, {"input_ids": torch.randint(0, 50257, (1, TOKENS))}


def _masked(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    mask = torch.full((TOKENS, TOKENS), float("-inf")).triu(1)[None, None]
    return {**inputs, "attention_mask": mask}


def _runner(
    name: str, model: torch.nn.Module, clean: torch.nn.Module, inputs: dict[str, torch.Tensor]
) -> Callable[[], object]:
    masked = _masked(inputs)
    return {
        "plain forward": lambda: model(**inputs),
        "find_nan live": lambda: tl.debug.find_nan(model, inputs),
        "find_nan live, clean model": lambda: tl.debug.find_nan(clean, inputs),
        "nonfinite_origin live": lambda: tl.debug.nonfinite_origin(model, inputs),
        "trace save=True + find_nan": lambda: _trace_and_scan(model, inputs),
        "plain forward, -inf mask": lambda: model(**masked),
        "find_nan live, -inf mask": lambda: tl.debug.find_nan(model, masked),
        "nonfinite_origin live, -inf mask": lambda: tl.debug.nonfinite_origin(model, masked),
    }[name]


def _trace_and_scan(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> object:
    trace = tl.trace(model, inputs)
    trace.find_nan()
    return trace


def measure_memory(name: str) -> dict[str, float]:
    """In this (fresh) process: peak and retained RSS growth of one warm call of ``name``."""
    model, inputs = gpt2_small(with_nan=True)
    clean, _ = gpt2_small(with_nan=False)
    with torch.no_grad():
        return _timing.rss_growth_mb(_runner(name, model, clean, inputs))


def check_costs(rounds: int = 50) -> list[dict[str, object]]:
    """Per-op cost of three finiteness checks on GPT-2 small activation shapes (one host read
    each): the live tripwire checks with ``aminmax`` (``_values.value_class``)."""
    checks: dict[str, Callable[[torch.Tensor], bool]] = {
        "isfinite().all()": lambda v: bool(torch.isfinite(v).all()),
        "sum (can overflow)": lambda v: math.isfinite(float(v.sum())),
        "aminmax (used)": is_all_finite,
    }
    rows: list[dict[str, object]] = []
    for shape in ((1, 64, 768), (1, 12, 64, 64), (1, 64, 3072), (1, 64, 50257)):
        value = torch.randn(shape)
        timings = _timing.interleaved(
            [(name, lambda c=check: c(value)) for name, check in checks.items()], rounds=rounds
        )
        rows.append({"shape": str(shape), **{f"{t.name} us": t.min_s * 1e6 for t in timings}})
    return rows


class HeadLoopLayer(nn.Module):
    """Attention written head by head: 48 heads of width 2, a causal masked_fill(-inf) each."""

    def __init__(self, heads: int = 48, width: int = 2, tokens: int = 8) -> None:
        super().__init__()
        self.heads, self.width = heads, width
        self.qkv = nn.Linear(heads * width, 3 * heads * width)
        self.out = nn.Linear(heads * width, heads * width)
        self.norm = nn.LayerNorm(heads * width)
        self.register_buffer("future", torch.ones(tokens, tokens, dtype=torch.bool).triu(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        heads = []
        for head in range(self.heads):
            cols = slice(head * self.width, (head + 1) * self.width)
            scores = q[:, cols] @ k[:, cols].transpose(0, 1) / self.width**0.5
            scores = scores.masked_fill(self.future, float("-inf"))
            probs = nn.functional.dropout(torch.softmax(scores, dim=-1), 0.1, self.training)
            heads.append(probs @ v[:, cols])
        return x + self.out(torch.cat(heads, dim=-1))


def saved_scans(rounds: int = 5) -> tuple[int, list[dict[str, object]]]:
    """The NaN scans of a saved 23,000-op trace (issue 22: each under 1 s)."""
    torch.manual_seed(0)
    model = nn.Sequential(*[HeadLoopLayer() for _ in range(48)]).eval()
    trace = tl.trace(model, torch.randn(8, 96))
    scans: dict[str, Callable[[], object]] = {
        "trace.find_nan()": trace.find_nan,
        "bisect_nan(trace)": lambda: tl.debug.bisect_nan(trace),
        "nonfinite_origin(trace)": lambda: tl.debug.nonfinite_origin(trace),
    }
    rows = []
    for name, scan in scans.items():
        report: object = scan()  # warm
        seconds = []
        for _ in range(rounds):
            start = time.perf_counter()
            report = scan()
            seconds.append(time.perf_counter() - start)
        seconds.sort()
        rows.append(
            {
                "scan": name,
                "min_s": seconds[0],
                "median_s": seconds[len(seconds) // 2],
                "status": getattr(report, "status", "?"),
                "num_intentional": getattr(report, "num_intentional", "?"),
                "target": "< 1 s",
                "ok": "yes" if seconds[0] < 1 else "NO",
            }
        )
    values = [[op.out] for op in trace.ops if isinstance(op.out, torch.Tensor)]
    batched = _timing.interleaved(
        [
            ("one aminmax and read per tensor", lambda: [is_all_finite(v[0]) for v in values]),
            ("value_classes: foreach inf-norm (used)", lambda: value_classes(values)),
        ],
        rounds=3,
        warmup=1,
    )
    for timing in batched:
        blank = dict.fromkeys(("status", "num_intentional", "target", "ok"), "")
        rows.append(
            {
                "scan": f"classify {len(values)} values: {timing.name}",
                "min_s": timing.min_s,
                "median_s": timing.median_s,
                **blank,
            }
        )
    return len(trace), rows


def main(rounds: int = 7) -> None:
    model, inputs = gpt2_small(with_nan=True)
    clean, _ = gpt2_small(with_nan=False)
    found = tl.debug.find_nan(model, inputs)
    assert found.found and found.first_bad_thing.module == "transformer.h.11.mlp.c_fc", found.lead
    masked = tl.debug.find_nan(model, _masked(inputs))
    assert masked.op == found.op and masked.intentional_infinities == ("input_2",), masked.lead
    with torch.no_grad():
        timings = _timing.interleaved(
            [(name, _runner(name, model, clean, inputs)) for name in CONTENDERS], rounds=rounds
        )
        masked_timings = _timing.interleaved(
            [(name, _runner(name, model, clean, inputs)) for name in MASKED], rounds=rounds
        )
    rows = _timing.ratio_rows(
        timings, "plain forward", case="gpt2-small 1x64", targets={"find_nan live": 1.5}
    )
    masked_rows = _timing.ratio_rows(
        masked_timings,
        "plain forward, -inf mask",
        case="gpt2-small 1x64, -inf mask",
        targets={"find_nan live, -inf mask": 1.5},
    )
    n_ops = len(tl.trace(model, inputs, save=False))
    print(
        f"GPT-2 small, {n_ops} ops; find_nan stops after {found.num_ops} ops at "
        f"{found.op} ({found.first_bad_thing.module}); memory: RSS growth in a fresh process "
        "(see the docstring)"
    )
    _timing.print_table(_timing.with_memory(rows, __file__))
    print(
        f"\nthe same with an additive -inf causal mask (held by {masked.num_intentional} op "
        f"outputs, neutralised by softmax): find_nan runs past it and stops after "
        f"{masked.num_ops} ops at {masked.op}"
    )
    _timing.print_table(_timing.with_memory(masked_rows, __file__))
    print("\nper-op finiteness check (min of 50, microseconds):")
    _timing.print_table(check_costs())
    num_ops, scan_rows = saved_scans()
    print(f"\nsaved-trace scans of a 48-layer per-head attention model ({num_ops} ops, save=True):")
    _timing.print_table(scan_rows)


if __name__ == "__main__":
    _timing.entry_point(main, measure_memory)
