"""torchlens_nb: a Jupyter-native investigation kit for PyTorch.

``import torchlens_nb as tl`` gives the spelling of the specification: ``tl.trace``,
``tl.func``, ``tl.module``, ``tl.options.CaptureOptions``, ``tl.debug.*``, ``tl.report.*``.
Importing installs no hook and changes no global state.
"""

from . import bridge, debug, errors, options, recipes, report
from ._version import __version__
from .capture import PartialTrace, Trace, func, module, trace
from .debug import dead, threshold

__all__ = [
    "PartialTrace",
    "Trace",
    "__version__",
    "bridge",
    "dead",
    "debug",
    "errors",
    "func",
    "module",
    "options",
    "recipes",
    "report",
    "threshold",
    "trace",
]
