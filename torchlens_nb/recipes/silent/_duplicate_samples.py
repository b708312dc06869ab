"""``duplicate_samples``: rows repeated across a loader's workers and batches.

The first ``batches`` batches are read (the global RNG restored afterwards) and every row of
the input tensor (the first tensor of each batch, rows along dim 0) is hashed (blake2b of its
bytes). A batch whose rows all equal an earlier batch's, in order, is the signature of
DataLoader workers that share one random state (a ``numpy.random.RandomState`` or
``random.Random`` made in the dataset's ``__init__`` is copied into every worker, which then
yields the same "random" samples): ``duplicate_batches`` (critical). Repeated rows alone are
``duplicate_rows`` (warning). Cost: one pass over the first batches, one hash per row. Cannot
see: identical augmentations of different base samples (the rows differ), and duplicates
beyond the first batches; a sampler that draws with replacement repeats rows legitimately.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from ..._validate import check_int
from ...capture import iter_tensors
from ...errors import DiagnosticArgumentError
from ...report import Finding, Table, Unavailable
from ...report._recipes_data import recipe_status, worst_finding
from ...report._recipes_silent import DuplicateSamplesReport
from .._batches import read_batches


def duplicate_samples(loader: Any, *, batches: int = 8) -> DuplicateSamplesReport:
    """Hash the rows of ``loader``'s first ``batches`` batches; report repeats.

    Args:
        loader: a DataLoader or any iterable of batches (the first tensor of a batch is read).
        batches: batches to read (>= 2); with ``num_workers=W``, at least ``W`` sees one batch
            from every worker.

    Returns:
        ``fail`` with ``duplicate_batches`` when a batch repeats an earlier one row for row,
        ``warn`` with ``duplicate_rows`` when only rows repeat, else ``pass``.
    """
    check_int("batches", batches, low=2, expect=">= 2", hint="e.g. batches=8")
    read = read_batches(loader, batches, what="loader")
    if not read:
        raise DiagnosticArgumentError(
            "loader yielded no batch: duplicate_samples hashes the rows of its first batches; "
            "pass a loader (or a list of batches) that yields at least two."
        )
    first_seen: dict[bytes, tuple[int, int]] = {}
    batch_keys: dict[tuple[bytes, ...], int] = {}
    repeats: list[tuple[int, int, int, int]] = []
    repeated_batches: list[tuple[int, int]] = []
    rows = 0
    for number, batch in enumerate(read):
        tensor = next(iter(iter_tensors(batch)), None)
        if tensor is None or tensor.dim() == 0:
            raise DiagnosticArgumentError(
                f"batch {number} holds no tensor with rows; duplicate_samples hashes the rows "
                "(dim 0) of each batch's first tensor."
            )
        keys = tuple(_row_hash(row) for row in tensor.detach().cpu())
        rows += len(keys)
        for position, key in enumerate(keys):
            earlier = first_seen.setdefault(key, (number, position))
            if earlier != (number, position):
                repeats.append((number, position, *earlier))
        earlier_batch = batch_keys.setdefault(keys, number)
        if earlier_batch != number:
            repeated_batches.append((number, earlier_batch))
    findings = _findings(repeats, repeated_batches, rows, len(read))
    # one batch cannot show a batch repeated across workers: never a pass over that
    unseen = (
        (
            Unavailable(
                "duplicate_batches",
                f"the loader yielded 1 batch of the {batches} asked for; batches repeated "
                "across DataLoader workers need at least 2",
                code="one_batch",
            ),
        )
        if len(read) < 2
        else ()
    )
    status = recipe_status(findings)
    if unseen and status == "pass":
        status = "inconclusive"
    return DuplicateSamplesReport(
        subject=f"{type(loader).__name__}, first {len(read)} batches ({rows} rows)",
        status=status,
        lead=worst_finding(findings).message
        if findings
        else f"no row of the first {len(read)} batches ({rows} rows) repeats"
        + ("; with one batch, repeated batches cannot be seen." if unseen else "."),
        unavailable=unseen,
        findings=tuple(findings),
        tables=(
            Table(
                "repeated_rows",
                ("batch", "row", "same_as_batch", "same_as_row"),
                tuple(repeats[:100]),
                attrs={"shown": min(100, len(repeats)), "total": len(repeats)},
            ),
        ),
        disclosures=(
            f"Read the first {len(read)} batches; rows hashed along dim 0 of each batch's "
            "first tensor. Duplicates later in the epoch are not seen.",
        ),
        batches=len(read),
        rows=rows,
        duplicate_rows=len(repeats),
        duplicate_batches=len(repeated_batches),
    )


def _row_hash(row: torch.Tensor) -> bytes:
    return hashlib.blake2b(row.contiguous().numpy().tobytes(), digest_size=16).digest()


def _findings(
    repeats: list[tuple[int, int, int, int]],
    repeated_batches: list[tuple[int, int]],
    rows: int,
    batches: int,
) -> list[Finding]:
    remedy = (
        "Seed each worker's own random state in worker_init_fn (or draw from torch's RNG, "
        "which DataLoader seeds per worker): e.g. worker_init_fn=lambda w: "
        "dataset.rng.seed(torch.initial_seed() % 2**32)."
    )
    if repeated_batches:
        later, earlier = repeated_batches[0]
        return [
            Finding(
                "duplicate_batches",
                "critical",
                f"{len(repeated_batches)} of {batches} batches repeat an earlier batch row for "
                f"row (batch {later} == batch {earlier}): the loader's workers yield the same "
                "samples, so the model sees each sample once per worker.",
                remedy=remedy,
                fields={"repeated_batches": [list(p) for p in repeated_batches[:20]]},
            )
        ]
    if repeats:
        batch, row, first_batch, first_row = repeats[0]
        return [
            Finding(
                "duplicate_rows",
                "warning",
                f"{len(repeats)} of {rows} rows repeat an earlier row (first: batch {batch} row "
                f"{row} == batch {first_batch} row {first_row}).",
                remedy="Check the dataset for repeated samples and each worker's random state; "
                + remedy,
                fields={"duplicate_rows": len(repeats), "rows": rows},
            )
        ]
    return []
