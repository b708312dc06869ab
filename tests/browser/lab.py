"""A real JupyterLab for end-to-end panel tests, and a driver for one notebook in it.

``running_lab(root)`` starts an isolated JupyterLab on 127.0.0.1 (no token, temp root, its own
settings/runtime/IPython dirs, notifications off, cell windowing off so every output renders)
and kills its process group on exit. ``LabNotebook`` writes a notebook, opens it in a page,
waits for an idle kernel, runs cells and finds their panels. Fixtures in conftest.py wrap both
(``lab``, ``lab_notebook``); docs/dev_panels.md section 8 shows a scenario.

Measured here (2 cores): Lab up in ~6 s, notebook to idle kernel ~10 s, first panel ~1 s.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from playwright.sync_api import Locator, Page

from tests.browser.helpers import ARTIFACTS
from tests.browser.servers import free_port, running_server, server_env, write_notebook

LAB_START_TIMEOUT_S = 90
KERNEL_IDLE_TIMEOUT_MS = 90_000
CELL_TIMEOUT_MS = 60_000


@dataclass
class Lab:
    url: str
    root: pathlib.Path
    log_path: pathlib.Path
    startup_s: float


def _write_user_settings(settings: pathlib.Path) -> None:
    """News/update toasts off (they cover cells); windowing off (off-screen outputs render)."""
    notification = settings / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True, exist_ok=True)
    (notification / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False, "doNotDisturbMode": True})
    )
    notebook = settings / "@jupyterlab" / "notebook-extension"
    notebook.mkdir(parents=True, exist_ok=True)
    (notebook / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))


def _write_kernelspec(jupyter_path: pathlib.Path, python: pathlib.Path) -> None:
    """A ``python3`` kernelspec running ``python -I`` (isolated: no PYTHONPATH, no checkout);
    a spec of that name on JUPYTER_PATH takes the place of the server's own interpreter."""
    spec = jupyter_path / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [str(python), "-I", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec.joinpath("kernel.json").write_text(
        json.dumps(
            {"argv": argv, "display_name": "Python 3 (installed wheel)", "language": "python"}
        )
    )


@contextlib.contextmanager
def running_lab(
    root: pathlib.Path,
    extra_pythonpath: Sequence[pathlib.Path] = (),
    kernel_python: pathlib.Path | None = None,
) -> Iterator[Lab]:
    """Start JupyterLab serving ``root``; ``extra_pythonpath`` reaches the kernels, which run
    ``kernel_python`` (isolated) when given, else the server's interpreter."""
    root.mkdir(parents=True, exist_ok=True)
    state = pathlib.Path(tempfile.mkdtemp(prefix="tln_lab_state_"))
    _write_user_settings(state / "user-settings")
    kernels: dict[str, str] = {}
    if kernel_python is not None:
        _write_kernelspec(state / "jupyter-path", kernel_python)
        kernels["JUPYTER_PATH"] = str(state / "jupyter-path")
    port = free_port()
    env = server_env(
        extra_pythonpath,
        **kernels,
        JUPYTERLAB_SETTINGS_DIR=str(state / "user-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(state / "workspaces"),
        JUPYTER_RUNTIME_DIR=str(state / "runtime"),
        IPYTHONDIR=str(state / "ipython"),
    )
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp for the driver
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",  # no PyPI queries from the server
        "--ServerApp.allow_root=True",
    ]  # CI containers often run as root
    url = f"http://127.0.0.1:{port}"
    with running_server(
        command,
        url + "/api/status",
        env=env,
        log_path=state / "lab.log",
        timeout_s=LAB_START_TIMEOUT_S,
    ) as startup_s:
        yield Lab(url, root, state / "lab.log", startup_s)


def shutdown_sessions(lab: Lab, name: str) -> None:
    """Stop the kernel of notebook ``name`` (sessions are per path: a later test with the same
    name would otherwise get this kernel, outputs and all)."""
    with urllib.request.urlopen(f"{lab.url}/api/sessions", timeout=10) as response:
        sessions = json.load(response)
    for session in sessions:
        if session.get("path") == name:
            request = urllib.request.Request(
                f"{lab.url}/api/sessions/{session['id']}", method="DELETE"
            )
            with contextlib.suppress(OSError):
                urllib.request.urlopen(request, timeout=10).close()


_JS_NOTEBOOK = "window.jupyterapp.shell.currentWidget"
_JS_CELL_STATE = f"""(i) => {{
  const nb = {_JS_NOTEBOOK};
  const cell = nb.content.model.cells.get(i);
  const kernel = nb.sessionContext.session?.kernel;
  return {{ count: cell.executionCount, kernel: kernel?.status,
            outputs: cell.outputs.toJSON() }};
}}"""


class LabNotebook:
    """One notebook open in JupyterLab: run cells, read outputs, find panels, take pictures."""

    def __init__(self, page: Page, lab: Lab, name: str, cells: Sequence[str]) -> None:
        write_notebook(lab.root / name, cells)
        self.page = page
        # ?reset: start from an empty workspace, not the tabs an earlier test left open
        page.goto(f"{lab.url}/lab/tree/{name}?reset")
        page.wait_for_function(
            "() => window.jupyterapp?.shell?.currentWidget?.sessionContext?.session?.kernel"
            "?.status === 'idle'",
            timeout=KERNEL_IDLE_TIMEOUT_MS,
            polling=250,
        )

    def run_cell(self, index: int) -> list[dict]:
        """Run cell ``index``, wait until it finished, return its outputs (nbformat dicts).

        Raises:
            AssertionError: the cell raised (the traceback is in the message).
        """
        self.page.evaluate(
            f"""(i) => {{
          const nb = {_JS_NOTEBOOK};
          nb.content.activeCellIndex = i;
          void window.jupyterapp.commands.execute('notebook:run-cell');
        }}""",
            index,
        )
        self.page.wait_for_function(
            f"(i) => {{ const s = ({_JS_CELL_STATE})(i); return s.count != null && s.kernel === 'idle'; }}",
            arg=index,
            timeout=CELL_TIMEOUT_MS,
            polling=200,
        )
        outputs = self.page.evaluate(_JS_CELL_STATE, index)["outputs"]
        errors = [o for o in outputs if o.get("output_type") == "error"]
        assert not errors, "\n".join(errors[0].get("traceback", []))
        return outputs

    def sample_while_running(
        self, index: int, read: Callable[[], Iterable[str]], *, seconds: float, period_ms: int
    ) -> set[str]:
        """Start cell ``index`` and collect what ``read()`` returns every ``period_ms`` until
        the cell finished (its execution count arrives with the ``execute_reply``; the
        kernel's status word flips to idle for widget traffic on the control channel, so it
        cannot tell) or ``seconds`` passed: what a live panel showed while its loop ran."""
        self.page.evaluate(
            f"(i) => {{ const nb = {_JS_NOTEBOOK}; nb.content.activeCellIndex = i;"
            " void window.jupyterapp.commands.execute('notebook:run-cell'); }",
            index,
        )
        has_finished = f"(i) => {_JS_NOTEBOOK}.content.model.cells.get(i).executionCount != null"
        seen: set[str] = set()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.page.evaluate(has_finished, index):
            seen.update(read())  # never waits for a redraw
            self.page.wait_for_timeout(period_ms)  # a sampling period, not a wait for a state
        return seen

    def output_panel(self, index: int, *, wait: bool = True) -> Locator:
        """The panel (``.tln-panel``) that cell ``index`` displayed (``wait=False``: the
        locator now, for a panel that may not be there yet)."""
        panel = (
            self.page.locator(".jp-Notebook .jp-Cell")
            .nth(index)
            .locator(".jp-OutputArea-output .tln-panel")
            .first
        )
        if wait:
            panel.wait_for(timeout=CELL_TIMEOUT_MS)
        return panel

    def set_theme(self, theme: str) -> None:
        """Switch JupyterLab's theme (``"JupyterLab Dark"`` / ``"JupyterLab Light"``)."""
        light = "false" if "Dark" in theme else "true"
        self.page.evaluate(
            "(theme) => window.jupyterapp.commands.execute('apputils:change-theme', { theme })",
            theme,
        )
        self.page.wait_for_function(
            f"() => document.body.dataset.jpThemeLight === '{light}'", timeout=30_000
        )
        # Lab shows a splash while the theme loads: wait until it is gone.
        self.page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=30_000)

    def screenshot(self, name: str, locator: Locator | None = None) -> pathlib.Path:
        """Save ``tests/artifacts/<name>.png`` (the page, or ``locator``)."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        (locator or self.page).screenshot(path=str(path))
        return path
