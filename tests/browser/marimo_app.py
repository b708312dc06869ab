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
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Literal

from tests.browser.lab import _free_port

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
    port = _free_port()
    env = {
        **os.environ,
        "HOME": str(root),  # marimo's user config and state stay in the temp folder
        "PYTHONPATH": os.pathsep.join(
            [*map(str, extra_pythonpath), os.environ.get("PYTHONPATH", "")]
        ).strip(os.pathsep),
    }
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
    log_path = root / "marimo.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        url = f"http://127.0.0.1:{port}/"
        started = time.monotonic()
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"marimo exited early:\n{log_path.read_text()[-3000:]}")
                with contextlib.suppress(OSError):
                    with urllib.request.urlopen(url, timeout=2) as response:
                        if response.status == 200:
                            break
                if time.monotonic() - started > MARIMO_START_TIMEOUT_S:
                    raise TimeoutError(f"marimo not up in {MARIMO_START_TIMEOUT_S} s; {log_path}")
                time.sleep(0.25)
            yield url
        finally:
            with contextlib.suppress(ProcessLookupError):  # our process group only
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
