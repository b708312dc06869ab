"""Wedged tools are bounded, with a clear error: a ``dot`` that hangs (and forks a child that
hangs too), a ``dot`` that is missing, a ``dot`` that fails; and a forward that sleeps past a time
limit wherever a public API takes one.

Fake executables live in a temp folder that is the whole PATH (``fake_bin``), so the real
graphviz on the machine is not found.
"""

from __future__ import annotations

import inspect
import shutil
import signal
import stat
import time
from pathlib import Path

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests.faults._guards import untouched
from torchlens_nb.errors import GraphvizRunError

pytestmark = pytest.mark.fault("wedged_tool")

SLEEP = shutil.which("sleep") or "/bin/sleep"
SH = shutil.which("sh") or "/bin/sh"
CAT = shutil.which("cat") or "/bin/cat"
TIMEOUT_S = 1.0
CHILD_GONE_WAIT_S = 30.0
"""How long to wait for the killed child to vanish: it would sleep 60 s if nobody killed it, so
gone within 30 s means killed, however busy the machine (no speed is asserted)."""


def fake_dot(folder: Path, body: str) -> Path:
    """Write an executable ``dot`` shell script into ``folder``."""
    script = folder / "dot"
    script.write_text(f"#!{SH}\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture
def loss() -> torch.Tensor:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    return model(torch.ones(2, 4)).sum()


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a killed orphan waits for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def dies_within(pid: int, timeout_s: float) -> bool:
    """Wait for ``pid`` to die: SIGKILL is delivered at once but the process may take a
    scheduler tick to exit (seen under a loaded 2-core machine)."""
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_hanging_dot_and_its_child_are_killed_at_the_limit(
    fake_bin: Path, tmp_path: Path, loss: torch.Tensor
) -> None:
    child_pid = tmp_path / "child.pid"
    # dot forks a sleeping child that holds the pipes, records its pid, then sleeps itself
    fake_dot(fake_bin, f"{SLEEP} 60 & echo $! > {child_pid}\n{CAT} > /dev/null\n{SLEEP} 60")
    target = tmp_path / "graph.png"
    target.write_bytes(b"old render")
    with untouched(inputs=(loss,)):
        with pytest.raises(
            GraphvizRunError,
            match=r"did not finish within timeout_s=1 and was "
            r"killed",
        ) as info:
            tl.debug.sketch_grad_fn(loss, tmp_path / "graph", timeout_s=TIMEOUT_S)
    # the fake dot sleeps 60 s: a "timeout" answer means the kit stopped waiting and killed it
    assert info.value.reason == "timeout"
    assert dies_within(
        int(child_pid.read_text()), CHILD_GONE_WAIT_S
    )  # the whole process group was killed
    assert target.read_bytes() == b"old render"  # an existing render is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "child.pid", "graph.png"]


def test_a_missing_dot_names_the_install_and_the_source_only_route(
    fake_bin: Path, tmp_path: Path, loss: torch.Tensor
) -> None:
    with untouched(inputs=(loss,)):
        with pytest.raises(
            GraphvizRunError,
            match=r"'dot' is not on PATH.*install graphviz.*"
            r"path=None",
        ) as info:
            tl.debug.sketch_grad_fn(loss, tmp_path / "graph")
    assert info.value.reason == "missing"
    assert [p.name for p in tmp_path.iterdir()] == ["bin"]
    assert isinstance(info.value, RuntimeError)


def test_without_dot_the_dot_source_still_comes_back(fake_bin: Path, loss: torch.Tensor) -> None:
    source = tl.debug.sketch_grad_fn(loss)  # path=None: nothing to render, nothing to run
    assert source.splitlines()[0] == "digraph grad_fn {"


def test_a_failing_dot_reports_its_stderr(
    fake_bin: Path, tmp_path: Path, loss: torch.Tensor
) -> None:
    fake_dot(fake_bin, f"{CAT} > /dev/null\necho 'Error: syntax error in line 3' >&2\nexit 3")
    with pytest.raises(
        GraphvizRunError,
        match=r"exited with status 3: Error: syntax error in "
        r"line 3",
    ) as info:
        tl.debug.sketch_grad_fn(loss, tmp_path / "graph")
    assert (info.value.reason, info.value.stderr.strip()) == (
        "failed",
        "Error: syntax error in line 3",
    )
    assert [p.name for p in tmp_path.iterdir()] == ["bin"]  # the partial file was removed


def test_a_dot_killed_by_a_signal_is_a_failure_not_a_hang(
    fake_bin: Path, tmp_path: Path, loss: torch.Tensor
) -> None:
    fake_dot(fake_bin, f"{CAT} > /dev/null\nkill -{int(signal.SIGSEGV)} $$")
    with pytest.raises(GraphvizRunError, match=r"exited with status -11") as info:
        tl.debug.sketch_grad_fn(loss, tmp_path / "graph")
    assert info.value.reason == "failed"


def time_limit_parameters() -> dict[str, list[str]]:
    """Every public callable's parameters that set a time limit (``timeout*`` or ``*_s``)."""
    found: dict[str, list[str]] = {}
    for space, module in (("tl", tl), ("tl.debug", tl.debug), ("tl.recipes", tl.recipes)):
        for name in module.__all__:
            obj = getattr(module, name)
            if not callable(obj):
                continue
            try:
                params = inspect.signature(obj).parameters
            except (TypeError, ValueError):
                continue
            limits = [p for p in params if p.startswith("timeout") or p.endswith("_s")]
            if limits:
                found[f"{space}.{name}"] = limits
    return found


def test_the_only_time_limit_a_public_api_takes_bounds_dot_not_the_forward() -> None:
    # A forward that sleeps past a limit can only be bounded where an API takes a limit. Today
    # the one limit is sketch_grad_fn's timeout_s, and it bounds graphviz (tested above), not a
    # forward: sketch_grad_fn never runs the model. An API that adds a forward time limit must
    # add its sleeping-forward case here.
    assert time_limit_parameters() == {"tl.debug.sketch_grad_fn": ["timeout_s"]}
