"""End-to-end tier: an executed notebook converted to HTML shows each report's card offline.

``jupyter nbconvert --to html --execute`` stores the widget state, so the converted page picks
each widget view and renders it only through a widget manager it loads from a CDN; with no
network a panel is blank. Each report therefore also shows its text card as an output of its
own (report/_display.py), which the page shows as plain HTML. The page is opened with every
request that leaves 127.0.0.1 aborted. Screenshot: tests/artifacts/nbconvert_offline.png.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from playwright.sync_api import expect

from tests.browser.fixtures import ROOT
from tests.browser.helpers import ARTIFACTS, LOOPBACK
from tests.browser.servers import server_env, write_notebook

pytestmark = pytest.mark.slow

CELLS = [
    "import torch\n"
    "import torchlens_nb as tl\n"
    "from tests.browser.reports import traced_ops_report\n"
    "from tests.models import five_block_mlp, traced_backward\n"
    "report, model = traced_ops_report()\n"
    "report",
    "torch.manual_seed(1)\n"
    "trace = traced_backward(five_block_mlp(), torch.randn(4, 8))\n"
    "tl.debug.grad_health(trace)",
    "from torch import nn\n"
    "net = nn.Linear(4, 1)\n"
    "optimizer = torch.optim.SGD(net.parameters(), lr=0.1)\n"
    "session = tl.debug.ChecksSession(net, optimizer, scaler=None)\n"
    "session.register_nonfinite_grad_check()\n"
    "display(session)\n"
    "with session:\n"
    "    for step in range(3):\n"
    "        optimizer.zero_grad()\n"
    "        net(torch.randn(2, 4)).square().mean().backward()\n"
    "        optimizer.step()",
]


def test_each_reports_card_shows_in_the_converted_html_offline(
    browser, tmp_path, out_dir, base_url
):
    path = tmp_path / "executed.ipynb"
    write_notebook(path, CELLS)
    env = server_env(
        [ROOT], IPYTHONDIR=str(tmp_path / "ipython"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime")
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "html",
            "--execute",
            str(path),
            "--output-dir",
            str(out_dir),
        ],
        check=True,
        env=env,
        capture_output=True,
        timeout=300,
    )
    html = (out_dir / "executed.html").read_text(encoding="utf-8")
    assert "application/vnd.jupyter.widget-state+json" in html  # the panels' state was stored

    context = browser.new_context(viewport={"width": 1100, "height": 1400})
    blocked: list[str] = []
    context.route(
        lambda url: not (LOOPBACK.match(url) or url.startswith(("blob:", "data:"))),
        lambda route: (blocked.append(route.request.url), route.abort()),
    )
    try:
        page = context.new_page()
        page.goto(f"{base_url}/out/executed.html")
        cards = page.locator(".tln-static-card")
        expect(cards).to_have_count(3)
        expect(cards.nth(0)).to_be_visible()
        expect(cards.nth(0)).to_contain_text("report [warn] Sequential (4 ops)")
        expect(cards.nth(1)).to_be_visible()
        expect(cards.nth(1)).to_contain_text(
            "grad_health [found] Sequential backward 0 (11 gradients)"
        )
        # the dashboard's card was kept current: it shows the final report of the loop
        expect(cards.nth(2)).to_contain_text("checks [clean]")
        expect(cards.nth(2)).to_contain_text("3 attempt(s): 3 accepted")
        assert any("widget" in url or "require" in url for url in blocked), (
            blocked
        )  # it was offline
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "nbconvert_offline.png"), full_page=True)
    finally:
        context.close()
