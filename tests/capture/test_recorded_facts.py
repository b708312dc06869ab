"""The capture records the same facts as the committed golden files (tests/capture/golden/).

The golden files were written by the capture before its per-op path was made cheap (issue 22);
any change to an op's label, func, module, stack, line, parents, parameter names, argument or
output metadata, flags, saved flag or grad_fn name fails here and names the op. How to
regenerate: ``tests/capture/recorded_facts.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import transformers

from tests.capture.golden_models import GOLDEN_MODELS
from tests.capture.recorded_facts import SAVE_FACTS, capture_facts, read_golden


def _assert_same(recorded: dict[str, Any], golden: dict[str, Any], skip: tuple[str, ...]) -> None:
    assert [op["label"] for op in recorded["ops"]] == [op["label"] for op in golden["ops"]]
    for ours, theirs in zip(recorded["ops"], golden["ops"]):
        for key in skip:
            ours.pop(key), theirs.pop(key)
        assert ours == theirs, f"facts of {theirs['label']} changed"
    for key in ("module_calls", "input_layers", "output_layers"):
        assert recorded[key] == golden[key], key


def _golden_for(name: str) -> dict[str, Any]:
    golden = read_golden(name)
    recorded_with = golden["versions"]["transformers"]
    if name.startswith("hf_") and recorded_with != transformers.__version__:
        pytest.skip(
            f"golden facts of {name} were recorded with transformers {recorded_with}, installed "
            f"is {transformers.__version__}; regenerate (tests/capture/recorded_facts.py)"
        )
    return golden


@pytest.mark.parametrize("name", list(GOLDEN_MODELS))
def test_save_all_capture_records_the_golden_facts(name: str) -> None:
    golden = _golden_for(name)
    _assert_same(capture_facts(name, save=True), golden, skip=())


@pytest.mark.parametrize("name", list(GOLDEN_MODELS))
def test_metadata_only_capture_records_the_same_facts(name: str) -> None:
    golden = _golden_for(name)
    recorded = capture_facts(name, save=False)
    assert not any(op["has_saved"] or op["grad_fn_name"] for op in recorded["ops"])
    _assert_same(recorded, golden, skip=SAVE_FACTS)


def test_golden_chain_has_801_ops() -> None:
    ops = read_golden("tanh_chain_801")["ops"]
    # 1 input + 200 blocks x (linear, tanh, mul, add)
    assert len(ops) == 801
    assert [op["func"] for op in ops[1:5]] == ["linear", "tanh", "mul", "add"]
