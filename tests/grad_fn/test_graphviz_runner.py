"""sketch_grad_fn and the bounded graphviz runner: a wedged dot cannot hang the caller."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
import torch

import torchlens_nb as tl
from torchlens_nb.errors import DiagnosticArgumentError, GraphvizRunError, TorchlensNbWarning

HAS_DOT = shutil.which("dot") is not None


@pytest.fixture
def loss(mlp) -> torch.Tensor:
    return mlp(torch.randn(2, 8)).sum()


def _fake_program(folder: Path, name: str, body: str) -> Path:
    """Write an executable shell script ``folder/name`` and return its folder."""
    folder.mkdir(exist_ok=True)
    script = folder / name
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder


def _is_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1].startswith("Z")  # a zombie is dead
    except FileNotFoundError:
        return True


@pytest.mark.skipif(os.name != "posix", reason="process groups and /proc are POSIX")
def test_a_hanging_dot_is_killed_at_the_limit_with_no_partial_file(
    tmp_path: Path, loss, monkeypatch
) -> None:
    # The fake dot writes half a file, then waits on a child that sleeps a minute: killing only
    # the shell would leave the child holding the pipes, so the whole group must go.
    bin_dir = _fake_program(
        tmp_path / "bin",
        "dot",
        f"""
out=""; while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done
printf 'partial' > "$out"
sleep 60 &
echo "$$ $!" > {tmp_path}/pids
wait
""",
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "graph.png").write_bytes(b"old render")

    with pytest.raises(
        GraphvizRunError, match="did not finish within timeout_s=1 and was killed"
    ) as caught:
        tl.debug.sketch_grad_fn(loss, tmp_path / "graph", timeout_s=1)

    # the fake dot waits on a 60 s sleep: "timeout" means the kit killed it instead of waiting
    assert caught.value.reason == "timeout"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "graph.png", "pids"]
    assert (tmp_path / "graph.png").read_bytes() == b"old render"  # untouched
    shell_pid, sleep_pid = map(int, (tmp_path / "pids").read_text().split())
    assert _is_gone(shell_pid) and _is_gone(sleep_pid)


def test_missing_dot_says_how_to_install_it(tmp_path: Path, loss, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no dot anywhere

    with pytest.raises(
        GraphvizRunError, match="'dot' is not on PATH.*apt-get install graphviz"
    ) as caught:
        tl.debug.sketch_grad_fn(loss, tmp_path / "graph")

    assert caught.value.reason == "missing"
    assert list(tmp_path.iterdir()) == []


def test_without_a_path_nothing_runs_and_the_dot_source_comes_back(
    tmp_path: Path, loss, monkeypatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # would fail if dot were needed

    source = tl.debug.sketch_grad_fn(loss)

    assert source.startswith("digraph grad_fn {") and source.rstrip().endswith("}")


@pytest.mark.skipif(os.name != "posix", reason="shell script stands in for dot")
def test_a_failing_dot_reports_its_stderr(tmp_path: Path, loss, monkeypatch) -> None:
    bin_dir = _fake_program(tmp_path / "bin", "dot", "echo 'Error: syntax error' >&2\nexit 3\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    with pytest.raises(GraphvizRunError, match="exited with status 3: Error: syntax error") as c:
        tl.debug.sketch_grad_fn(loss, tmp_path / "graph")

    assert (c.value.reason, c.value.stderr.strip()) == ("failed", "Error: syntax error")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]


@pytest.mark.skipif(not HAS_DOT, reason="graphviz dot is not installed")
@pytest.mark.parametrize("file_format, magic", [("png", b"\x89PNG"), ("svg", b"<?xml")])
def test_real_dot_publishes_path_dot_format(
    tmp_path: Path, loss, file_format: str, magic: bytes
) -> None:
    source = tl.debug.sketch_grad_fn(loss, tmp_path / "net", file_format=file_format)

    assert [p.name for p in tmp_path.iterdir()] == [f"net.{file_format}"]  # no temp file left
    assert (tmp_path / f"net.{file_format}").read_bytes().startswith(magic)
    assert "STRUCTURE-ONLY" in source


def test_bad_format_and_timeout_are_refused_before_running(tmp_path: Path, loss) -> None:
    with pytest.raises(DiagnosticArgumentError, match="file_format must be a graphviz output"):
        tl.debug.sketch_grad_fn(loss, tmp_path / "g", file_format="png; rm -rf /")
    with pytest.raises(DiagnosticArgumentError, match="timeout_s must be > 0 seconds, got 0"):
        tl.debug.sketch_grad_fn(loss, tmp_path / "g", timeout_s=0)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not HAS_DOT or os.name != "posix", reason="needs dot and a POSIX opener")
def test_view_hands_the_render_to_the_opener_through_the_runner(
    tmp_path: Path, loss, monkeypatch
) -> None:
    bin_dir = _fake_program(tmp_path / "bin", "xdg-open", f'echo "$1" > {tmp_path}/opened\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr("sys.platform", "linux")

    tl.debug.sketch_grad_fn(loss, tmp_path / "net", file_format="svg", view=True)

    assert (tmp_path / "opened").read_text().strip() == str(tmp_path / "net.svg")


@pytest.mark.skipif(not HAS_DOT or os.name != "posix", reason="needs dot and a POSIX opener")
def test_view_without_an_opener_warns_with_the_path(tmp_path: Path, loss, monkeypatch) -> None:
    dot_dir = Path(shutil.which("dot")).parent
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    _fake_program(tmp_path / "bin", "dot", f'exec {dot_dir}/dot "$@"\n')
    monkeypatch.setattr("sys.platform", "linux")

    with pytest.warns(TorchlensNbWarning, match=r"no viewer found.*net\.svg"):
        tl.debug.sketch_grad_fn(loss, tmp_path / "net", file_format="svg", view=True)
    assert (tmp_path / "net.svg").exists()
