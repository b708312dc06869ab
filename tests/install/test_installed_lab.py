"""End to end with the installed wheel as the kernel's package: a real JupyterLab whose kernel
is the fresh venv's interpreter (isolated), a NaN origin panel, and a lineage click answered by
that kernel. Screenshot: tests/artifacts/installed_lab_lineage.png."""

from __future__ import annotations

import pathlib
import tempfile

import pytest
from playwright.sync_api import expect

from tests.browser.helpers import guarded_page
from tests.browser.lab import LabNotebook, running_lab

pytestmark = pytest.mark.slow

CELLS = [
    "import torch\n"
    "from torch import nn\n"
    "import torchlens_nb as tl\n"
    "class Block(nn.Module):\n"
    "    def forward(self, x):\n"
    "        return torch.log(x - 10.0)\n"
    "torch.manual_seed(0)\n"
    "report = tl.debug.nonfinite_origin(nn.Sequential(nn.Linear(4, 4), Block()), torch.randn(2, 4))\n"
    "print(tl.__file__)\n"
    "report",
]


def test_a_lineage_click_is_answered_by_the_installed_package(browser, installed_python) -> None:
    root = pathlib.Path(tempfile.mkdtemp(prefix="tln_installed_lab_"))
    with running_lab(root, kernel_python=installed_python) as lab:
        with guarded_page(browser, {"width": 1280, "height": 1000}) as page:
            page.set_default_timeout(30_000)
            nb = LabNotebook(page, lab, "installed.ipynb", CELLS)
            outputs = nb.run_cell(0)
            printed = "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")
            assert pathlib.Path(printed.strip()).is_relative_to(installed_python.parent.parent)
            panel = nb.output_panel(0)
            panel.get_by_role("button", name="Show lineage").click()
            followup = panel.locator('.tln-followup .tln-panel[data-panel="lineage"]')
            expect(followup.locator(".tln-type")).to_have_text("lineage", timeout=30_000)
            expect(followup.locator(".tln-lead")).to_contain_text("log_1 has 1 ancestor")
            nb.screenshot("installed_lab_lineage")
