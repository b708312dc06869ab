"""Big panels: how long a mount and the first answer to an input take (the timing that
tests/faults/test_size.py used to assert, measured here instead).

Cases, the same reports the size tests build: a 5,000-op lineage (400 nodes shipped), a
20,000-node grad_fn graph in 8,040 nested module groups, the same size with no groups (the
panel refuses the layout in words), and a 10,000-row table (one page shipped). Rows: the
panel payload's size, ``mount`` (the bundle loaded as anywidget does, ``render``, then two
animation frames: the first draw) and ``answer`` (one animation frame and a hover on the badge
after it), min and median over 3 runs in one headless chromium. The old test bounds are the
targets: mount under 20 s, answer under 2 s on this 2-core machine.

Run: ``.venv/bin/python benchmarks/bench_panel_size.py`` (about a minute on 2 cores).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
import _browser  # noqa: E402

import torchlens_nb as tl  # noqa: E402
from tests.browser.reports import big_table_report  # noqa: E402
from tests.faults.test_size import Chain, deep_model  # noqa: E402
from torchlens_nb import widgets  # noqa: E402
from torchlens_nb.report import Report  # noqa: E402

MOUNT_TARGET_S = 20.0
ANSWER_TARGET_S = 2.0

MEASURE = (
    "async ([src, payload, arrays]) => {"
    + _browser.MOUNT_JS
    + """
  const { el, t0 } = await mount(src, { payload, offline: true, arrays, report_id: 0 });
  await frames();
  const mounted = performance.now() - t0;
  const t1 = performance.now();
  await new Promise((r) => requestAnimationFrame(r));
  el.querySelector(".tln-badge")?.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
  await new Promise((r) => setTimeout(r, 0));
  const answered = performance.now() - t1;
  el.remove();
  return { mounted, answered };
}"""
)


def ungrouped_graph() -> Report:
    x = torch.ones(3, requires_grad=True)
    y = x
    for _ in range(12_000):  # two nodes (mul, add) per step, walk truncated at 20,000
        y = y * 1.0001 + 0.1
    return tl.debug.walk_grad_fn(y.sum())


def grouped_graph() -> Report:
    model = deep_model()
    return tl.debug.walk_grad_fn(model(torch.ones(2, 4)).sum(), model=model)


def cases() -> list[tuple[str, Report]]:
    trace = tl.trace(Chain(), torch.ones(2, 3))
    return [
        ("5,000-op lineage", tl.debug.lineage(trace, trace.ops[-1].label)),
        ("20,000-node grouped graph", grouped_graph()),
        ("20,000-node ungrouped graph", ungrouped_graph()),
        ("10,000-row table", big_table_report(10_000)),
    ]


def main() -> None:
    if not _browser.available("grad_fn.js"):
        print("bench_panel_size: n/a (no chromium or panel bundles; make bundle)")
        return
    rows = []
    with _browser.themed_page() as page:
        for name, report in cases():
            payload = widgets.panel_payload(report)
            arrays = {
                k: {**{a: b for a, b in v.items() if a != "data"}, "data": list(v["data"])}
                for k, v in widgets.panel_arrays(report).items()
            }
            src = (widgets.STATIC_DIR / f"{widgets.panel_name(report)}.js").read_text()
            runs = [page.evaluate(MEASURE, [src, payload, arrays]) for _ in range(3)]
            mounted = [r["mounted"] / 1e3 for r in runs]
            answered = [r["answered"] / 1e3 for r in runs]
            rows.append(
                (
                    name,
                    len(json.dumps(payload)) / 1e6,
                    min(mounted),
                    statistics.median(mounted),
                    min(answered),
                    "met"
                    if min(mounted) < MOUNT_TARGET_S and min(answered) < ANSWER_TARGET_S
                    else "missed",
                )
            )
    print(
        f"{'panel':30} {'payload MB':>10} {'mount min s':>12} {'mount med s':>12} {'answer s':>9}  target"
    )
    for name, mb, m_min, m_med, a_min, verdict in rows:
        print(
            f"{name:30} {mb:10.2f} {m_min:12.2f} {m_med:12.2f} {a_min:9.3f}  {verdict} (< {MOUNT_TARGET_S:.0f} s / < {ANSWER_TARGET_S:.0f} s)"
        )


if __name__ == "__main__":
    main()
