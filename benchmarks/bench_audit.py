"""``trace.audit()`` and its checks on an op-dense trace, next to the capture that made it.

Model (issue 22): 48 pre-norm attention layers whose attention is written as a loop over 48
heads of width 2 (three ``nn.Linear(96, 2)`` per head, scores, causal ``masked_fill``,
softmax, ``@ v``), then an MLP, on 1 x 8 tokens: 21,171 recorded ops. Two traces are captured
once: ``save=True``, and ``save=True`` with ``save_grads`` after one logged backward of
``output.square().mean()``.

Contenders, interleaved round by round (``_timing.interleaved``): the plain forward,
``tl.trace(save=True)`` (a fresh capture each round: the baseline of the ratio),
``trace.audit()`` on each trace, and every check the audit runs or that issue 22 names on its own
(``find_nan_in_trace``, ``bisect_nan``, ``dtype_range``, ``dead_neurons`` on the forward trace;
``grad_health``, ``bisect_nan_backward`` on the gradient trace). Targets: the audit no slower
than the save=True capture (ratio <= 1.0); ``grad_health``, ``dead_neurons``, ``dtype_range``
and ``find_nan_in_trace`` each under 1 s (min).

Single-threaded (``torch.set_num_threads(1)``), as ``bench_sinks.py`` explains: on a shared
2-core machine the intra-op pool turns other jobs' load into 10x swings of the plain forward.

Run: ``.venv/bin/python benchmarks/bench_audit.py`` (3-6 minutes on 2 shared cores).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing

import torchlens_nb as tl
from torchlens_nb.options import CaptureOptions

LAYERS, HEADS, HEAD_WIDTH, TOKENS = 48, 48, 2, 8
ROUNDS, WARMUP = 3, 1
SECONDS_TARGETS = {
    "grad_health": 1.0,
    "dead_neurons": 1.0,
    "dtype_range": 1.0,
    "find_nan_in_trace": 1.0,
}


class Head(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        model_width = HEADS * HEAD_WIDTH
        self.q, self.k, self.v = (nn.Linear(model_width, width) for _ in range(3))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        width = HEADS * HEAD_WIDTH
        self.heads = nn.ModuleList(Head(HEAD_WIDTH) for _ in range(HEADS))
        self.proj, self.ln1, self.ln2 = (
            nn.Linear(width, width),
            nn.LayerNorm(width),
            nn.LayerNorm(width),
        )
        self.up, self.down = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.proj(torch.cat([head(h, mask) for head in self.heads], dim=-1))
        return x + self.down(torch.relu(self.up(self.ln2(x))))


class PerHeadAttention(nn.Module):
    """48 layers x 48 heads of width 2, attention written head by head (21,171 ops)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)
        for layer in self.layers:
            x = layer(x, mask)
        return x


def main() -> int:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = PerHeadAttention()
    x = torch.randn(1, TOKENS, HEADS * HEAD_WIDTH)
    forward = tl.trace(model, x, save=True)
    grads = tl.trace(model, x, save=True, capture=CaptureOptions(save_grads=True))
    grads.backward(grads.output.square().mean())
    print(f"{len(forward)} ops, {sum(1 for op in grads if op.grad is not None)} gradients")
    contenders = [
        ("plain forward", lambda: model(x)),
        ("tl.trace save=True", lambda: tl.trace(model, x, save=True)),
        ("audit (forward trace)", forward.audit),
        ("audit (with gradients)", grads.audit),
        ("find_nan_in_trace", lambda: tl.debug.find_nan_in_trace(forward)),
        ("bisect_nan", lambda: tl.debug.bisect_nan(forward)),
        ("dtype_range", lambda: tl.debug.dtype_range(forward)),
        ("dead_neurons", lambda: tl.debug.dead_neurons(forward)),
        ("grad_health", lambda: tl.debug.grad_health(grads)),
        ("bisect_nan_backward", lambda: tl.debug.bisect_nan_backward(grads)),
    ]
    timings = _timing.interleaved(contenders, rounds=ROUNDS, warmup=WARMUP)
    rows = _timing.ratio_rows(
        timings,
        "tl.trace save=True",
        case=f"{LAYERS}x{HEADS} heads, {len(forward)} ops",
        targets={"audit (forward trace)": 1.0, "audit (with gradients)": 1.0},
    )
    for row in rows:
        limit = SECONDS_TARGETS.get(str(row["contender"]))
        if limit is not None:
            row["target"] = f"< {limit:g} s"
            row["ok"] = "yes" if float(row["min_ms"]) < limit * 1e3 else "NO"  # type: ignore[arg-type]
    _timing.print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
