"""The package version, with one home: ``pyproject.toml``, read back from the installed metadata.

The panel bundles record the same version in their manifest (``js/build.mjs``), so
``tl.report.doctor()`` can tell bundles built for another version from the right ones.
"""

from __future__ import annotations

import importlib.metadata

try:
    __version__ = importlib.metadata.version("torchlens_nb")
except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
