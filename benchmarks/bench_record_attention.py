"""Cost of ``tl.bridge.transformers.record_attention``, side by side with the plain forward.

Models: the 2-layer Hugging Face configs of ``tests/capture/golden_models.py`` (GPT-2, LLaMA with
grouped-query attention, BERT; hidden size 64, 1 x 16 tokens, random init), each under eager and
sdpa attention, ``torch.no_grad()``. Contenders: the plain forward, the forward inside
``record_attention(model)`` (SDPA check on) and inside ``record_attention(model,
check_sdpa=False)``. No target: the issue asks for none; the table says what a recording costs
on models this small, where the fixed per-call work dominates (the wrapped lookup, the recompute
mode around each attention call, the float32 copy or recompute, one host sync per SDPA check).

Timing runs single-threaded (``torch.set_num_threads(1)``), as ``bench_sinks.py`` explains.
Run: ``.venv/bin/python benchmarks/bench_record_attention.py`` (about half a minute on 2 cores).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
import _timing  # noqa: E402

import torchlens_nb as tl  # noqa: E402
from tests.capture.golden_models import hf_bert, hf_gpt2, hf_llama  # noqa: E402

MODELS = {"gpt2": hf_gpt2, "llama": hf_llama, "bert": hf_bert}


def rows(rounds: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for name, build in MODELS.items():
        model, inputs = build()
        for implementation in ("eager", "sdpa"):
            model.set_attn_implementation(implementation)

            def plain() -> object:
                return model(**inputs)

            def recorded(check: bool = True) -> object:
                with tl.bridge.transformers.record_attention(model, check_sdpa=check):
                    return model(**inputs)

            with torch.no_grad():
                timings = _timing.interleaved(
                    [
                        ("forward", plain),
                        ("record_attention", recorded),
                        ("record_attention(check_sdpa=False)", lambda: recorded(False)),
                    ],
                    rounds=rounds,
                )
            out += _timing.ratio_rows(timings, "forward", case=f"{name} {implementation}")
    return out


def main() -> None:
    torch.set_num_threads(1)
    _timing.print_table(rows(rounds=21))


if __name__ == "__main__":
    main()
