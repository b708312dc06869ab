"""Reports of the NaN forensics: where a non-finite value first appeared, forward or backward.

One vocabulary serves every NaN tool: :class:`FirstBadThing` names the first bad value (phase,
kind, op, module, file:line and the code text, whether its inputs were proven finite), and
:class:`ValueStats` holds the value statistics computed in Python (never in a panel). The
forward scans (``find_nan``, ``bisect_nan``, ``nonfinite_origin``) share
:class:`NonfiniteScanReport`; ``bisect_nan_backward`` returns :class:`BackwardNanReport`.
Lineage lives in ``report/lineage.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ._base import PAYLOAD_EXCLUDED, Report, Where, frozen_mapping
from ._status import FINITENESS_TONES, tones

if TYPE_CHECKING:
    from ._lineage import LineageNode

NonfiniteKind = Literal["nan", "inf", "-inf", "mixed"]
"""``nan``, ``inf``, ``-inf``: only that kind of non-finite value; ``mixed``: more than one."""
Phase = Literal["forward", "backward"]
Coverage = Literal["full", "partial", "none"]
"""``full``: every floating-point value in scope was checked; ``none``: nothing could be."""
ScanStatus = Literal["found", "clean", "partial", "unchecked"]
"""``found``: a non-finite value was seen; ``clean``: every value in scope was checked finite;
``partial``: finite where checked, some values were not; ``unchecked``: nothing could be checked."""
SCAN_TONES = tones(
    {"found": "critical", "clean": "ok", "partial": "warning", "unchecked": "warning"}
)
Transition = Literal["clean", "birth", "propagated", "healed", "root_seed", "unchecked"]
"""How one grad_fn fire changed finiteness, from its incoming to its outgoing gradients."""


@dataclass(frozen=True)
class ValueStats:
    """Counts and finite-value statistics of one tensor (several outputs: all of them)."""

    numel: int
    """Number of elements examined."""
    nan_count: int
    """Elements that are NaN."""
    posinf_count: int
    """Elements that are +inf."""
    neginf_count: int
    """Elements that are -inf."""
    finite_min: float | None
    """Smallest finite element (None when no element is finite)."""
    finite_max: float | None
    """Largest finite element (None when no element is finite)."""
    finite_mean: float | None
    """Mean over the finite elements only."""

    @property
    def is_finite(self) -> bool:
        return self.nan_count == 0 and self.posinf_count == 0 and self.neginf_count == 0

    @property
    def kind(self) -> NonfiniteKind | None:
        """The non-finite kind present, ``mixed`` for several, None when all finite."""
        present = [
            name
            for name, count in (
                ("nan", self.nan_count),
                ("inf", self.posinf_count),
                ("-inf", self.neginf_count),
            )
            if count
        ]
        if not present:
            return None
        return present[0] if len(present) == 1 else "mixed"  # type: ignore[return-value]

    def text(self) -> str:
        """``nan=2 +inf=0 -inf=0 of 4; finite min/mean/max -1 / 0.5 / 2``."""
        head = (
            f"nan={self.nan_count} +inf={self.posinf_count} -inf={self.neginf_count} "
            f"of {self.numel}"
        )
        if self.finite_min is None:
            return head + "; no finite element"
        return (
            f"{head}; finite min/mean/max {self.finite_min:.4g} / {self.finite_mean:.4g} / "
            f"{self.finite_max:.4g}"
        )


@dataclass(frozen=True)
class FirstBadThing:
    """The first non-finite value a NaN tool found, in the vocabulary shared by every phase."""

    phase: Phase
    """``forward``: an op output; ``backward``: a gradient a grad_fn fire sent on."""
    kind: NonfiniteKind
    """``nan``, ``inf``, ``-inf`` or ``mixed`` (several kinds in one value)."""
    op: str | None
    """Trace label of the forward op (for backward: the op the grad_fn differentiates)."""
    func: str | None
    """The torch function the op called (e.g. ``log``)."""
    module: str | None
    """Innermost module address (``""`` is the root module)."""
    file: str | None
    """Path of the file holding the op's own source line."""
    line: int | None
    """Line number of that source line in ``file``."""
    code: str | None
    """Text of the op's own source line."""
    is_proven: bool
    """True when every input of it was checked finite, so it is where the value was born."""
    node: str | None = None
    """grad_fn class name of the backward fire, e.g. ``SqrtBackward0`` (backward only)."""
    fire_order: int | None = None
    """Position of that fire in measured fire order (backward only)."""
    stats: ValueStats | None = None
    """Statistics of the bad value (the forward output, or the outgoing gradient)."""
    batch_rows: tuple[int, ...] = ()
    """For a model input (``func == "input"``): the first indices along dim 0, the batch, whose
    row holds a non-finite element (at most 16, ascending)."""
    num_batch_rows: int | None = None
    """How many rows along dim 0 hold a non-finite element, of a model input whose value was
    read; None for any other op, a 0-d input or an input whose value was not kept."""
    batch_size: int | None = None
    """The model input's size along dim 0 (with ``num_batch_rows``)."""

    def where(self) -> Where:
        return Where(op=self.op, module=self.module, file=self.file, line=self.line, code=self.code)

    def rows_text(self) -> str:
        """``" in batch rows 3, 5 (2 of 8)"``: where a model input's bad values sit, or ``""``."""
        if not self.num_batch_rows:
            return ""
        shown = ", ".join(map(str, self.batch_rows))
        more = ", ..." if self.num_batch_rows > len(self.batch_rows) else ""
        word = "row" if self.num_batch_rows == 1 else "rows"
        return f" in batch {word} {shown}{more} ({self.num_batch_rows} of {self.batch_size})"

    def text(self) -> str:
        """``nan at div_1 in enc.head (model.py:12: `return a / b`)``."""
        subject = f"{self.node} (fire {self.fire_order}) for {self.op}" if self.node else self.op
        place = f" in {self.module}" if self.module else ""
        source = f" ({_file_name(self.file)}:{self.line}: `{self.code}`)" if self.file else ""
        return f"{self.kind} at {subject}{place}{source}"


def _file_name(path: str | None) -> str:
    return (path or "?").replace("\\", "/").rsplit("/", 1)[-1]


@dataclass(frozen=True, kw_only=True, repr=False)
class ScanFields:
    """What a live or saved forward scan established: shared by every forward NaN report and by
    :class:`~torchlens_nb.report.InvestigationReport` (the ``nonfinite`` panel reads them)."""

    found: bool
    """A non-finite value that matters was seen."""
    kind: NonfiniteKind | None
    """Kind of the first non-finite value (``nan``, ``inf``, ``-inf``, ``mixed``); None when none
    was found."""
    first_bad_thing: FirstBadThing | None
    """The first non-finite value the scan found, with its op, module and source line (None when
    clean)."""
    mode: Literal["live", "saved"]
    """``live``: values checked while the forward ran; ``saved``: a trace's saved payloads."""
    num_ops: int
    """Ops in scope (for a live run that stopped: the ops run before the stop)."""
    num_checked: int
    """Floating-point op outputs whose values were checked."""
    num_unchecked: int
    """Floating-point op outputs that could not be checked (not saved)."""
    num_exact: int
    """Integer and bool outputs: finite by dtype, no check needed."""
    coverage: Coverage
    """``full``, ``partial`` or ``none``: how much of the forward's floating-point values could be
    checked."""
    uncertainty_zone: tuple[str, ...] = ()
    """Unchecked ops any of which, instead of ``first_bad_thing.op``, may be the origin."""
    lineage_nodes: tuple[LineageNode, ...] = ()
    """The first ring both ways around the bad op (the panel's lineage view starts here)."""
    lineage_role: str | None = None
    """What the bad op is in that view: ``origin`` when proven, else ``first non-finite seen``."""
    intentional_infinities: tuple[str, ...] = ()
    """Ops where an infinity is born that never reaches the output, the loss or a NaN (a -inf
    causal mask before softmax, a -inf sentinel an integer cast removes): by design, disclosed,
    never the origin."""
    num_intentional: int = 0
    """Op outputs holding such an infinity (their births included)."""

    @property
    def op(self) -> str | None:
        """Label of the first non-finite op output (None when clean)."""
        return self.first_bad_thing.op if self.first_bad_thing else None

    @property
    def is_certain(self) -> bool:
        """True when the result holds for every op: full coverage, or a proven origin."""
        if self.found:
            return bool(self.first_bad_thing and self.first_bad_thing.is_proven)
        return self.coverage == "full"


@dataclass(frozen=True, kw_only=True, repr=False)
class OriginFields:
    """What the origin of a forward NaN poisoned, and the hints that go with it."""

    num_nonfinite: int = 0
    """Checked op outputs holding a non-finite value that matters (the intentional infinities
    are counted in ``num_intentional``)."""
    num_propagated: int = 0
    """Non-finite outputs carrying the origin's value (downstream of it: per birth)."""
    num_unattributed: int = 0
    """Non-finite outputs whose inputs were not checked (born there or carried through)."""
    other_births: tuple[str, ...] = ()
    """Other ops that also turned finite inputs into a non-finite output that matters."""
    nonfinite_params: tuple[str, ...] = ()
    """Every parameter/buffer read by a non-finite op that holds a non-finite value, the origin's
    first (live form only: a trace holds no parameter values)."""
    reaches_output: bool | None = None
    """The origin's value reaches a model output (None when the forward recorded none)."""
    amp_hint: str = ""
    """The AMP paragraph, only where it applies (an Inf born in a float16/bfloat16 op; for a
    backward result, an Inf gradient in half precision with no loss scale disclosed)."""
    anomaly_recipe: str = ""
    """The ``torch.autograd.set_detect_anomaly`` recipe for what this tool cannot see."""


@dataclass(frozen=True, kw_only=True, repr=False)  # keep Report's short repr
class NonfiniteScanReport(Report, ScanFields):
    """Fields every forward NaN scan reports: what it found and how much it checked."""

    report_type = "nonfinite_scan"
    row_tones = FINITENESS_TONES
    status_tones = SCAN_TONES
    payload_properties = ("op", "is_certain")
    status: ScanStatus
    """The verdict: ``found``, ``clean``, ``partial`` or ``unchecked`` (see ``ScanStatus``)."""


@dataclass(frozen=True, kw_only=True, repr=False)
class FindNanReport(NonfiniteScanReport):
    """``tl.debug.find_nan`` (live) and ``trace.find_nan()`` (saved payloads)."""

    report_type = "find_nan"
    is_stopped_early: bool = False
    """A live run stopped right after the first NaN (later ops never ran); an Inf never stops it."""


@dataclass(frozen=True, kw_only=True, repr=False)
class BisectNanReport(NonfiniteScanReport):
    """``tl.debug.bisect_nan``: the first saved op with a NaN or Inf output."""

    report_type = "bisect_nan"


@dataclass(frozen=True, kw_only=True, repr=False)
class NonfiniteReport(NonfiniteScanReport, OriginFields):
    """``tl.debug.nonfinite_origin``: the op where the non-finite value that matters was born."""

    report_type = "nonfinite"

    @property
    def origin(self) -> FirstBadThing | None:
        """The origin op (alias of ``first_bad_thing``)."""
        return self.first_bad_thing


@dataclass(frozen=True)
class TransitionRow:
    """One grad_fn fire of a backward pass and how it changed finiteness."""

    order: int
    """Position of the fire in the measured fire order of the backward pass (from 1)."""
    node: str
    """grad_fn class name of the fire, e.g. ``SqrtBackward0``."""
    transition: Transition
    """How the fire changed finiteness: ``clean``, ``birth``, ``propagated``, ``healed``,
    ``root_seed`` or ``unchecked``."""
    ops: tuple[str, ...]
    """Forward ops the node differentiates (empty for internal nodes such as AccumulateGrad)."""
    incoming: Literal["finite", "nonfinite", "unknown", "none"]
    """Finiteness of the gradients flowing in (``none``: no incoming tensor)."""
    outgoing: Literal["finite", "nonfinite", "unknown", "none"]
    """Finiteness of the gradients it sent on (``none``: no outgoing tensor)."""
    kind: NonfiniteKind | None
    """Kind of the outgoing non-finite values, when there are any."""


TRANSITION_COLUMNS = ("order", "node", "transition", "ops", "incoming", "outgoing", "kind")


@dataclass(frozen=True, kw_only=True, repr=False)
class BackwardNanReport(Report):
    """``tl.debug.bisect_nan_backward``: the fire ledger of one backward pass."""

    report_type = "backward_nan"
    status_tones = SCAN_TONES
    payload_properties = ("birth_order",)
    status: ScanStatus
    """The verdict on the backward pass, in the vocabulary of the forward scans."""
    bwd: int
    """Index of the backward pass in ``trace.backward_passes``."""
    found: bool
    """True when a non-finite gradient was found."""
    kind: NonfiniteKind | None
    """Kind of the first bad gradient (None when clean)."""
    first_bad_thing: FirstBadThing | None
    """The earliest provable birth (or a non-finite root seed), joined to its forward op."""
    transitions: tuple[TransitionRow, ...] = dataclasses.field(metadata=PAYLOAD_EXCLUDED)
    """The fire ledger (it reaches the panel once, as the ``transitions`` table)."""
    counts: Mapping[str, int] = dataclasses.field(default_factory=frozen_mapping)
    """Transition -> number of fires (every transition present, zeros included)."""
    coverage: Coverage = "full"
    """``full``, ``partial`` or ``none``: how much of the backward's gradients could be read."""
    grad_scale: float | None = None
    """The loss scale the caller disclosed (``scaler.get_scale()``), if any."""
    amp_hint: str = ""
    """The AMP/GradScaler paragraph, only where it applies (an Inf-kind first bad gradient in
    float16/bfloat16 with no ``grad_scale`` disclosed)."""
    neutralised_births: tuple[int, ...] = ()
    """Fire orders of births of Inf gradients that never reached a parameter gradient or a NaN
    (healed on the way, e.g. by a clamp's mask): disclosed, not found."""

    @property
    def birth_order(self) -> int | None:
        """Fire order of the birth (None when clean)."""
        return self.first_bad_thing.fire_order if self.first_bad_thing else None


__all__ = [
    "TRANSITION_COLUMNS",
    "BackwardNanReport",
    "BisectNanReport",
    "Coverage",
    "FindNanReport",
    "FirstBadThing",
    "NonfiniteKind",
    "NonfiniteReport",
    "NonfiniteScanReport",
    "OriginFields",
    "Phase",
    "ScanFields",
    "ScanStatus",
    "Transition",
    "TransitionRow",
    "ValueStats",
]
