"""What both trainer callbacks share (``torchlens_nb/integrations/_attachment.py``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import torchlens_nb as tl
from torchlens_nb.integrations._attachment import import_framework, micro_batches_of_step


def test_importing_the_package_imports_no_framework() -> None:
    code = (
        "import sys, torchlens_nb, torchlens_nb.integrations; "
        "print(sorted(m for m in ('transformers', 'lightning', 'accelerate') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_a_missing_framework_names_the_extra_to_install() -> None:
    with pytest.raises(tl.errors.MissingExtraError, match=r'"torchlens_nb\[lightning\]"') as caught:
        import_framework("no_such_framework.pytorch", extra="lightning")
    assert isinstance(caught.value, ImportError)  # `except ImportError` keeps working


@pytest.mark.parametrize(
    ("first_batch", "batches_per_epoch", "accumulation", "expected"),
    [
        (0, 16, 4, 4),  # a full step
        (8, 10, 4, 2),  # 10 batches at K=4: the epoch's last step has 2
        (9, 10, 1, 1),
        (0, 3, 4, 3),  # an epoch shorter than K: one step of 3
        (0, None, 4, 4),  # an iterable dataset without a length
    ],
    ids=["full", "last-of-uneven-epoch", "k1", "short-epoch", "no-length"],
)
def test_micro_batches_of_a_step(first_batch, batches_per_epoch, accumulation, expected) -> None:
    assert micro_batches_of_step(first_batch, batches_per_epoch, accumulation) == expected
