"""The installed-wheel tier: the package as users get it, not the checkout.

``make wheel-smoke`` (run by ``make test``) builds the sdist and the wheel from a copy of the
checkout with no bundles in it (``python -m build``: the wheel is built from the sdist), installs
the wheel into a fresh virtualenv, and runs these tests with two variables set:
``TORCHLENS_NB_DIST`` (the folder holding both artefacts) and ``TORCHLENS_NB_INSTALLED_PYTHON``
(that venv's interpreter). Without them the tier is skipped with that reason.

The installed interpreter runs with ``-I`` (no checkout, no PYTHONPATH on its path), so every
fact asserted here comes from the installed package.
"""

from __future__ import annotations

import http.server
import json
import os
import pathlib
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.fixtures import HARNESS, _Handler

PROBE = pathlib.Path(__file__).resolve().parent / "installed_probe.py"


def _env_path(name: str) -> pathlib.Path:
    value = os.environ.get(name)
    if not value:
        pytest.skip(f"{name} is not set: run `make wheel-smoke` (part of `make test`)")
    return pathlib.Path(value)


@pytest.fixture(scope="session")
def dist_dir() -> pathlib.Path:
    """The folder with the built sdist and wheel."""
    return _env_path("TORCHLENS_NB_DIST")


@pytest.fixture(scope="session")
def installed_python() -> pathlib.Path:
    """The interpreter of the fresh venv the wheel was installed into."""
    return _env_path("TORCHLENS_NB_INSTALLED_PYTHON")


@pytest.fixture(scope="session")
def probe(installed_python: pathlib.Path) -> dict[str, Any]:
    """What installed_probe.py found and wrote, run isolated in an empty folder."""
    out = pathlib.Path(tempfile.mkdtemp(prefix="tln_installed_"))
    subprocess.run(
        [str(installed_python), "-I", str(PROBE), str(out)],
        cwd=out,
        check=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    return {
        "out": out,
        "facts": json.loads((out / "facts.json").read_text()),
        "panels": json.loads((out / "payloads.json").read_text()),
    }


@pytest.fixture(scope="session")
def installed_static(probe: dict[str, Any]) -> pathlib.Path:
    """The bundle folder inside the installed package."""
    return pathlib.Path(probe["facts"]["module_file"]).parent / "widgets" / "static"


@pytest.fixture(scope="session")
def installed_base_url(installed_static: pathlib.Path) -> Iterator[str]:
    """The fast tier's harness, serving the INSTALLED bundles at /static/."""
    handler = type(
        "InstalledHandler",
        (_Handler,),
        {"mounts": {"/harness/": HARNESS, "/static/": installed_static}},
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
