"""Autograd graph: walk + layout + first paint, against torchviz ``make_dot`` + ``dot -Tsvg``.

Case: GPT-2 small (``GPT2Config()`` random init, train mode so dropout nodes exist, eager
attention, 1x64 tokens); the graph of its loss (822 autograd nodes, 894 edges). Rows:

* ``walk_grad_fn``: the iterative walk with names, saved shapes and module groups.
* ``sketch_grad_fn -> svg``: walk + DOT + the bounded ``dot -Tsvg`` (clustered by module, and
  flat with ``clusters=False``): the same static picture torchviz gives.
* ``panel payload``: walk + ``widgets.panel_payload`` (what the kernel sends the panel).
* ``torchviz make_dot + svg``: ``make_dot(loss, params=dict(model.named_parameters()))`` then
  ``.pipe("svg")`` (n/a when torchviz, a benchmark extra, is not importable).
* layout rows, for the panel's layout choice: dagre in node (what the panel runs) and graphviz
  ``dot -Tplain`` on the same visible graph (the Python alternative), at the panel's opening
  fold level and fully unfolded.
* ``panel first paint``: headless chromium, bundle loaded as anywidget does, from ``render``
  to two animation frames after (the graph drawn); and ``Unfold all`` to the redrawn graph.
  Skipped when chromium, node or the bundle is missing.

Ratios are against torchviz (lower is faster). Run: ``.venv/bin/python benchmarks/bench_grad_fn.py``
(about a minute on 2 cores).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _browser
import _timing

import torchlens_nb as tl
from torchlens_nb import widgets

ROOT = Path(__file__).resolve().parents[1]


def gpt2_small_loss() -> tuple[torch.nn.Module, torch.Tensor]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(attn_implementation="eager"))  # train mode: dropout on
    ids = torch.randint(0, model.config.vocab_size, (1, 64))
    return model, model(input_ids=ids, labels=ids).loss


def visible_edges(
    sketch: tl.report.GradFnSketch, depth: int | None
) -> tuple[set[str], set[tuple[str, str]]]:
    """Units and edges the panel draws with groups unfolded to ``depth`` (None: all).

    A node shows as its outermost folded group (the prefix one level below ``depth``) or as
    itself when every group above it is unfolded.
    """

    def unit(node: tl.report.GradFnNode) -> str:
        parts = node.group.split(".") if node.group else []
        if depth is not None and len(parts) > depth:
            return ".".join(parts[: depth + 1])
        return f"#{node.id}"

    keys = [unit(n) for n in sketch.nodes]
    edges = {(keys[e.src], keys[e.dst]) for e in sketch.edges if keys[e.src] != keys[e.dst]}
    return set(keys), edges


def dot_plain_ms(units: set[str], edges: set[tuple[str, str]]) -> float:
    index = {u: i for i, u in enumerate(sorted(units))}
    source = "digraph g { node [shape=box width=1.6 height=0.33 fixedsize=true];\n"
    source += "".join(f"u{i};\n" for i in index.values())
    source += "".join(f"u{index[a]} -> u{index[b]};\n" for a, b in edges) + "}"
    start = time.perf_counter()
    subprocess.run(["dot", "-Tplain"], input=source, text=True, capture_output=True, check=True)
    return (time.perf_counter() - start) * 1e3


NODE_LAYOUT = """
import fs from "node:fs";
import { readGraph, visibleGraph, unfoldedTo, deepestLevel } from "%(model)s";
import { layoutVisible } from "%(layout)s";
const data = JSON.parse(fs.readFileSync(process.argv[1], "utf8")).data;
const graph = readGraph(data);
const open = deepestLevel(graph, Math.min(data.layout.initial_units, data.layout.max_units));
const out = {};
for (const [name, depth] of [["open", open], ["full", graph.maxDepth]]) {
  const visible = visibleGraph(graph, unfoldedTo(graph, depth));
  const times = [];
  for (let i = 0; i < 5; i++) times.push(layoutVisible(visible).ms);
  out[name] = { depth, units: visible.units.length, ms: Math.min(...times) };
}
console.log(JSON.stringify(out));
"""

PAINT = (
    "async ([src, payload]) => {"
    + _browser.MOUNT_JS
    + """
  const { el, t0 } = await mount(src, { payload, offline: true, arrays: {}, report_id: 0 });
  await frames();
  const paint = performance.now() - t0;
  const t1 = performance.now();
  el.querySelector('button[aria-label="Unfold every group"]').click();
  const done = String(payload.data.num_nodes);
  while (el.querySelector(".tln-gg").dataset.units !== done) await frames();
  await frames();
  return { paint, unfold: performance.now() - t1 };
}"""
)


def browser_paint_ms(payload: dict) -> dict[str, float] | None:
    if not _browser.available("grad_fn.js"):
        return None
    bundle = (widgets.STATIC_DIR / "grad_fn.js").read_text()
    with _browser.themed_page() as page:
        runs = [page.evaluate(PAINT, [bundle, payload]) for _ in range(3)]
    return {k: min(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    model, loss = gpt2_small_loss()
    params = dict(model.named_parameters())
    sketch = tl.debug.walk_grad_fn(loss, model=model)
    out_dir = Path(tempfile.mkdtemp(prefix="bench_grad_fn_"))
    contenders = [
        ("walk_grad_fn", lambda: tl.debug.walk_grad_fn(loss, model=model)),
        (
            "sketch_grad_fn -> svg",
            lambda: tl.debug.sketch_grad_fn(loss, out_dir / "ours", file_format="svg", model=model),
        ),
        (
            "sketch_grad_fn -> svg, clusters=False",
            lambda: tl.debug.sketch_grad_fn(
                loss, out_dir / "flat", file_format="svg", model=model, clusters=False
            ),
        ),
        (
            "panel payload (walk + panel_payload)",
            lambda: widgets.panel_payload(tl.debug.walk_grad_fn(loss, model=model)),
        ),
    ]
    has_torchviz = importlib.util.find_spec("torchviz") is not None
    if has_torchviz:
        from torchviz import make_dot

        contenders.append(
            ("torchviz make_dot + svg", lambda: make_dot(loss, params=params).pipe(format="svg"))
        )
    timings = _timing.interleaved(contenders, rounds=5, warmup=1)
    base = next((t for t in timings if t.name.startswith("torchviz")), None)
    rows = [
        {
            "contender": t.name,
            "min_ms": t.min_s * 1e3,
            "median_ms": t.median_s * 1e3,
            "vs_torchviz": "n/a" if base is None else f"{t.min_s / base.min_s:.3f}x",
        }
        for t in timings
    ]
    if base is None:
        rows.append(
            {
                "contender": "torchviz make_dot + svg",
                "min_ms": "n/a",
                "median_ms": "n/a",
                "vs_torchviz": "n/a (pip install torchviz)",
            }
        )
    print(
        f"GPT-2 small loss: {len(sketch.nodes)} nodes, {len(sketch.edges)} edges, "
        f"{len(sketch.groups)} groups"
    )
    _timing.print_table(rows)

    payload = widgets.panel_payload(sketch)
    print(f"\npanel payload: {len(json.dumps(payload)) / 1024:.0f} KiB of JSON")
    layout_rows = []
    if shutil.which("node") and (ROOT / "js" / "node_modules" / "@dagrejs").is_dir():
        payload_file = out_dir / "payload.json"
        payload_file.write_text(json.dumps(payload))
        script = NODE_LAYOUT % {
            "model": (ROOT / "js/panels/grad_fn/model.js").as_uri(),
            "layout": (ROOT / "js/panels/grad_fn/layout.js").as_uri(),
        }
        done = subprocess.run(
            ["node", "--input-type=module", "-e", script, str(payload_file)],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT / "js",
        )
        for view, result in json.loads(done.stdout).items():
            units, edges = visible_edges(sketch, None if view == "full" else result["depth"])
            dot_ms = (
                min(dot_plain_ms(units, edges) for _ in range(3)) if shutil.which("dot") else None
            )
            layout_rows.append(
                {
                    "view": f"{view} (depth {result['depth']})",
                    "units": result["units"],
                    "dagre_js_ms": result["ms"],
                    "dot_plain_ms": "n/a" if dot_ms is None else dot_ms,
                }
            )
    _timing.print_table(layout_rows)
    paint = browser_paint_ms(payload)
    if paint is None:
        print("\npanel first paint (chromium): n/a (no chromium or bundle)")
    else:
        prepare = next(t for t in timings if t.name.startswith("panel payload"))
        total_ms = prepare.min_s * 1e3 + paint["paint"]
        print(
            f"\npanel first paint (chromium, render to drawn graph): {paint['paint']:.0f} ms; "
            f"Unfold all ({len(sketch.nodes)} nodes): {paint['unfold']:.0f} ms"
        )
        ratio = (
            ""
            if base is None
            else (f" = {total_ms / (base.min_s * 1e3):.3f}x torchviz make_dot + svg")
        )
        print(f"walk + payload + first paint: {total_ms:.0f} ms{ratio}")
    shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
