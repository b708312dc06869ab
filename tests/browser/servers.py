"""The plumbing of the end-to-end tier's servers (JupyterLab, marimo) and notebooks.

``running_server`` starts a command in its own process group, waits until ``ready_url``
answers 200, and kills the group on exit (kernels go with it); ``write_notebook`` writes an
nbformat notebook of code cells with the python3 kernelspec.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence

import nbformat


def server_env(extra_pythonpath: Sequence[pathlib.Path], **variables: str) -> dict[str, str]:
    """This process's environment plus ``variables``, with ``extra_pythonpath`` first on
    ``PYTHONPATH`` (so the server's kernels import this checkout)."""
    path = os.pathsep.join([*map(str, extra_pythonpath), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, **variables, "PYTHONPATH": path.strip(os.pathsep)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_server(
    command: Sequence[str],
    ready_url: str,
    *,
    env: Mapping[str, str],
    log_path: pathlib.Path,
    timeout_s: float,
    cwd: pathlib.Path | None = None,
) -> Iterator[float]:
    """Run ``command`` until the block ends; yields the seconds it took to answer."""
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
        )
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{command[2]} exited early:\n{log_path.read_text()[-3000:]}"
                    )
                with contextlib.suppress(OSError):
                    with urllib.request.urlopen(ready_url, timeout=2) as response:
                        if response.status == 200:
                            break
                if time.monotonic() - started > timeout_s:
                    raise TimeoutError(f"{command[2]} not up in {timeout_s} s; log: {log_path}")
                time.sleep(0.25)
            yield round(time.monotonic() - started, 1)
        finally:
            with contextlib.suppress(ProcessLookupError):  # our process group only
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)


def write_notebook(path: pathlib.Path, cells: Sequence[str]) -> None:
    """An nbformat notebook of ``cells`` (code) with the python3 kernelspec, at ``path``."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(notebook, path)
