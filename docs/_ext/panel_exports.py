"""Sphinx extension: write offline panel exports (``report.to_html``) into the built site.

The pages embed ``_static/exports/<name>.html`` in an iframe, so a reader without a kernel sees
the real panel: the same bundle, payload and theme a notebook shows, rendered offline (buttons
that need a kernel are disabled, with a note). The reports are rebuilt on every docs build from
the small models below, so the exports never drift from the code. Needs the panel bundles
(``make bundle``); without them ``report.to_html`` raises ``PanelError`` and the build fails.
"""

from __future__ import annotations

import pathlib
import warnings

import torch
from sphinx.application import Sphinx
from torch import nn

import torchlens_nb as tl


class Standardize(nn.Module):
    """Batch standardisation: NaN on a batch of one (std over one value divides by zero)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=0, keepdim=True)
        std = x.std(dim=0, keepdim=True)
        return (x - mean) / (std + 1e-5)


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(6, 16)
        self.norm = Standardize()
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.norm(self.embed(x))))


def nonfinite_report() -> tl.report.Report:
    """The NaN-forensics story of ``notebooks/02_nan_forensics.ipynb``, section 1."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"std\(\): degrees of freedom")
        return tl.debug.nonfinite_origin(Classifier(), torch.randn(1, 6))


def grad_health_report() -> tl.report.Report:
    """The dead-block story of ``notebooks/03_gradient_health.ipynb``, section 2."""
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(5)]
    model = nn.Sequential(*blocks, nn.Linear(8, 1))
    with torch.no_grad():
        model[2][0].bias.fill_(-100.0)
    torch.manual_seed(1)
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    trace = tl.trace(model, x, capture=tl.options.CaptureOptions(save_grads=True))
    trace.backward(nn.functional.mse_loss(trace.output, y))
    return tl.debug.grad_health(trace)


EXPORTS = {"nonfinite": nonfinite_report, "grad_health": grad_health_report}
"""File stem -> the function building the exported report."""


def write_exports(app: Sphinx, exception: BaseException | None) -> None:
    """``build-finished``: write each export into ``<outdir>/_static/exports/``."""
    if exception is not None or app.builder.format != "html":
        return
    folder = pathlib.Path(app.outdir) / "_static" / "exports"
    folder.mkdir(parents=True, exist_ok=True)
    for name, build in EXPORTS.items():
        build().to_html(str(folder / f"{name}.html"))


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("build-finished", write_exports)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
