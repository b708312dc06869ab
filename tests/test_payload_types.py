"""The JS side's description of every payload (js/shared/payload_types.d.ts) is generated from
the Python report dataclasses, committed, and checked: a renamed Python field fails here, and
tsc (strict, as ``make lint`` runs it) rejects a panel that reads a field Python does not send."""

from __future__ import annotations

import pathlib
import subprocess
from dataclasses import dataclass

import pytest

from torchlens_nb.report import Report
from torchlens_nb.widgets import _payload_types

ROOT = pathlib.Path(__file__).resolve().parents[1]
TSC = ROOT / "js" / "node_modules" / ".bin" / "tsc"


def test_the_committed_declarations_are_the_generated_ones() -> None:
    committed = _payload_types.DECLARATIONS.read_text(encoding="utf-8")
    assert committed == _payload_types.generate(), (
        "js/shared/payload_types.d.ts is stale: run "
        "`python -m torchlens_nb.widgets._payload_types --write` and commit it."
    )


def test_every_report_type_has_a_payload_type() -> None:
    text = _payload_types.generate()
    for cls in _payload_types.report_types():
        assert f'  "{cls.report_type}": {cls.__name__}Payload;' in text
    # the lineage payload: its status Literal and each field, Optional as `| null`
    assert (
        'export type LineageReportPayload = Envelope<"lineage", "found" | "partial" | "clean", '
        "LineageReportData>;" in text
    )
    assert "  max_depth: number | null;\n  nodes: LineageNode[];\n" in text


@dataclass(frozen=True, kw_only=True)
class Before(Report):
    report_type = "probe"
    message: str = ""
    depth: int | None = None


@dataclass(frozen=True, kw_only=True)
class After(Report):  # the same report with one field renamed
    report_type = "probe"
    sentence: str = ""
    depth: int | None = None


def test_a_renamed_field_changes_the_declarations() -> None:
    before = _payload_types.declare_report(_payload_types._Writer(), Before)
    after = _payload_types.declare_report(_payload_types._Writer(), After)
    assert before.startswith("export interface BeforeData {\n  message: string;\n")
    assert after.startswith("export interface AfterData {\n  sentence: string;\n")
    assert "  depth: number | null;\n" in before and "  depth: number | null;\n" in after


def test_an_unsupported_field_type_is_refused() -> None:
    with pytest.raises(TypeError, match="no TypeScript spelling for <class 'complex'>"):
        _payload_types._Writer().ts(complex)


def test_the_plain_report_reads_its_statuses_from_status_tones() -> None:
    text = _payload_types.generate()
    statuses = " | ".join(f'"{s}"' for s in sorted(Report.status_tones))
    assert f'export type ReportPayload = Envelope<"report", {statuses}, ReportData>;' in text


@pytest.mark.skipif(not TSC.exists(), reason="js/node_modules missing (make bundle)")
def test_tsc_rejects_a_panel_reading_a_field_python_does_not_send(tmp_path) -> None:
    types = (ROOT / "js" / "shared" / "payload_types.js").as_posix()
    good = tmp_path / "good.js"
    bad = tmp_path / "bad.js"
    for path, field in ((good, "nodes"), (bad, "nodez")):
        path.write_text(
            f'/** @param {{import("{types}").LineageReportPayload}} payload */\n'
            f"export const read = (payload) => payload.data.{field}.length;\n"
        )
    result = subprocess.run(
        [
            str(TSC),
            "--noEmit",
            "--allowJs",
            "--checkJs",
            "--strict",
            "--target",
            "es2022",
            "--module",
            "es2022",
            "--moduleResolution",
            "bundler",
            str(good),
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    errors = [line for line in result.stdout.splitlines() if "error TS" in line]
    assert len(errors) == 1, result.stdout
    assert "bad.js(2," in errors[0] and "Property 'nodez' does not exist" in errors[0]
