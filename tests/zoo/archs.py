"""The zoo's architectures: 2-layer Hugging Face configs, hidden size 32, random init.

Each :class:`Arch` builds its model seeded (``torch.manual_seed(0)``, eval mode, the library's
default attention, caches off) and its inputs (8 tokens, a 16 x 16 image, 400 audio samples),
and names a weight in a LATE block (the last layer) and that block's address, where the zoo
plants a NaN. Building all fourteen takes about 1 s after the first import of transformers
(measured with tests/zoo/test_hf_zoo.py --durations).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

Family = Literal["decoder", "encoder", "encoder-decoder", "moe", "vision", "audio", "multimodal"]


@dataclass(frozen=True)
class Arch:
    name: str
    family: Family
    build: Callable[[], nn.Module]
    inputs: Callable[[], dict[str, torch.Tensor]]
    nan_weight: str
    """A parameter of the last block, where the zoo plants a NaN."""
    block: str
    """Address of that block: the NaN's origin must be reported inside it."""


_TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
_BODY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
ENCODER_CONFIG = dict(_BODY, vocab_size=64, **_TOKENS)
"""The keyword arguments of every 2-layer, 32-wide text config (BERT and RoBERTa as they are)."""
DECODER_CONFIG = dict(
    ENCODER_CONFIG, num_key_value_heads=2, max_position_embeddings=64, use_cache=False
)
"""The same for the decoders (LLaMA, Mistral, Qwen2 and the MoE ones): grouped-query keys."""
_SEQ2SEQ = dict(
    vocab_size=64,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    use_cache=False,
    decoder_start_token_id=1,
    **_TOKENS,
)
_VISION = dict(_BODY, image_size=16, patch_size=8)


def _seeded(make: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        torch.manual_seed(0)
        return make().eval()

    return build


def _ids(offset: int = 3) -> dict[str, torch.Tensor]:
    return {"input_ids": (torch.arange(8)[None] * 7) % 61 + offset}


def _seq2seq_ids() -> dict[str, torch.Tensor]:
    return {**_ids(), "decoder_input_ids": _ids()["input_ids"][:, :4]}


def _pixels() -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return {"pixel_values": torch.randn(1, 3, 16, 16)}


def _audio() -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return {"input_values": torch.randn(1, 400)}


def _mel() -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return {
        "input_features": torch.randn(1, 8, 16),
        "decoder_input_ids": _ids()["input_ids"][:, :4],
    }


def archs() -> tuple[Arch, ...]:
    """Every zoo architecture (imports transformers)."""
    import transformers as hf

    return (
        Arch(
            "gpt2",
            "decoder",
            _seeded(
                lambda: hf.GPT2LMHeadModel(
                    hf.GPT2Config(
                        n_layer=2,
                        n_embd=32,
                        n_head=4,
                        vocab_size=64,
                        n_positions=32,
                        use_cache=False,
                        **_TOKENS,
                    )
                )
            ),
            _ids,
            "transformer.h.1.mlp.c_fc.weight",
            "transformer.h.1",
        ),
        Arch(
            "llama",
            "decoder",
            _seeded(lambda: hf.LlamaForCausalLM(hf.LlamaConfig(**DECODER_CONFIG))),
            _ids,
            "model.layers.1.self_attn.q_proj.weight",
            "model.layers.1",
        ),
        Arch(
            "mistral",
            "decoder",
            _seeded(lambda: hf.MistralForCausalLM(hf.MistralConfig(**DECODER_CONFIG))),
            _ids,
            "model.layers.1.mlp.up_proj.weight",
            "model.layers.1",
        ),
        Arch(
            "qwen2",
            "decoder",
            _seeded(lambda: hf.Qwen2ForCausalLM(hf.Qwen2Config(**DECODER_CONFIG))),
            _ids,
            "model.layers.1.self_attn.k_proj.weight",
            "model.layers.1",
        ),
        Arch(
            "bert",
            "encoder",
            _seeded(lambda: hf.BertModel(hf.BertConfig(**ENCODER_CONFIG))),
            _ids,
            "encoder.layer.1.intermediate.dense.weight",
            "encoder.layer.1",
        ),
        Arch(
            "roberta",
            "encoder",
            _seeded(lambda: hf.RobertaModel(hf.RobertaConfig(**ENCODER_CONFIG))),
            _ids,
            "encoder.layer.1.attention.self.query.weight",
            "encoder.layer.1",
        ),
        Arch(
            "t5",
            "encoder-decoder",
            _seeded(
                lambda: hf.T5ForConditionalGeneration(
                    hf.T5Config(
                        vocab_size=64,
                        d_model=32,
                        d_kv=8,
                        d_ff=64,
                        num_layers=2,
                        num_heads=4,
                        use_cache=False,
                        decoder_start_token_id=1,
                        pad_token_id=0,
                        eos_token_id=2,
                    )
                )
            ),
            _seq2seq_ids,
            "decoder.block.1.layer.2.DenseReluDense.wi.weight",
            "decoder.block.1",
        ),
        Arch(
            "bart",
            "encoder-decoder",
            _seeded(lambda: hf.BartModel(hf.BartConfig(**_SEQ2SEQ, max_position_embeddings=64))),
            _seq2seq_ids,
            "decoder.layers.1.fc1.weight",
            "decoder.layers.1",
        ),
        Arch(
            "mixtral",
            "moe",
            _seeded(
                lambda: hf.MixtralForCausalLM(
                    hf.MixtralConfig(**DECODER_CONFIG, num_local_experts=4, num_experts_per_tok=2)
                )
            ),
            _ids,
            "model.layers.1.self_attn.v_proj.weight",
            "model.layers.1",
        ),
        Arch(
            "qwen2_moe",
            "moe",
            _seeded(
                lambda: hf.Qwen2MoeForCausalLM(
                    hf.Qwen2MoeConfig(
                        **DECODER_CONFIG,
                        num_experts=4,
                        num_experts_per_tok=2,
                        moe_intermediate_size=32,
                        shared_expert_intermediate_size=32,
                    )
                )
            ),
            _ids,
            "model.layers.1.self_attn.q_proj.weight",
            "model.layers.1",
        ),
        Arch(
            "vit",
            "vision",
            _seeded(lambda: hf.ViTModel(hf.ViTConfig(**_VISION))),
            _pixels,
            "layers.1.mlp.fc1.weight",
            "layers.1",
        ),
        Arch(
            "whisper",
            "audio",
            _seeded(
                lambda: hf.WhisperModel(
                    hf.WhisperConfig(
                        **_SEQ2SEQ, num_mel_bins=8, max_source_positions=8, max_target_positions=16
                    )
                )
            ),
            _mel,
            "decoder.layers.1.fc1.weight",
            "decoder.layers.1",
        ),
        Arch(
            "wav2vec2",
            "audio",
            _seeded(
                lambda: hf.Wav2Vec2Model(
                    hf.Wav2Vec2Config(
                        hidden_size=32,
                        num_hidden_layers=2,
                        num_attention_heads=4,
                        intermediate_size=64,
                        conv_dim=(16, 16),
                        conv_kernel=(10, 3),
                        conv_stride=(5, 2),
                        num_conv_pos_embeddings=16,
                        num_conv_pos_embedding_groups=4,
                    )
                )
            ),
            _audio,
            "encoder.layers.1.feed_forward.intermediate_dense.weight",
            "encoder.layers.1",
        ),
        Arch(
            "clip",
            "multimodal",
            _seeded(
                lambda: hf.CLIPModel(
                    hf.CLIPConfig(
                        text_config=dict(ENCODER_CONFIG, max_position_embeddings=16),
                        vision_config=_VISION,
                    )
                )
            ),
            lambda: {**_ids(), **_pixels()},
            "vision_model.encoder.layers.1.mlp.fc1.weight",
            "vision_model.encoder.layers.1",
        ),
    )
