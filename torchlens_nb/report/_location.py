"""Source locations as a person reads them: ``Cell In[3], line 9`` for a notebook cell.

IPython compiles each cell into a file such as ``/tmp/ipykernel_22649/3437746447.py`` and names
it ``Cell In[3]`` in its own tracebacks (``CachingCompiler.format_code_name``). Reports keep the
real file (``Where.file``, table columns); the card and the panels show the cell's name wherever
a location is shown: :func:`location_text` for the card, :func:`cell_names` for the payload's
``locations`` member that the panels read. Outside IPython a file reads as its last two path
segments and the line (``models/mlp.py:12``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable


def _namer() -> Callable[[str], tuple[str, str] | None] | None:
    """The running IPython shell's ``compile.format_code_name``, or None outside IPython.

    Never imports IPython: a process that has not imported it has no cells.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(getattr(shell, "compile", None), "format_code_name", None)


def cell_name(file: str) -> str | None:
    """IPython's name of ``file`` (``"Cell In[3]"``), or None when it is not a notebook cell."""
    namer = _namer()
    named = namer(file) if namer is not None else None
    return None if named is None else f"{named[0]} {named[1]}"


def cell_names(files: Iterable[str]) -> dict[str, str]:
    """``file -> "Cell In[n]"`` for the notebook cells among ``files`` (other files omitted)."""
    namer = _namer()
    if namer is None:
        return {}  # outside IPython: ``files`` is not even read
    names = {}
    for file in set(files):
        named = namer(file)
        if named is not None:
            names[file] = f"{named[0]} {named[1]}"
    return dict(sorted(names.items()))


def location_text(file: str, line: int | None) -> str:
    """``Cell In[3], line 9`` for a notebook cell, else ``dir/file.py:9``."""
    name = cell_name(file)
    if name is not None:
        return name if line is None else f"{name}, line {line}"
    return f"{short_path(file)}:{'?' if line is None else line}"


def source_line_text(source_line: str) -> str:
    """A ``file:line`` string (as table columns hold it) in the form of :func:`location_text`."""
    file, _, line = source_line.rpartition(":")
    return location_text(file, int(line)) if file and line.isdigit() else short_path(source_line)


def short_path(path: str) -> str:
    """The last two segments of ``path`` (``/a/b/c/mlp.py`` -> ``c/mlp.py``)."""
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:]) if len(parts) > 2 else path
