"""README.md and every page under docs/ run as written.

Each page's ```` ```python ```` blocks run in page order in one fresh process, as cells of an
IPython shell (``_run_page.py``): a block that uses a name no earlier block defines, an API
that changed, or a value stated in a comment (``trace.frontier  # ('linear_3',)``) that the
code no longer gives fails the page. The integrations pages run on the real frameworks
(transformers, lightning, accelerate), with tiny models and a few steps.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from tests.docs import _page_blocks

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNNER = pathlib.Path(__file__).resolve().parent / "_run_page.py"
PAGES = sorted(
    page
    for page in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    if "_build" not in page.parts and _page_blocks.page_blocks(page)
)


def _page_id(page: pathlib.Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_page_runs_as_written(page: pathlib.Path, tmp_path: pathlib.Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "MPLBACKEND": "Agg",
    }
    result = subprocess.run(
        [sys.executable, str(RUNNER), str(page)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, (
        f"{_page_id(page)} stops:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    )


def test_every_docs_page_with_python_is_run() -> None:
    names = {_page_id(page) for page in PAGES}
    assert {"README.md", "docs/getting_started.md", "docs/integrations/transformers.md"} <= names
