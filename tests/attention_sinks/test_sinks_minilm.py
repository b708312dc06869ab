"""The sink probe on the trained MiniLM and its random-init twin, checked against an
independent plain-torch computation from Hugging Face's own ``output_attentions``."""

from __future__ import annotations

import torch

import torchlens_nb as tl
from tests.attention_sinks.minilm import BLOCKS, SENTENCES


def reference(model, batch) -> tuple[dict[tuple[int, int], tuple[int, float]], set, float, float]:
    """Sinks, outlier dims, top mass and top factor computed from HF outputs, not the probe.

    A head's mass on key k = mean over every real (unpadded) query in the batch of its
    attention on k; a sink needs mass >= 0.5 and >= 2x the uniform share 1/len.
    An outlier dim of a block output has mean |value| over real tokens >= 6x the (lower) median
    dim's.
    """
    with torch.no_grad():
        out = model(**batch, output_attentions=True, output_hidden_states=True)
    mask = batch["attention_mask"].bool()
    lengths = mask.sum(1)
    uniform = float((1.0 / lengths.repeat_interleave(lengths).double()).mean())
    sinks, top_mass = {}, 0.0
    for layer, probs in enumerate(out.attentions):  # (batch, heads, queries, keys)
        mass, position = probs.permute(0, 2, 1, 3)[mask].mean(0).max(-1)
        top_mass = max(top_mass, float(mass.max()))
        for head in range(probs.shape[1]):
            if mass[head] >= max(0.5, 2 * uniform):
                sinks[layer, head] = (int(position[head]), float(mass[head]))
    outliers, top_factor = set(), 0.0
    for layer, hidden in enumerate(out.hidden_states[1:]):  # the six block outputs
        mean_abs = hidden[mask].abs().mean(0)
        factor = mean_abs / mean_abs.median()
        top_factor = max(top_factor, float(factor.max()))
        outliers |= {(layer, d) for d in torch.nonzero(factor >= 6.0).flatten().tolist()}
    return sinks, outliers, top_mass, top_factor


def probe_run(model, batch) -> tl.debug.SinkProbe:
    probe = tl.debug.SinkProbe(
        attention=[tl.func("softmax")],
        residual=[tl.module(*BLOCKS)],
        attention_mask=batch["attention_mask"],
    )
    tl.trace(
        model, dict(batch), save=False, capture=tl.options.CaptureOptions(hooks=probe.hook_plan())
    )
    return probe


def test_trained_minilm_sinks_sit_on_cls_in_the_middle_layers(
    minilm, minilm_batch, minilm_tokenizer
) -> None:
    expected, expected_dims, _, _ = reference(minilm, minilm_batch)
    probe = probe_run(minilm, minilm_batch)
    layer_of = {a.label: i for i, a in enumerate(probe.attention_layers())}
    got = {(layer_of[s.label], s.head): (s.position, s.mass) for s in probe.sink_heads}
    assert got.keys() == expected.keys()
    for key, (position, mass) in got.items():
        assert position == expected[key][0]
        assert abs(mass - expected[key][1]) < 1e-5
    # Concentrated on [CLS] (position 0 of every sentence) in the middle layers.
    tokens = minilm_tokenizer.convert_ids_to_tokens(minilm_batch["input_ids"][0])
    assert {position for position, _ in got.values()} == {0} and tokens[0] == "[CLS]"
    per_layer = [sum(layer == i for layer, _ in got) for i in range(6)]
    assert per_layer == [0, 7, 11, 10, 11, 1]  # of 12 heads each: 39 of 40 in layers 1-4
    # Outlier residual dims, same sites as the independent computation.
    res_layer = {r.label: i for i, r in enumerate(probe.residual_layers())}
    assert {(res_layer[o.label], o.dim) for o in probe.outlier_dims} == expected_dims
    assert {o.dim for o in probe.outlier_dims} == {157, 223}
    assert len(expected_dims) >= 5


def test_random_init_twin_has_no_sinks_and_no_outlier_dims(minilm_random, minilm_batch) -> None:
    expected, expected_dims, top_mass, top_factor = reference(minilm_random, minilm_batch)
    probe = probe_run(minilm_random, minilm_batch)
    assert (expected, expected_dims) == ({}, set())
    assert (probe.sink_heads, probe.outlier_dims) == ((), ())
    # Far from the thresholds, not just under them: uniform share is 1/~11 tokens.
    assert top_mass < 0.2 and top_factor < 3.5
    facts = probe.facts()
    assert abs(max(h["mass"] for a in facts["attention"] for h in a["heads"]) - top_mass) < 1e-5
    assert abs(max(r["max_factor"] for r in facts["residual"]) - top_factor) < 1e-4


def test_padding_does_not_distort_statistics_when_the_mask_is_given(
    minilm, minilm_tokenizer
) -> None:
    short, long = SENTENCES[0], SENTENCES[1]
    padded = minilm_tokenizer([short, long], padding=True, return_tensors="pt")
    assert padded["attention_mask"].sum(1).tolist() == [9, 16]  # 7 pads on the short one
    # Independent: each sentence alone, no padding; pool the 9 + 16 queries per head.
    sums, rows = 0, 0
    for text in (short, long):
        alone = minilm_tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            probs = minilm(**alone, output_attentions=True).attentions[2][0]  # (heads, q, k)
        keys = probs.shape[-1]
        sums = sums + torch.nn.functional.pad(probs.sum(1), (0, 16 - keys))
        rows += probs.shape[1]
    expected = sums / rows  # (heads, 16)

    masked = probe_run(minilm, padded)
    layer = masked.attention_layers()[2]
    mass, position = expected.max(-1)
    assert layer.positions == tuple(position.tolist())
    assert max(abs(a - b) for a, b in zip(layer.masses, mass.tolist())) < 1e-5

    unmasked = tl.debug.SinkProbe(attention=[tl.func("softmax")])
    tl.trace(
        minilm,
        dict(padded),
        save=False,
        capture=tl.options.CaptureOptions(hooks=unmasked.hook_plan()),
    )
    # Without the mask the 7 padded queries of the short sentence are averaged in.
    assert (
        max(abs(a - b) for a, b in zip(unmasked.attention_layers()[2].masses, mass.tolist())) > 0.01
    )
