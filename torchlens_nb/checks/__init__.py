"""The training checks kit: ``ChecksSession`` and ``param_health`` (capture-free).

Public names are re-exported by ``tl.debug``; this package never imports the capture core.
"""

from .scans._param_health import param_health, param_health_rows
from .session._replay import Replay, RngState
from .session._session import ChecksSession

__all__ = ["ChecksSession", "Replay", "RngState", "param_health", "param_health_rows"]
