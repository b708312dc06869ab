"""Capture cost: plain forward vs ``tl.trace`` (save=False, save everything), side by side.

Models: an MLP, a small CNN, GPT-2 small (``GPT2Config()`` random init, 1x64 tokens, eager
attention). Targets (issue 2): on GPT-2 small, capture without saves <= 1.3x the plain forward,
saving every op <= 2x. If the PyPI package ``torchlens`` is importable (benchmark extra only),
its ``log_forward_pass`` on the same model is added as a column.

Run: ``.venv/bin/python benchmarks/bench_capture.py`` (about 1-2 minutes on 2 cores).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing

import torchlens_nb as tl


def _mlp() -> tuple[nn.Module, torch.Tensor]:
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(256, 256), nn.ReLU()]
    return nn.Sequential(*layers).eval(), torch.randn(32, 256)


def _cnn() -> tuple[nn.Module, torch.Tensor]:
    blocks: list[nn.Module] = [nn.Conv2d(3, 32, 3, padding=1)]
    for _ in range(10):
        blocks += [nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU()]
    return nn.Sequential(*blocks).eval(), torch.randn(4, 3, 32, 32)


def _gpt2() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(attn_implementation="eager")
    return GPT2LMHeadModel(config).eval(), {"input_ids": torch.randint(0, 50257, (1, 64))}


def _call(model: nn.Module, inputs: object) -> Callable[[], object]:
    if isinstance(inputs, dict):
        return lambda: model(**inputs)
    return lambda: model(inputs)


def main(rounds: int = 7) -> list[dict[str, object]]:
    torch.manual_seed(0)
    has_torchlens = importlib.util.find_spec("torchlens") is not None
    rows: list[dict[str, object]] = []
    for case, build in (("mlp", _mlp), ("cnn", _cnn), ("gpt2-small 1x64", _gpt2)):
        model, inputs = build()
        contenders: list[tuple[str, Callable[[], object]]] = [
            ("plain forward", _call(model, inputs)),
            ("tl.trace save=False", lambda: tl.trace(model, inputs, save=False)),
            ("tl.trace save=True", lambda: tl.trace(model, inputs, save=True)),
        ]
        if has_torchlens:
            import torchlens

            contenders.append(
                (
                    "torchlens log_forward_pass",
                    lambda: torchlens.log_forward_pass(
                        model,
                        inputs if not isinstance(inputs, dict) else [],
                        input_kwargs=inputs if isinstance(inputs, dict) else None,
                    ),
                )
            )
        targets = {"tl.trace save=False": 1.3, "tl.trace save=True": 2.0} if "gpt2" in case else {}
        with torch.no_grad():
            timings = _timing.interleaved(contenders, rounds=rounds)
        rows += _timing.ratio_rows(timings, "plain forward", case=case, targets=targets)
        n_ops = len(tl.trace(model, inputs, save=False))
        rows[-1 - (len(contenders) - 1)]["case"] = f"{case} ({n_ops} ops)"
    return rows


if __name__ == "__main__":
    _timing.print_table(main())
