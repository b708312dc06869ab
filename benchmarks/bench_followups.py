"""What keeping the follow-ups alive costs: the ``OpGraph`` a report's lineage actions hold.

Model: 5,000 x (Linear(16) -> tanh -> mul -> add) on a (4, 16) input: 20,001 ops. The graph is
what a lineage row click or expand needs after the trace is gone (debug/lineage/_graph.py):
labels, funcs, modules, lines, shapes, dtypes, parents, children and finiteness, no tensor.

Each round captures a fresh trace (untimed) and times, interleaved:

* ``tl.trace`` of the model (save=False, then save=True): the capture the report reads, for scale;
* ``op_graph``: building the graph, save=False (no value to check: structure only) and
  save=True (plus one batched finiteness read of every saved output, one host sync);
* ``lineage ring``: one follow-up (``run_action("lineage", op=...)``) on a released trace.

Memory (tracemalloc, separate run): the bytes the graph keeps once the trace is released,
against the trace's own bytes while it lives (save=False and save=True).

Measured on the 2-core CPU box, shared with other jobs (min / median of 3 rounds):

| case | tl.trace | op_graph | ratio (min / median) | one ring, trace released |
|---|---|---|---|---|
| save=False | 2275 / 2455 ms | 66 / 129 ms | 0.029x / 0.052x | 0.24 ms |
| save=True | 2891 / 4739 ms | 352 / 503 ms | 0.122x / 0.106x | 0.27 ms |

Memory kept by the graph once the trace is released: 8.0 MB (418 bytes per op), against
21.3 MB (save=False) / 24.1 MB (save=True) the trace holds while it lives. save=True pays one
batched finiteness read of the 20,000 saved outputs (``torch._foreach_norm``, max-abs); per-
tensor ``aminmax`` took 1.0-1.4 s here, and the garbage collector's passes over the trace's
objects about half of what remains.

Run: ``.venv/bin/python benchmarks/bench_followups.py`` (about 1-2 minutes on 2 cores).
"""

from __future__ import annotations

import gc
import sys
import time
import tracemalloc
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing

import torchlens_nb as tl
from torchlens_nb.debug.lineage._graph import op_graph
from torchlens_nb.debug.lineage._row_actions import row_actions

BLOCKS = 5_000
ROUNDS, WARMUP = 3, 1


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.linear(x)) * 0.5


def model_and_input() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(*[Block() for _ in range(BLOCKS)]), torch.randn(4, 16)


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    return time.perf_counter() - start, value


def one_round(model: nn.Module, x: torch.Tensor) -> dict[str, float]:
    seconds: dict[str, float] = {}
    with torch.no_grad():
        for save in (False, True):
            seconds[f"tl.trace save={save}"], trace = timed(tl.trace, model, x, save=save)
            assert len(trace) > 4 * BLOCKS, len(trace)
            seconds[f"op_graph save={save}"], _ = timed(op_graph, trace)  # a fresh trace: built
            follow_up = row_actions(trace)["lineage"]
            label = trace.ops[len(trace) // 2].label
            del trace
            gc.collect()
            seconds[f"lineage ring (trace released) save={save}"], _ = timed(follow_up, op=label)
    return seconds


def retained_bytes(model: nn.Module, x: torch.Tensor, save: bool) -> tuple[int, int]:
    """(bytes the trace holds while alive, bytes its graph keeps after the trace is gone)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    with torch.no_grad():
        trace = tl.trace(model, x, save=save)
    with_trace = tracemalloc.get_traced_memory()[0] - base
    graph = op_graph(trace)
    del trace
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert len(graph) > 4 * BLOCKS
    return with_trace, kept


def main() -> int:
    model, x = model_and_input()
    for _ in range(WARMUP):
        one_round(model, x)
    samples: dict[str, list[float]] = {}
    for _ in range(ROUNDS):
        for name, value in one_round(model, x).items():
            samples.setdefault(name, []).append(value)
    timings = [_timing.Timing(name, tuple(values)) for name, values in samples.items()]
    rows = []
    for save in (False, True):
        chosen = [t for t in timings if t.name.endswith(f"save={save}")]
        rows += _timing.ratio_rows(chosen, f"tl.trace save={save}", case=f"20,001 ops save={save}")
    _timing.print_table(rows)
    print()
    memory = []
    for save in (False, True):
        with_trace, kept = retained_bytes(model, x, save)
        memory.append(
            {
                "case": f"20,001 ops save={save}",
                "trace_MB (alive)": with_trace / 2**20,
                "graph_MB (kept)": kept / 2**20,
                "graph_bytes_per_op": kept / (4 * BLOCKS + 1),
            }
        )
    _timing.print_table(memory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
