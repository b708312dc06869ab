"""The bounded graphviz runner: ``dot`` (and the file viewer) can never hang the caller.

Every external program runs through :func:`run_bounded`: its own process group (POSIX session),
a wall-clock limit, and on timeout (or Ctrl-C) the WHOLE group is killed and reaped, so a wedged
``dot`` or a shell wrapper that forked a child leaves nothing behind. Renders are published
atomically: ``dot`` writes a hidden temporary file in the target directory, which is renamed
onto ``path.<file_format>`` only after a clean exit; on any failure the temporary file is
removed and an existing target is left untouched.

Measured (tests/grad_fn/test_graphviz_runner.py): a fake ``dot`` that sleeps 60 s in a child
process is killed with its child and the call returns at the 1 s limit plus well under 1 s.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..._validate import check_number
from ...errors import DiagnosticArgumentError, GraphvizRunError, warn

DOT_TIMEOUT_S = 60.0
"""Default limit for one ``dot`` render: GPT-2 small's loss graph renders to SVG in 0.5-2 s and
a 48-layer one lays out in 3-6 s (benchmarks/bench_grad_fn.py); a minute means something is
wrong."""
VIEWER_TIMEOUT_S = 10.0
"""Limit for the opener (``xdg-open`` / ``open``) to hand the file to a viewer and return."""
_REAP_TIMEOUT_S = 5.0
_FORMAT = re.compile(r"^[a-z0-9_.]+(:[a-z0-9_]+)*$")
GRAPHVIZ_FORMATS = frozenset(
    [
        "bmp",
        "canon",
        "cmap",
        "cmapx",
        "cmapx_np",
        "dot",
        "dot_json",
        "eps",
        "exr",
        "fig",
        "gd",
        "gd2",
        "gif",
        "gv",
        "ico",
        "imap",
        "imap_np",
        "ismap",
        "jp2",
        "jpe",
        "jpeg",
        "jpg",
        "json",
        "json0",
        "kitty",
        "kittyz",
        "mp",
        "pdf",
        "pic",
        "pict",
        "plain",
        "plain-ext",
        "png",
        "pov",
        "ps",
        "ps2",
        "psd",
        "sgi",
        "svg",
        "svgz",
        "tga",
        "tif",
        "tiff",
        "tk",
        "vdx",
        "vml",
        "vmlz",
        "vrml",
        "wbmp",
        "webp",
        "xdot",
        "xdot1.2",
        "xdot1.4",
        "xdot_json",
    ]
)
"""The ``dot -T`` output formats of graphviz builds (``dot -T?`` lists them), without the ones that open
a window (``x11``, ``gtk``, ``xlib``); ``png:cairo`` style renderer suffixes are allowed."""
_STDERR_TAIL_CHARS = 2000


def run_bounded(
    argv: list[str], *, input_text: str | None, timeout_s: float, what: str
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in its own process group; kill the group at ``timeout_s``.

    Returns the completed process (any exit code). Raises ``GraphvizRunError(reason="timeout")``
    when the limit passed; the group is dead and reaped by then.
    """
    popen_kwargs: dict[str, Any] = (
        {"start_new_session": True}
        if os.name == "posix"
        else {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}  # Windows
    )
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        **popen_kwargs,
    )
    try:
        _, stderr = proc.communicate(input_text, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise GraphvizRunError(
            f"{what} did not finish within timeout_s={timeout_s:g} and was killed; the graph "
            "may be too large to lay out (pass a smaller max_nodes or a larger timeout_s), or "
            f"{argv[0]} is wedged.",
            "timeout",
        ) from None
    except BaseException:
        _kill(proc)
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, None, stderr)


def _kill(proc: subprocess.Popen[str]) -> None:
    """Kill the process group of ``proc`` and reap ``proc`` (children die with the group)."""
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass
    for stream in (proc.stdin, proc.stderr):
        if stream is not None:
            stream.close()  # a survivor holding the pipe must not block the reap below
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=_REAP_TIMEOUT_S)


def check_render_args(file_format: str, timeout_s: float) -> None:
    """Refuse a ``file_format`` that is not a graphviz format token, or a ``timeout_s`` that is
    not a positive number of seconds (``DiagnosticArgumentError``)."""
    if (
        not isinstance(file_format, str)
        or not _FORMAT.match(file_format)
        or file_format.split(":")[0] not in GRAPHVIZ_FORMATS
    ):
        raise DiagnosticArgumentError(
            f"file_format must be a graphviz output format such as 'png', 'svg' or 'pdf', got "
            f"{file_format!r}."
        )
    check_number(
        "timeout_s",
        timeout_s,
        low=0,
        low_open=True,
        finite=False,
        expect="> 0 seconds",
        hint=f"pass a number such as the default {DOT_TIMEOUT_S:g}",
    )


def render_dot(
    source: str, path: str | os.PathLike[str], file_format: str, *, timeout_s: float = DOT_TIMEOUT_S
) -> Path:
    """Render DOT ``source`` to ``path.<file_format>`` atomically; return the written path.

    Raises:
        GraphvizRunError: ``dot`` is not on PATH (``missing``), was killed at ``timeout_s``
            (``timeout``), or exited non-zero (``failed``). No partial file is left.
        DiagnosticArgumentError: ``file_format`` is not a graphviz format token, or
            ``timeout_s`` is not positive.
    """
    check_render_args(file_format, timeout_s)
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizRunError(
            "graphviz 'dot' is not on PATH, so nothing was rendered; install graphviz "
            "(apt-get install graphviz, brew install graphviz or conda install graphviz), or "
            "pass path=None to get the DOT source only.",
            "missing",
        )
    target = Path(f"{os.fspath(path)}.{file_format.split(':')[0]}")
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    os.close(handle)
    try:
        done = run_bounded(
            [exe, f"-T{file_format}", "-o", partial],
            input_text=source,
            timeout_s=timeout_s,
            what="graphviz dot",
        )
        if done.returncode != 0:
            tail = (done.stderr or "")[-_STDERR_TAIL_CHARS:]
            said = tail.strip() or "no message"
            raise GraphvizRunError(
                f"graphviz dot exited with status {done.returncode}: {said}; check the format "
                "name, or render the returned DOT source yourself.",
                "failed",
                tail,
            )
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return target


def open_viewer(path: Path, *, timeout_s: float = VIEWER_TIMEOUT_S) -> bool:
    """Hand ``path`` to the desktop's viewer through the bounded runner; True when handed over.

    Best effort: the render already succeeded, so a missing or failing opener warns
    (``TorchlensNbWarning``) with the path instead of raising.
    """
    if sys.platform == "win32":
        os.startfile(path)  # type: ignore[attr-defined]  # returns at once, no child to manage
        return True
    opener = shutil.which("open" if sys.platform == "darwin" else "xdg-open")
    if opener is None:
        warn(f"no viewer found (xdg-open is not on PATH); the render is at {path}.")
        return False
    try:
        done = run_bounded(
            [opener, str(path)], input_text=None, timeout_s=timeout_s, what="the viewer"
        )
    except GraphvizRunError as error:
        warn(f"{error} The render is at {path}.")
        return False
    if done.returncode != 0:
        warn(f"{opener} exited with status {done.returncode}; the render is at {path}.")
        return False
    return True
