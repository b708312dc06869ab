"""``tl.debug.sketch_grad_fn``: the DOT picture of a walked autograd graph, rendered safely."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..._validate import check_bool
from ...errors import DiagnosticArgumentError
from ._graphviz_runner import DOT_TIMEOUT_S, check_render_args, open_viewer, render_dot
from ._walk import MAX_NODES_DEFAULT, walk_grad_fn

if TYPE_CHECKING:
    import torch
    from torch import nn


def sketch_grad_fn(
    outputs: Any,
    path: str | os.PathLike[str] | None = None,
    *,
    file_format: str = "png",
    params: Mapping[str, torch.Tensor] | None = None,
    model: nn.Module | None = None,
    max_nodes: int = MAX_NODES_DEFAULT,
    view: bool = False,
    clusters: bool = True,
    timeout_s: float = DOT_TIMEOUT_S,
) -> str:
    """Return the DOT source of the autograd graph above ``outputs``; optionally render it.

    The graph is :func:`walk_grad_fn`'s sketch: forward-direction edges, leaves named from
    ``params`` / ``model``, module groups as nested clusters (``clusters=False`` drops them), the
    STRUCTURE-ONLY legend as the graph label, and a TRUNCATED note when ``max_nodes`` was hit.

    Args:
        outputs, params, model, max_nodes: as for :func:`walk_grad_fn`.
        path: graphviz convention: ``path.<file_format>`` is written (``"net"`` -> ``net.png``);
            None renders nothing (unless ``view``, which then renders into a temp directory).
        file_format: any ``dot -T`` format: ``png``, ``svg``, ``pdf``...
        view: open the render with the desktop viewer through the bounded runner (best
            effort: warns instead of raising when there is no viewer).
        timeout_s: wall-clock limit for ``dot``; at the limit its process group is killed.

    Returns:
        The DOT source (also when nothing was rendered).

    Raises:
        GradFnWalkError, DiagnosticArgumentError, ModelTypeError: as for :func:`walk_grad_fn`;
            DiagnosticArgumentError also for a bad ``file_format``, ``timeout_s``, ``view``,
            ``clusters`` or ``path`` (not a path, or a directory), checked before anything
            runs, also when ``path`` is None.
        GraphvizRunError: ``dot`` missing, killed at ``timeout_s``, or failed; no partial file
            is left and an existing ``path.<file_format>`` is untouched.

    Example::

        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        >>> source = tl.debug.sketch_grad_fn(net(torch.randn(2, 8)).sum(), "net", model=net)
        >>> source.splitlines()[0], os.path.exists("net.png")
        ('digraph grad_fn {', True)
    """
    check_render_args(file_format, timeout_s)  # also when nothing is rendered: fail early
    check_bool("view", view)
    check_bool("clusters", clusters)
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise DiagnosticArgumentError(
            f"path must be a file path (str or os.PathLike) or None, got {type(path).__name__}."
        )
    if path is not None and os.path.isdir(path):
        raise DiagnosticArgumentError(
            f"path {os.fspath(path)!r} is a directory; pass a file stem inside it, e.g. "
            f"{os.path.join(os.fspath(path), 'grad_fn')!r} (writes grad_fn.{file_format})."
        )
    sketch = walk_grad_fn(outputs, params=params, model=model, max_nodes=max_nodes)
    source = sketch.to_dot(clusters=clusters)
    if path is None and view:
        path = os.path.join(tempfile.mkdtemp(prefix="torchlens_nb_grad_fn_"), "grad_fn")
    if path is not None:
        written = render_dot(source, path, file_format, timeout_s=timeout_s)
        if view:
            open_viewer(written)
    return source
