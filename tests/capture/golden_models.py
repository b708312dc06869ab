"""The models whose recorded facts are pinned by ``tests/capture/golden/`` (and benchmarked).

Each builder is seeded and returns ``(model, inputs)`` ready for ``tl.trace(model, inputs)``:
the 801-op chain ``200 x (Linear(16) -> tanh -> mul -> add)`` at batch 2, and 2-layer Hugging
Face configs with hidden size 64 (random init, eager attention, vocabulary 256, 1 x 16 tokens).
``benchmarks/bench_capture.py`` imports these builders, so the benchmark times exactly the models
whose facts the golden test pins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

VOCAB = 256
"""Small vocabulary: the embedding and LM head stay cheap, so per-op costs dominate."""
TOKENS = 16


class TanhChain(nn.Module):
    """``depth`` blocks of ``x = tanh(fc(x)) * 0.5 + x``: four small ops per block."""

    def __init__(self, depth: int = 200, width: int = 16) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for fc in self.layers:
            x = torch.tanh(fc(x)) * 0.5 + x
        return x


def tanh_chain() -> tuple[nn.Module, torch.Tensor]:
    """The 801-op model: 1 input + 200 x (linear, tanh, mul, add), batch 2 x 16."""
    torch.manual_seed(0)
    return TanhChain().eval(), torch.randn(2, 16)


def _token_ids() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return {"input_ids": torch.randint(0, VOCAB, (1, TOKENS), generator=generator)}


def _hugging_face(config: str, model: str, **fields: int) -> tuple[nn.Module, dict[str, Any]]:
    import transformers

    torch.manual_seed(0)
    settings = getattr(transformers, config)(
        vocab_size=VOCAB, attn_implementation="eager", **fields
    )
    return getattr(transformers, model)(settings).eval(), _token_ids()


def hf_gpt2() -> tuple[nn.Module, dict[str, Any]]:
    return _hugging_face(
        "GPT2Config", "GPT2LMHeadModel",
        n_layer=2, n_embd=64, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip


def hf_bert() -> tuple[nn.Module, dict[str, Any]]:
    return _hugging_face(
        "BertConfig", "BertModel",
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=64,
    )  # fmt: skip


def hf_llama() -> tuple[nn.Module, dict[str, Any]]:
    return _hugging_face(
        "LlamaConfig", "LlamaForCausalLM",
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, max_position_embeddings=64,
    )  # fmt: skip


GOLDEN_MODELS: dict[str, Callable[[], tuple[nn.Module, Any]]] = {
    "tanh_chain_801": tanh_chain,
    "hf_gpt2_2x64": hf_gpt2,
    "hf_bert_2x64": hf_bert,
    "hf_llama_2x64": hf_llama,
}
"""Golden case name -> builder (the name is the JSON file under ``golden/``)."""
