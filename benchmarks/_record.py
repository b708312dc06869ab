"""The recorded result of a benchmark: the one source of every figure the docs quote.

A benchmark that the README, ``docs/benchmarks.md`` or a capability page quotes ends its run
with :func:`record`, which updates ``benchmarks/recorded/<script stem>.json``::

    {"script": "benchmarks/bench_x.py", "machine": "...",
     "figures": {"key": {"text": "1.040x / 0.997x", "date": "2026-12-01",
                         "commit": "21347a8", "note": "torch 2.13.0+cpu, load average 2.1"}}}

A figure's ``text`` is exactly what the pages show; ``date`` and ``commit`` say when and on
what it was measured (``commit`` is null for figures transcribed from a run that did not
record it, and ends in ``+dirty`` when the tree had uncommitted changes). Pages read figures by
key: in the Sphinx pages the role ``{bench}`x:key``` (``docs/_ext/bench_figures.py``) renders
the text of ``figures["key"]`` of ``recorded/bench_x.json``, and ``{bench-run}`x:key``` its
script, date and commit; the README, which GitHub renders without Sphinx, writes the text
followed by ``<!-- bench:x:key -->``, and ``tests/docs/test_bench_figures.py`` checks that
each such text equals the recorded one. Re-running a benchmark and committing its JSON moves
every page that quotes it, so two pages can no longer disagree. Figures of other people's
tools, measured outside this repository, live in ``recorded/peers.json`` with their source
(edited by hand, never by :func:`record`).
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import subprocess
from collections.abc import Mapping
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "recorded"
"""Folder of the recorded results, one JSON file per benchmark script."""


def _git(*args: str) -> str:
    result = subprocess.run(["git", *args], capture_output=True, text=True, cwd=HERE, check=False)
    return result.stdout.strip()


def record(script: str, figures: Mapping[str, str], *, note: str = "") -> pathlib.Path:
    """Record this run's ``figures`` of ``script`` (pass ``__file__``) with date and commit.

    Args:
        script: the benchmark's path; names the result file ``recorded/<stem>.json``.
        figures: key -> the exact text the pages show (e.g. ``"1.040x / 0.997x"``). Keys are
            the benchmark's own and stay stable, since pages quote them.
        note: what a reader needs to know about this run (the case, the machine's state).

    Returns:
        The path written. Figures of the file that this run did not produce are kept.
    """
    import torch

    stem = pathlib.Path(script).stem
    path = RESULTS / f"{stem}.json"
    recorded = load(stem) if path.exists() else {"script": f"benchmarks/{stem}.py"}
    commit = _git("rev-parse", "--short", "HEAD") or None
    if commit and _git("status", "--porcelain", "--untracked-files=no"):
        commit += "+dirty"
    load_1m = os.getloadavg()[0]
    run_note = f"torch {torch.__version__}, load average {load_1m:.1f}" + (
        f"; {note}" if note else ""
    )
    recorded["machine"] = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    recorded.setdefault("figures", {}).update(
        {
            key: {
                "text": text,
                "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
                "commit": commit,
                "note": run_note,
            }
            for key, text in figures.items()
        }
    )
    RESULTS.mkdir(exist_ok=True)
    path.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")
    print(f"recorded {len(figures)} figure(s) in benchmarks/recorded/{path.name}")
    return path


def load(stem: str) -> dict[str, Any]:
    """The recorded result ``recorded/<stem>.json`` (``stem`` with or without ``bench_``)."""
    for name in (stem, f"bench_{stem}"):
        path = RESULTS / f"{name}.json"
        if path.exists():
            return json.loads(path.read_text(encoding="utf-8"))
    raise FileNotFoundError(f"no recorded result {stem!r} in benchmarks/recorded/")


def figure(reference: str) -> dict[str, Any]:
    """The recorded figure ``"<stem>:<key>"`` (e.g. ``"integrations:trainer_1x32_cpu"``)."""
    stem, _, key = reference.partition(":")
    figures = load(stem)["figures"]
    if key not in figures:
        raise KeyError(f"benchmarks/recorded/{stem}: no figure {key!r} (has {sorted(figures)})")
    return figures[key]
