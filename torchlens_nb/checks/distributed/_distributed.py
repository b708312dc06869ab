"""The checks kit under ``torch.distributed``: rank detection, the S-B agreement, the gather.

Where the evidence lives under DistributedDataParallel (measured, gloo, torch 2.13,
``tests/distributed/test_ddp_checks.py::test_sites_read_local_gradients``): S-A (the
post-accumulate-grad hook) fires inside ``AccumulateGrad`` BEFORE DDP's reducer hook on the same
parameter copies the gradient into its bucket, and the S-D callback is queued at the first S-A
arrival, so it runs BEFORE the reducer's ``finalize_backward`` copies the averaged bucket back.
Every S-A / S-D number is therefore this rank's LOCAL, pre-all-reduce gradient (with the default
``gradient_as_bucket_view=False``; with ``True`` the gradient IS the bucket, already divided by
the world size when S-D reads it and possibly being all-reduced on gloo's thread: disclosed).
A NaN born on
one rank is found on that rank only, not on every rank after the all-reduce averaged it in.

That is also why one collective per optimizer step is needed: the rank that holds a clean local
gradient would otherwise write the smeared NaN average. At S-B every rank fills its own row of a
``world_size x ROW_WIDTH`` int64 tensor (its raise flag and its :data:`LIVE_COUNTERS`) and ONE
``all_reduce`` (SUM) of it gives every rank every rank's row (``8 x ROW_WIDTH x world_size``
bytes: 112 at 2 ranks; the replica fingerprint of ``_replicas.py`` adds ``16 x P`` bytes per
rank for P optimizer parameters). Every rank raises when any rank's flag is set, before any rank's
optimizer writes: replicas stay bitwise identical and clean; and the rows feed the live
dashboard's per-rank table. No other collective runs per step; none per parameter. The gather
(``report(gather=True)``) is one ``gather_object`` at report time.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch

from ...errors import DiagnosticArgumentError
from ...report import Exit, Finding, Table, Unavailable, Where
from ...report._checks import CheckReport, CheckRun
from ..session._assemble import session_lead
from ._dtensor import is_fsdp2_module

SUMMED_COUNTERS = (
    "attempts",
    "accepted",
    "skipped",
    "raised",
    "failed",
    "skipped_by_scaler",
    "skipped_by_loop",
    "skipped_by_unknown",
    "pending_backwards",
    "backwards",
    "grad_arrivals",
    "step_pre_fires",
    "step_post_fires",
)
"""Counters added across ranks (rank-attempts, rank-backwards); the rest stay per rank."""

RANK_COLUMNS = (
    "rank",
    "status",
    "attempts",
    "accepted",
    "skipped",
    "raised",
    "backwards",
    "accumulation_factor",
    "findings",
    "agreements",
    "agreement_ms_per_step",
)

LIVE_COUNTERS = ("attempts", "accepted", "skipped", "raised", "backwards", "pending_backwards")
"""Each rank's counters shared at every S-B agreement (as they stand at S-B: the attempt being
judged is not closed yet, so ``attempts`` counts the ones before it)."""

ROW_WIDTH = 1 + len(LIVE_COUNTERS)
"""int64 values per rank in the agreement tensor: the raise flag, then :data:`LIVE_COUNTERS`."""

LIVE_RANK_COLUMNS = ("rank", "at_step", "raising", *LIVE_COUNTERS)
"""Columns of the live dashboard's ``ranks`` rows (``at_step``: the agreement they come from,
1-based; ``raising``: 1 when that rank's check raised at that S-B)."""

_STATUS_ORDER = ("clean", "incomplete", "found", "raised")
_STATE_ORDER = ("clean", "collecting", "unavailable", "warned", "raised")


@dataclass
class RankContext:
    """This process's place in the process group and the session's collective bookkeeping."""

    rank: int = 0
    world_size: int = 1
    group: Any = None
    is_active: bool = False
    """True when the session runs the S-B agreement (a DDP or FSDP2 model in an initialized
    group, or a loop seen all-reducing its gradients itself: :meth:`replicated`)."""
    watches_grad_reduce: bool = False
    """A multi-rank group, no DDP or FSDP2, ``distributed`` not False: the session watches for
    the loop's own ``all_reduce`` of a gradient (``_grad_reduce.py``)."""
    bucket_view: bool = False
    """The DDP module was built with ``gradient_as_bucket_view=True``."""
    wrapper: Literal["ddp", "fsdp2", "all_reduce"] | None = None
    """How the model is distributed: DDP replicas, FSDP2 shards (``_sharded.py``), or replicas
    whose gradients the loop all-reduces itself (seen at its first such call)."""
    agreements: int = 0
    agree_ns: int = 0
    remote_findings: dict[tuple[int, ...], Finding] = dataclasses.field(default_factory=dict)
    """This rank's ``check_raised_on_other_rank`` finding per set of raising ranks (repeats
    collapse into one with ``fields["count"]``)."""
    read_counters: Callable[[], Mapping[str, Any]] = dict
    """This rank's counters now (the session wires the engine's); read once per agreement."""
    live_rows: list[dict[str, int]] = dataclasses.field(default_factory=list)
    payload: Callable[[], torch.Tensor | None] | None = None
    """A float64 vector this rank adds to its agreement row (the replica fingerprint,
    ``_replicas.py``; every rank the same length at the same agreement), or None."""
    on_payloads: Callable[[list[list[float]]], Finding | None] | None = None
    """Reads every rank's payload after the agreement; returns a finding to raise."""
    """Every rank's :data:`LIVE_RANK_COLUMNS` row from the last agreement (empty before it)."""

    @classmethod
    def detect(cls, model: torch.nn.Module, distributed: bool | None) -> RankContext:
        """``distributed=None``: active for a ``DistributedDataParallel`` or FSDP2
        (``fully_shard``) model in an initialized group of more than one rank, and for any
        other model once the loop is seen all-reducing a gradient (:meth:`replicated`);
        ``True`` forces it (every rank must then run the session),
        ``False`` keeps the session rank-local (no collective; a NaN on another rank is not
        seen before this rank writes)."""
        dist = torch.distributed
        is_ready = dist.is_available() and dist.is_initialized()
        if distributed and not is_ready:
            raise DiagnosticArgumentError(
                "distributed=True needs an initialized process group: call "
                "torch.distributed.init_process_group(...) before creating the session."
            )
        if not is_ready:
            return cls()
        is_ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
        is_fsdp2 = is_fsdp2_module(model)
        context = cls(
            rank=dist.get_rank(),
            world_size=dist.get_world_size(),
            group=getattr(model, "process_group", None)
            if is_ddp
            else _shard_group(model)
            if is_fsdp2
            else None,
            bucket_view=is_ddp and bool(getattr(model, "gradient_as_bucket_view", False)),
            wrapper="ddp" if is_ddp else "fsdp2" if is_fsdp2 else None,
        )
        context.is_active = (
            distributed
            if distributed is not None
            else (is_ddp or is_fsdp2) and context.world_size > 1
        )
        context.watches_grad_reduce = (
            distributed is not False and context.wrapper is None and context.world_size > 1
        )
        return context

    def replicated(self, group: Any) -> bool:
        """The loop all-reduced a parameter's gradient over ``group`` (None: the default
        group) itself: the model is replicated there, as under DDP. The session goes active on
        that group from this step's S-B on (every rank of it calls the same ``all_reduce`` in
        the same step, so every rank goes active at the same agreement; every rank must run
        the session, as under DDP). Returns whether the replicas can be compared: not in a
        group of one, nor on another group than the one ``distributed=True`` already agrees
        on."""
        dist = torch.distributed
        if group is dist.group.WORLD:
            group = None
        size = dist.get_world_size(group)
        if size < 2 or (self.is_active and group is not self.group):
            return False
        self.group, self.rank, self.world_size = group, dist.get_rank(group), size
        self.wrapper, self.is_active = "all_reduce", True
        return True

    def agree(self, violation: Finding | None) -> Finding | None:
        """S-B: one ``all_reduce`` of one :data:`ROW_WIDTH` int64 row per rank (its raise flag
        and counters; every rank ends with every row, kept in :attr:`live_rows`); every rank
        returns a finding when any rank has one (its own, with ``rank`` added, or
        ``check_raised_on_other_rank``).

        The flag is 2 when this rank's own gradient ARRIVED non-finite (S-A evidence: the value
        was born here) and 1 when only its step-site gradient is (after the all-reduce or a clip
        spread another rank's value into it): a rank with flag 1 defers to the rank(s) with
        flag 2 and reports ``check_raised_on_other_rank``.
        """
        if not self.is_active:
            return violation  # rank-local until the loop's own gradient all_reduce is seen
        dist = torch.distributed
        device = "cuda" if dist.get_backend(self.group) == "nccl" else "cpu"
        local = self.read_counters()
        flag = 0
        if violation is not None:
            flag = 2 if violation.fields.get("culprit_site", "S-A") == "S-A" else 1
        extra = self.payload() if self.payload is not None else None
        width = ROW_WIDTH + (0 if extra is None else extra.numel())
        rows = torch.zeros(self.world_size, width, dtype=torch.int64, device=device)
        rows[self.rank, :ROW_WIDTH] = torch.tensor(
            [flag, *(int(local.get(k) or 0) for k in LIVE_COUNTERS)]
        )
        if extra is not None:  # float64 bits ride in int64: a SUM with zeros keeps them exact
            rows[self.rank, ROW_WIDTH:] = extra.to(device, torch.float64).view(torch.int64)
        start = time.perf_counter_ns()
        dist.all_reduce(rows, group=self.group)
        host = rows.cpu()
        table = host[:, :ROW_WIDTH].tolist()
        replica = None
        if extra is not None and self.on_payloads is not None:
            payloads = host[:, ROW_WIDTH:].contiguous().view(torch.float64).tolist()
            replica = self.on_payloads(payloads)
        self.agree_ns += time.perf_counter_ns() - start
        self.agreements += 1
        self.live_rows = [
            dict(zip(LIVE_RANK_COLUMNS, (rank, self.agreements, int(row[0] > 0), *row[1:])))
            for rank, row in enumerate(table)
        ]
        raised_on = [rank for rank, row in enumerate(table) if row[0]]
        born_on = [rank for rank, row in enumerate(table) if row[0] == 2]
        if violation is not None and (flag == 2 or not born_on):
            return dataclasses.replace(
                violation,
                fields={**violation.fields, "rank": self.rank, "raised_on_ranks": raised_on},
            )
        if not raised_on:
            return replica
        return self._remote(tuple(born_on or raised_on))

    def _remote(self, ranks: tuple[int, ...]) -> Finding:
        """This rank's ``check_raised_on_other_rank`` for ``ranks`` (repeats counted)."""
        previous = self.remote_findings.get(ranks)
        count = 1 if previous is None else previous.fields["count"] + 1
        finding = Finding(
            "check_raised_on_other_rank",
            "critical",
            f"rank {self.rank} stopped optimizer.step() before it wrote because rank(s) "
            f"{list(ranks)} raised; this rank's own pre-all-reduce gradients passed every check"
            + (f" ({count} such steps)." if count > 1 else "."),
            remedy="Read the gathered report (session.report(gather=True) on every rank): the "
            "finding of the raising rank names the parameter and the rank where the "
            "value was born.",
            fields={
                "code": "check_raised_on_other_rank",
                "rank": self.rank,
                "raised_on_ranks": list(ranks),
                "count": count,
            },
        )
        self.remote_findings[ranks] = finding
        return finding

    def annotate(self, report: CheckReport) -> CheckReport:
        """This rank's report with ``rank`` / ``world_size`` / agreement counters and the
        rank-local disclosures."""
        if not self.is_active:
            return report
        evidence = (
            "gradient evidence (S-A / S-D) is this rank's local gradient of each whole "
            "parameter before FSDP2's reduce-scatter; the step site (S-B) and update ratios "
            "(S-C) read this rank's shard of the averaged gradient and weights."
            if self.wrapper == "fsdp2"
            else "gradient evidence (S-A / S-D) is this rank's local gradient before DDP's "
            "all-reduce; update ratios (S-C) are of the averaged update every rank applied."
            if self.wrapper == "ddp"
            else "gradient evidence (S-A / S-D) is this rank's gradient as its backward left "
            "it (before any all_reduce the loop runs itself); update ratios (S-C) are of the "
            "update this rank applied."
        )
        notes = [
            f"Rank {self.rank} of {self.world_size}: {evidence}",
            f"{self.agreements} S-B agreement all_reduce(s) of "
            f"{8 * ROW_WIDTH * self.world_size} bytes (every rank's flag and counters), "
            f"{self.agree_ns / 1e6:.3f} ms in total.",
        ]
        if self.bucket_view:
            notes.append(
                "gradient_as_bucket_view=True: S-D norms read the bucket view, which "
                f"DDP has already divided by the world size ({self.world_size}) and may "
                "be all-reducing asynchronously; build DDP with the default "
                "gradient_as_bucket_view=False for exact per-rank evidence."
            )
        remote = tuple(self.remote_findings.values())
        findings = report.findings + remote
        return dataclasses.replace(
            report,
            findings=findings,
            # the lead counts the raises this rank stopped for (no "no findings" above them)
            lead=session_lead(report.counters, len(findings), is_registered=True)
            if remote
            else report.lead,
            status="raised" if remote else report.status,
            disclosures=report.disclosures + tuple(notes),
            counters={**report.counters, **self.counters()},
        )

    def counters(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "agreements": self.agreements,
            "agreement_ms": self.agree_ns / 1e6,
        }

    def gather(self, report: CheckReport) -> CheckReport:
        """Every rank calls it (one ``gather_object``); rank 0 returns the merged report, the
        other ranks their own."""
        portable = _portable(report)
        received: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        torch.distributed.gather_object(portable, received, dst=0, group=self.group)
        if received is None:
            return report
        return merge_reports(received)


def _shard_group(model: torch.nn.Module) -> Any:
    """The process group FSDP2 shards ``model`` over (its parameters' 1-D device mesh); None,
    the default group, for a 2-D (HSDP) mesh, whose ranks all run the agreement too."""
    for param in model.parameters():
        mesh = getattr(param, "device_mesh", None)
        if mesh is not None:
            return mesh.get_group() if mesh.ndim == 1 else None
    return None


def _plain(value: Any) -> Any:
    """Mappings and tuples as dicts and lists (picklable: the report freezes with proxies)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _portable(report: CheckReport) -> dict[str, Any]:
    return {
        "subject": report.subject,
        "status": report.status,
        "findings": [
            (
                f.code,
                f.severity,
                f.message,
                None if f.where is None else dataclasses.asdict(f.where),
                f.remedy,
                _plain(f.fields),
            )
            for f in report.findings
        ],
        "tables": [
            (t.name, list(t.columns), _plain(t.rows), _plain(t.attrs)) for t in report.tables
        ],
        "disclosures": list(report.disclosures),
        "unavailable": [dataclasses.asdict(u) for u in report.unavailable],
        "exits": [(e.label, e.code) for e in report.exits],
        "checks_run": [_plain(run.as_dict()) for run in report.checks_run],
        "counters": _plain(report.counters),
        "ledgers": _plain(report.ledgers),
        "is_final": report.is_final,
        "exit_reason": report.exit_reason,
    }


def merge_reports(parts: list[dict[str, Any]]) -> CheckReport:
    """One ``CheckReport`` from every rank's portable report (index = rank).

    Findings carry ``fields["rank"]`` and a ``[rank r]`` prefix; :data:`SUMMED_COUNTERS` are
    added (rank-attempts); every rank's counters stay in ``counters["per_rank"]`` and the
    ``ranks`` table; ``params`` and ``series`` rows gain a leading ``rank`` column.
    """
    findings = [
        Finding(
            code,
            severity,
            f"[rank {rank}] {message}",
            where=None if where is None else Where(**where),
            remedy=remedy,
            fields={**fields, "rank": rank},
        )
        for rank, part in enumerate(parts)
        for code, severity, message, where, remedy, fields in part["findings"]
    ]
    per_rank = [{"rank": rank, **part["counters"]} for rank, part in enumerate(parts)]
    counters = {key: sum(c.get(key) or 0 for c in per_rank) for key in SUMMED_COUNTERS}
    factors = {c.get("accumulation_factor") for c in per_rank}
    counters.update(
        world_size=len(parts),
        per_rank=per_rank,
        accumulation_factor=factors.pop() if len(factors) == 1 else None,
        step_provenance="explicit"
        if all(c.get("step_provenance") == "explicit" for c in per_rank)
        else "inferred",
        agreements=sum(c.get("agreements", 0) for c in per_rank),
    )
    status = max((part["status"] for part in parts), key=_STATUS_ORDER.index)
    lead = (
        f"{len(parts)} ranks, {counters['attempts']} rank-attempt(s): "
        f"{counters['accepted']} accepted, {counters['skipped']} skipped, "
        f"{counters['raised']} raised; "
        + (
            f"{len(findings)} finding(s) on rank(s) {sorted({f.fields['rank'] for f in findings})}."
            if findings
            else "no findings."
        )
    )
    scales = [part["ledgers"].get("scale", {}) for part in parts]
    skipped = [s.get("skipped") for s in scales]
    ledgers = {
        "scale": {
            **{k: v for k, v in scales[0].items() if k != "decrements"},
            "skipped": None if None in skipped else sum(skipped),
            "skipped_per_rank": skipped,
        },
        "per_rank": [part["ledgers"] for part in parts],
    }
    disclosures = [
        f"Gathered from {len(parts)} ranks: attempts, skips and the other counters "
        f"in {list(SUMMED_COUNTERS)} are summed over ranks (rank-attempts); every "
        "rank's own counters are in counters['per_rank'] and the 'ranks' table."
    ]
    for part in parts:
        disclosures += [d for d in part["disclosures"] if d not in disclosures]
    unavailable = list(
        dict.fromkeys(Unavailable(**u) for part in parts for u in part["unavailable"])
    )
    exits = [
        Exit(label, code)
        for label, code in dict.fromkeys(
            (label, code) for part in parts for label, code in part["exits"]
        )
    ]
    return CheckReport(
        subject=f"{parts[0]['subject']} on {len(parts)} ranks",
        status=status,
        lead=lead,
        findings=tuple(findings),
        tables=(_ranks_table(parts), *_rank_tables(parts)),
        disclosures=tuple(disclosures),
        unavailable=tuple(unavailable),
        exits=tuple(exits),
        checks_run=tuple(_merge_runs(parts)),
        counters=counters,
        ledgers=ledgers,
        is_final=all(part["is_final"] for part in parts),
        exit_reason=parts[0]["exit_reason"],
    )


def _ranks_table(parts: list[dict[str, Any]]) -> Table:
    rows = []
    for rank, part in enumerate(parts):
        count = part["counters"]
        steps = count.get("agreements", 0)
        rows.append(
            {
                **{k: count.get(k) for k in RANK_COLUMNS},
                "rank": rank,
                "status": part["status"],
                "findings": len(part["findings"]),
                "agreements": steps,
                "agreement_ms_per_step": count.get("agreement_ms", 0.0) / steps if steps else None,
            }
        )
    return Table.from_dicts("ranks", rows, RANK_COLUMNS, {"world_size": len(parts)})


def _rank_tables(parts: list[dict[str, Any]]) -> list[Table]:
    """Each rank-local table once, its rows from every rank behind a ``rank`` column."""
    tables = []
    for index, (name, columns, _, _) in enumerate(parts[0]["tables"]):
        rows = [(rank, *row) for rank, part in enumerate(parts) for row in part["tables"][index][2]]
        tables.append(Table(name, ("rank", *columns), tuple(rows), parts[0]["tables"][index][3]))
    return tables


def _merge_runs(parts: list[dict[str, Any]]) -> list[CheckRun]:
    runs = []
    for index, first in enumerate(parts[0]["checks_run"]):
        same = [part["checks_run"][index] for part in parts]
        runs.append(
            CheckRun(
                name=first["name"],
                site=first["site"],
                action=first["action"],
                state=max((r["state"] for r in same), key=_STATE_ORDER.index),
                evaluations=sum(r["evaluations"] for r in same),
                findings=sum(r["findings"] for r in same),
                options=first["options"],
            )
        )
    return runs
