"""``tl.debug.investigate`` on the step that broke training, next to a rerun under anomaly mode.

Model: GPT-2 small (``GPT2Config()`` random init, eager attention, eval), one batch of 1x64
tokens with ``labels=`` (the loss is ``output.loss``), one NaN written into
``transformer.h[11].mlp.c_fc.weight``: the NaN is born in the forward of the last block, so the
loss is NaN. That is the case ``torch.autograd.detect_anomaly`` cannot place: it checks backward
nodes, and the first one to return NaN is the loss's own (the forward traceback it prints is the
loss line), not the c_fc that produced the NaN. This benchmark prints what it reports.

Contenders (one process, interleaved, min and median of 5 rounds):

* ``plain step``: ``model(**batch).loss.backward()`` (gradients set to None first);
* ``investigate``: ``tl.debug.investigate(model, batch)``: the tripwire forward finds the NaN,
  no backward is needed;
* ``detect_anomaly step``: the same step under ``torch.autograd.detect_anomaly()`` (it raises);
* ``investigate, clean model``: the same weights without the NaN: the whole replay runs (the
  tripwire forward, a second forward recorded for backward, a backward with every gradient
  logged) and ends ``not_reproduced``: the cost when there is nothing to find.

Memory: ``peak_MB`` is the growth of the peak resident set during one warm call, each contender
in a fresh subprocess (``MALLOC_MMAP_THRESHOLD_=65536``, ``/proc/self/clear_refs``), as in
``bench_nan.py``.

Run: ``.venv/bin/python benchmarks/bench_investigate.py`` (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import gc
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing
from bench_nan import gpt2_small

import torchlens_nb as tl

CONTENDERS = ("plain step", "investigate", "detect_anomaly step", "investigate, clean model")


def _gpt2(*, with_nan: bool) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    model, inputs = gpt2_small(with_nan=with_nan)
    return model, {**inputs, "labels": inputs["input_ids"]}


def _step(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> None:
    model.zero_grad(set_to_none=True)
    model(**batch).loss.backward()


def anomaly_step(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[str, str]:
    """The step under anomaly mode: (its error's first line, the last frame of the forward
    traceback it prints)."""
    model.zero_grad(set_to_none=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autograd.detect_anomaly():
                model(**batch).loss.backward()
        except RuntimeError as error:
            message = str(error).splitlines()[0]
        else:
            message = "no error raised"
    text = "\n".join(str(w.message) for w in caught if "Traceback of forward" in str(w.message))
    frames = re.findall(r'File "([^"]+)", line (\d+)', text)
    last = f"{Path(frames[-1][0]).name}:{frames[-1][1]}" if frames else "none printed"
    return message, last


def _runner(name: str) -> Callable[[], object]:
    model, batch = _gpt2(with_nan=True)
    clean, _ = _gpt2(with_nan=False)
    return {
        "plain step": lambda: _step(model, batch),
        "investigate": lambda: tl.debug.investigate(model, batch),
        "detect_anomaly step": lambda: anomaly_step(model, batch),
        "investigate, clean model": lambda: tl.debug.investigate(clean, batch),
    }[name]


def measure_memory(name: str) -> dict[str, float]:
    """In this (fresh) process: the peak RSS growth of one warm call of ``name``."""
    run = _runner(name)
    run()  # warm-up: lazy imports, caches
    gc.collect()
    before = _timing.reset_peak_rss()
    run()
    return {"peak_MB": _timing.status_mb("VmHWM:") - before}


def main(rounds: int = 5) -> None:
    model, batch = _gpt2(with_nan=True)
    report = tl.debug.investigate(model, batch)
    origin = report.first_bad_thing
    assert report.status == "found" and origin.module == "transformer.h.11.mlp.c_fc", report.lead
    message, frame = anomaly_step(model, batch)
    contenders = [(name, _runner(name)) for name in CONTENDERS]
    timings = _timing.interleaved(contenders, rounds=rounds)
    rows = _timing.ratio_rows(timings, "plain step", case="gpt2-small 1x64, NaN in h.11")
    _timing.with_memory(rows, __file__)
    print(
        f"investigate: {report.status} at {origin.op} ({origin.func}) in {origin.module}, "
        f"{Path(origin.file or '?').name}:{origin.line}"
    )
    print(f"detect_anomaly: {message}\n  forward traceback ends at {frame}")
    _timing.print_table(rows)


if __name__ == "__main__":
    _timing.entry_point(main, measure_memory)
