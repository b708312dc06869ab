"""A real marimo app for end-to-end panel tests (``marimo run`` on 127.0.0.1).

``running_marimo(root, cells, theme)`` writes a marimo notebook whose cells are ``cells``, a
``pyproject.toml`` beside it that sets marimo's display theme (``[tool.marimo.display]``), and
serves it with ``marimo run --headless``; it kills the process group on exit. marimo shows each
anywidget inside a ``<marimo-anywidget>`` element's shadow root (Playwright locators pierce it).

Measured here (2 cores): server up in ~3 s, the notebook's cells run and the first panel shows
in 20-40 s (importing torch and transformers in the app's kernel).
"""

from __future__ import annotations

import contextlib
import pathlib
import sys
import textwrap
from collections.abc import Iterator, Sequence
from typing import Literal

from tests.browser.servers import free_port, running_server, server_env

MARIMO_START_TIMEOUT_S = 60


def _notebook(cells: Sequence[str]) -> str:
    body = "".join(
        f"\n\n@app.cell\ndef _():\n{textwrap.indent(source, '    ')}\n    return\n"
        for source in cells
    )
    return f"import marimo\n\napp = marimo.App()\n{body}\n\nif __name__ == '__main__':\n    app.run()\n"


@contextlib.contextmanager
def running_marimo(
    root: pathlib.Path,
    cells: Sequence[str],
    theme: Literal["light", "dark"],
    extra_pythonpath: Sequence[pathlib.Path] = (),
) -> Iterator[str]:
    """Serve a marimo app of ``cells`` in ``theme``; yields its URL."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "app.py").write_text(_notebook(cells), encoding="utf-8")
    (root / "pyproject.toml").write_text(f'[tool.marimo.display]\ntheme = "{theme}"\n')
    port = free_port()
    # HOME: marimo's user config and state stay in the temp folder
    env = server_env(extra_pythonpath, HOME=str(root))
    command = [
        sys.executable,
        "-m",
        "marimo",
        "run",
        "--headless",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "app.py",
    ]
    url = f"http://127.0.0.1:{port}/"
    with running_server(
        command,
        url,
        env=env,
        log_path=root / "marimo.log",
        timeout_s=MARIMO_START_TIMEOUT_S,
        cwd=root,
    ):
        yield url
