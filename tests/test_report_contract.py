"""The payload contract every report type keeps: a closed status vocabulary with a tone decided
in Python, and a payload derived from the dataclass fields (no hand-written ``_data``)."""

from __future__ import annotations

import inspect
import sys
import typing

import pytest

import torchlens_nb  # noqa: F401  (imports every report type)
from torchlens_nb.report import Report
from torchlens_nb.report._status import TONES


def _report_types() -> list[type[Report]]:
    found: list[type[Report]] = []
    pending = [Report]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            pending.append(sub)
            if sub.__module__.startswith("torchlens_nb.") and not sub.__name__.startswith("_"):
                found.append(sub)  # private bases (_SideBySideReport) are never instantiated
    return sorted(found, key=lambda c: c.__qualname__)


REPORT_TYPES = _report_types()


def _status_literal(cls: type[Report]) -> tuple[str, ...]:
    """The values of the ``Literal`` the class (or the nearest base) declares ``status`` as."""
    for klass in cls.__mro__:
        annotation = inspect.get_annotations(klass).get("status")
        if annotation is not None:
            hint = eval(annotation, vars(sys.modules[klass.__module__]))
            assert typing.get_origin(hint) is typing.Literal, f"{klass.__name__}.status: {hint}"
            return typing.get_args(hint)
    raise AssertionError(f"{cls.__name__} declares no status")


def test_the_package_has_report_types() -> None:
    assert len(REPORT_TYPES) >= 40


@pytest.mark.parametrize("cls", REPORT_TYPES, ids=lambda c: c.__name__)
def test_statuses_are_a_literal_and_each_has_a_tone(cls: type[Report]) -> None:
    statuses = _status_literal(cls)
    assert set(statuses) == set(cls.status_tones), cls.__name__
    assert set(cls.status_tones.values()) <= {*TONES, "findings"}


ROW_VOCABULARIES = {
    "GradHealthReport": "torchlens_nb.report._gradients.Verdict",
    "CompareReport": "torchlens_nb.report._compare.RowStatus",
    "BisectPrecisionReport": "torchlens_nb.report._compare.RowStatus",
    "DeterminismReport": "torchlens_nb.report._compare.RowStatus",
    "CheckReport": "torchlens_nb.report._checks.CheckState",
    **{
        name: "torchlens_nb.report._lineage.Finiteness"  # the lineage nodes they draw
        for name in (
            "LineageReport",
            "NonfiniteScanReport",
            "FindNanReport",
            "BisectNanReport",
            "NonfiniteReport",
            "InvestigationReport",
        )
    },
}
"""The report types whose panel colours rows by a word, and the ``Literal`` of that word."""


@pytest.mark.parametrize("cls", REPORT_TYPES, ids=lambda c: c.__name__)
def test_row_words_have_their_tones_decided_in_python(cls: type[Report]) -> None:
    vocabulary = ROW_VOCABULARIES.get(cls.__name__)
    if vocabulary is None:
        assert cls.row_tones == {}, f"{cls.__name__}: add its row vocabulary to this test"
        return
    module, name = vocabulary.rsplit(".", 1)
    words = typing.get_args(getattr(sys.modules[module], name))
    assert set(cls.row_tones) == set(words) and set(cls.row_tones.values()) <= set(TONES)


@pytest.mark.parametrize("cls", REPORT_TYPES, ids=lambda c: c.__name__)
def test_the_payload_is_derived_not_hand_written(cls: type[Report]) -> None:
    assert "_data" not in cls.__dict__
    for name in cls.payload_properties:
        assert isinstance(getattr(cls, name), property), f"{cls.__name__}.{name}"


def test_report_types_are_unique() -> None:
    types = [c.report_type for c in REPORT_TYPES]
    assert len(types) == len(set(types))


def test_an_undeclared_status_is_refused() -> None:
    from torchlens_nb.errors import ReportOptionError
    from torchlens_nb.report import LineageReport

    with pytest.raises(ReportOptionError, match="has no status 'fine'"):
        LineageReport(
            subject="x",
            status="fine",
            lead="x",
            root="a",
            direction="both",
            max_depth=1,
            nodes=(),
            message="",
        )


def test_tone_follows_the_findings_where_the_status_says_so() -> None:
    from torchlens_nb.report import Finding, GradHealthReport

    def report(*severities: str) -> GradHealthReport:
        return GradHealthReport(
            subject="m",
            status="found",
            lead="x",
            bwd=0,
            basis="total_norm",
            vanishing_threshold=1e-7,
            exploding_threshold=1e4,
            grad_scale=None,
            scale_provenance="unscaled",
            stage="pre_clip_unscaled",
            findings=tuple(Finding("c", s, "m") for s in severities),  # type: ignore[arg-type]
        )

    assert report("warning", "info").tone == "warning"  # only warnings: not red
    assert report("critical", "warning").tone == "critical"
    assert report().to_dict()["tone"] == "ok"
