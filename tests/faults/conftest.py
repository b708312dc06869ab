"""The fault suite: fixtures, the ``fault`` marker and the end-of-run counter.

Every test module marks its category (``pytestmark = pytest.mark.fault("bad_input")``); at the
end of a run the terminal summary prints the cases tried per category (a parametrized case is
one case; a hypothesis property adds the examples it tried), so the breadth is visible:

    fault suite: 485 cases tried (484 passed), plus 60 generated examples
      bad_input       329 cases (329 passed)
      ...
"""

from __future__ import annotations

import pathlib
from collections import Counter

import pytest

from tests.browser.fixtures import missing_browser_reasons
from tests.faults import _tally
from tests.faults.fault_models import Owned, owned

CATEGORIES = (
    "bad_input",
    "no_corruption",
    "no_leak",
    "payload",
    "size",
    "wedged_tool",
    "dtype",
    "no_false_clean",
    "concurrency",
)
"""The fault categories, in the order the summary prints them. ``no_false_clean``: a verdict
about something the tool did not observe (an opaque module, a parameter outside the roster,
data it could not read) is never clean; ``concurrency``: threads and nested captures."""

HERE = pathlib.Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"fault(category): the fault-suite category of a test, one of {CATEGORIES}"
    )


def _category(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("fault")
    return marker.args[0] if marker else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reasons = missing_browser_reasons()
    for item in items:
        if HERE not in pathlib.Path(str(item.fspath)).parents:
            continue
        category = _category(item)
        assert category in CATEGORIES, f"{item.nodeid} has no fault(category) marker"
        if reasons and item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.skip(reason="; ".join(reasons)))


_outcomes: dict[str, Counter[str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    category = _tally.categories.get(report.nodeid)
    if category is None:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        outcome = "xfailed" if hasattr(report, "wasxfail") and report.skipped else report.outcome
        _outcomes.setdefault(category, Counter())[outcome] += 1


def pytest_itemcollected(item: pytest.Item) -> None:
    if HERE in pathlib.Path(str(item.fspath)).parents:
        category = _category(item)
        if category is not None:
            _tally.categories[item.nodeid] = category


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not _outcomes:
        return
    cases = {c: sum(_outcomes.get(c, Counter()).values()) for c in CATEGORIES}
    examples = {c: _tally.examples.get(c, 0) for c in CATEGORIES}
    passed = sum(_outcomes.get(c, Counter())["passed"] for c in CATEGORIES)
    write = terminalreporter.write_line
    terminalreporter.section("fault suite")
    write(
        f"fault suite: {sum(cases.values())} cases tried ({passed} passed), plus "
        f"{sum(examples.values())} generated examples"
    )
    for category in CATEGORIES:
        counts = _outcomes.get(category, Counter())
        extra = f" + {examples[category]} generated examples" if examples[category] else ""
        detail = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        write(f"  {category:<14} {cases[category]:>4} cases ({detail or 'none run'}){extra}")


@pytest.fixture
def user() -> Owned:
    """A train-mode model after one optimizer step, its batch and targets (see fault_models)."""
    return owned()


@pytest.fixture
def fake_bin(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A temp folder that is the whole PATH, for fake executables (a wedged or missing ``dot``).

    A ``dot`` installed on the machine is then not found; fake scripts call what they need by
    absolute path.
    """
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    return folder
