"""The zoo's marker and its models, built once per session (each test gets a fresh copy of the
inputs; tests that change a weight work on a deep copy)."""

from __future__ import annotations

import pytest

from tests.zoo.archs import Arch, archs


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "zoo: 2-layer Hugging Face architectures end to end (runs in make test)"
    )


@pytest.fixture(scope="session")
def zoo() -> dict[str, Arch]:
    return {arch.name: arch for arch in archs()}
