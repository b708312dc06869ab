"""Benchmark figures have one source: the recorded results in ``benchmarks/recorded/``.

The README (rendered by GitHub, without Sphinx) writes each figure followed by
``<!-- bench:stem:key -->``; the figure must be exactly the recorded text. The Sphinx pages
use the ``{bench}`` role instead, which reads the same file (``docs/_ext/bench_figures.py``).
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _record  # noqa: E402  (benchmarks/ is a folder of scripts)

_MARKED = re.compile(r"<!-- bench:([\w.-]+:[\w.-]+) -->")
_ROLE = re.compile(r"\{bench(?:-run)?\}`([^`]+)`")


def _marked_figures(text: str) -> list[tuple[str, str]]:
    """(reference, the text right before its marker) for each marker of ``text``."""
    return [(match.group(1), text[: match.start()]) for match in _MARKED.finditer(text)]


def test_every_figure_the_readme_quotes_is_the_recorded_one() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    marked = _marked_figures(readme)
    assert len(marked) >= 15  # the benchmark table and the peer line
    wrong = [
        (reference, _record.figure(reference)["text"])
        for reference, before in marked
        if not before.endswith(_record.figure(reference)["text"])
    ]
    assert wrong == [], f"README figures that differ from benchmarks/recorded/: {wrong}"


def test_every_bench_role_in_the_docs_names_a_recorded_figure() -> None:
    references = {
        reference
        for page in (ROOT / "docs").rglob("*.md")
        # a role inside a ``literal`` is an example of the syntax, not a quote
        for reference in _ROLE.findall(re.sub(r"``.+?``", "", page.read_text(encoding="utf-8")))
    }
    assert "integrations:trainer_1x32_cpu" in references
    for reference in sorted(references):
        assert _record.figure(reference)["text"], reference


@pytest.mark.parametrize(
    "path", sorted((ROOT / "benchmarks" / "recorded").glob("*.json")), ids=lambda p: p.stem
)
def test_every_recorded_figure_says_when_and_on_what_it_was_measured(path: pathlib.Path) -> None:
    result = json.loads(path.read_text(encoding="utf-8"))
    assert result.get("script") or result.get("source")
    if result.get("script"):
        assert (ROOT / result["script"]).exists()
    for key, figure in result["figures"].items():
        assert set(figure) == {"text", "date", "commit", "note"}, key
        # a figure without a commit says why (transcribed from a run that did not record it)
        assert figure["commit"] or figure["note"], key


def test_a_readme_figure_that_drifts_is_caught() -> None:
    drifted = "| 1.063x / 1.053x<!-- bench:integrations:trainer_1x32_cpu --> |"
    ((reference, before),) = _marked_figures(drifted)
    assert not before.endswith(_record.figure(reference)["text"])


def test_a_benchmark_run_records_its_figures_with_date_and_commit(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_record, "RESULTS", tmp_path)
    (tmp_path / "bench_x.json").write_text(
        json.dumps({"script": "benchmarks/bench_x.py", "figures": {"kept": {"text": "1x"}}})
    )
    path = _record.record("benchmarks/bench_x.py", {"ratio": "1.040x / 0.997x"}, note="1x32")
    recorded = json.loads(path.read_text(encoding="utf-8"))
    figure = recorded["figures"]["ratio"]
    assert figure["text"] == "1.040x / 0.997x"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", figure["date"])
    assert re.fullmatch(r"[0-9a-f]{7,}(\+dirty)?", figure["commit"])  # this checkout's HEAD
    assert figure["note"].endswith("; 1x32")
    assert recorded["figures"]["kept"] == {"text": "1x"}  # figures this run did not make stay
    assert _record.figure("x:ratio") == figure
