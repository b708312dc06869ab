"""NaN forensics cost: live ``find_nan`` vs a plain forward, and its memory vs a full trace.

Model: GPT-2 small (``GPT2Config()`` random init, eager attention, 1x64 tokens) with one NaN
written into ``transformer.h[11].mlp.c_fc.weight`` (the last block), so the first non-finite
output is that block's ``c_fc`` matmul, about 93% of the way through the forward.

Time (one process, contenders interleaved, min of 7 rounds; target from issue 4:
``find_nan`` live <= 1.5x the plain forward):

* ``plain forward``: the model call itself;
* ``find_nan live``: stops after c_fc, so the lm_head matmul (~30% of the FLOPs) never runs;
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

Run: ``.venv/bin/python benchmarks/bench_nan.py`` (about 2 minutes on 2 cores).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing

import torchlens_nb as tl
from torchlens_nb.debug._values import is_all_finite

CONTENDERS = (
    "plain forward",
    "find_nan live",
    "find_nan live, clean model",
    "nonfinite_origin live",
    "trace save=True + find_nan",
)


def _gpt2(*, with_nan: bool) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(attn_implementation="eager")).eval()
    if with_nan:
        with torch.no_grad():
            model.transformer.h[-1].mlp.c_fc.weight[0, 0] = float("nan")
    return model, {"input_ids": torch.randint(0, 50257, (1, 64))}


def _runner(
    name: str, model: torch.nn.Module, clean: torch.nn.Module, inputs: dict[str, torch.Tensor]
) -> Callable[[], object]:
    return {
        "plain forward": lambda: model(**inputs),
        "find_nan live": lambda: tl.debug.find_nan(model, inputs),
        "find_nan live, clean model": lambda: tl.debug.find_nan(clean, inputs),
        "nonfinite_origin live": lambda: tl.debug.nonfinite_origin(model, inputs),
        "trace save=True + find_nan": lambda: _trace_and_scan(model, inputs),
    }[name]


def _trace_and_scan(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> object:
    trace = tl.trace(model, inputs)
    trace.find_nan()
    return trace


def measure_memory(name: str) -> dict[str, float]:
    """In this (fresh) process: peak and retained RSS growth of one warm call of ``name``."""
    model, inputs = _gpt2(with_nan=True)
    clean, _ = _gpt2(with_nan=False)
    with torch.no_grad():
        return _timing.rss_growth_mb(_runner(name, model, clean, inputs))


def check_costs(rounds: int = 50) -> list[dict[str, object]]:
    """Per-op cost of three finiteness checks on GPT-2 small activation shapes (one host read
    each): the capture checks with ``aminmax`` (``tl.debug`` ``_first_bad.is_all_finite``)."""
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


def main(rounds: int = 7) -> None:
    model, inputs = _gpt2(with_nan=True)
    clean, _ = _gpt2(with_nan=False)
    found = tl.debug.find_nan(model, inputs)
    assert found.found and found.first_bad_thing.module == "transformer.h.11.mlp.c_fc", found.lead
    contenders = [(name, _runner(name, model, clean, inputs)) for name in CONTENDERS]
    with torch.no_grad():
        timings = _timing.interleaved(contenders, rounds=rounds)
    rows = _timing.ratio_rows(
        timings, "plain forward", case="gpt2-small 1x64", targets={"find_nan live": 1.5}
    )
    for row in rows:
        out = subprocess.run(
            [sys.executable, __file__, "--memory", str(row["contender"])],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"},
        )
        row.update(json.loads(out.stdout.strip().splitlines()[-1]))
    n_ops = len(tl.trace(model, inputs, save=False))
    print(
        f"GPT-2 small, {n_ops} ops; find_nan stops after {found.num_ops} ops at "
        f"{found.op} ({found.first_bad_thing.module}); memory: RSS growth in a fresh process "
        "(see the docstring)"
    )
    _timing.print_table(rows)
    print("\nper-op finiteness check (min of 50, microseconds):")
    _timing.print_table(check_costs())


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--memory":
        print(json.dumps(measure_memory(sys.argv[2])))
    else:
        main()
