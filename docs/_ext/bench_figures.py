"""Sphinx extension: benchmark figures quoted from their recorded result, never retyped.

``{bench}`integrations:trainer_1x32_cpu``` renders the ``text`` of that figure in
``benchmarks/recorded/bench_integrations.json`` (``peers:...`` reads ``recorded/peers.json``);
``{bench-run}`integrations:trainer_1x32_cpu``` renders where it comes from: the script (or the
source of a peer figure), the date and the commit it was measured on ("commit not recorded"
for figures transcribed from a run that did not record it). An unknown key fails the build
(``-W``). How figures get there: ``benchmarks/_record.py``.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxRole

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))

import _record


class _FigureRole(SphinxRole):
    def lookup(self) -> tuple[dict[str, Any], dict[str, Any]] | None:
        stem = self.text.partition(":")[0]
        try:
            return _record.load(stem), _record.figure(self.text)
        except (FileNotFoundError, KeyError) as error:
            self.inliner.reporter.warning(f"bench figure {self.text!r}: {error}", line=self.lineno)
            return None


class BenchRole(_FigureRole):
    """``{bench}`stem:key```: the figure's text, as a literal."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        found = self.lookup()
        text = found[1]["text"] if found else self.text
        return [nodes.Text(text)], []


class BenchRunRole(_FigureRole):
    """``{bench-run}`stem:key```: the script (or source), date and commit of the figure."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        found = self.lookup()
        if found is None:
            return [nodes.Text(self.text)], []
        result, figure = found
        where = result.get("script") or result.get("source", "")
        parts = [where]
        if figure.get("date"):
            parts.append(figure["date"])
        parts.append(
            f"commit {figure['commit']}" if figure.get("commit") else "commit not recorded"
        )
        return [nodes.literal(text=parts[0]), nodes.Text(", " + ", ".join(parts[1:]))], []


def setup(app: Sphinx) -> dict[str, object]:
    app.add_role("bench", BenchRole())
    app.add_role("bench-run", BenchRunRole())
    return {"parallel_read_safe": True, "parallel_write_safe": True}
