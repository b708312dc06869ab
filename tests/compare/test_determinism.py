"""check_determinism: three-state verdict, witnesses, first divergence, RNG ops, factory remedy."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests import models


def test_same_seed_runs_of_a_plain_model_are_repeatable_under_test() -> None:
    torch.manual_seed(0)
    report = tl.debug.check_determinism(nn.Linear(4, 2), torch.randn(3, 4))
    assert (report.verdict, report.status, report.seed_verdict) == (
        "repeatable_under_test",
        "repeatable_under_test",
        "not_run",
    )
    assert (report.first_divergence, report.divergent_runs, report.total_runs) == (None, (), 2)
    assert report.lead == "all 2 same-seed runs agree (bitwise)"


class CallCounter(nn.Module):
    """Scales by how often ANY instance ran: state deep copies share, so runs differ."""

    calls = 0

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CallCounter.calls += 1
        return torch.relu(self.fc(x)) * CallCounter.calls


def test_nondeterminism_is_observed_at_the_first_op_in_execution_order() -> None:
    torch.manual_seed(0)
    report = tl.debug.check_determinism(CallCounter(), torch.randn(2, 4), runs=3)
    assert report.verdict == "nondeterminism_observed"
    assert (report.first_divergence, report.divergent_runs) == ("mul_1", (1, 2))
    finding = report.findings[0]
    assert (finding.code, finding.where.op) == ("nondeterminism_first_divergence", "mul_1")
    table = report.to_pandas()
    assert table["status"].tolist() == ["match", "match", "match", "value_diverged"]
    assert (table.attrs["run"], table.attrs["reference_run"]) == (1, 0)


def test_a_model_deepcopy_refuses_is_inconclusive_with_a_model_factory_remedy() -> None:
    report = tl.debug.check_determinism(models.Locked(), torch.ones(1, 2))
    assert (report.verdict, report.total_runs) == ("inconclusive", 0)
    assert report.findings[0].code == "model_not_copyable"
    assert "model_factory" in report.findings[0].remedy
    with_factory = tl.debug.check_determinism(None, torch.ones(1, 2), model_factory=models.Locked)
    assert with_factory.verdict == "repeatable_under_test"


def test_a_forward_that_raises_is_inconclusive() -> None:
    report = tl.debug.check_determinism(nn.Linear(3, 2), torch.ones(1, 2))
    assert (report.verdict, report.findings[0].code) == ("inconclusive", "forward_raised")


class Counted(nn.Module):
    """Dropout model that counts its forwards."""

    forwards = 0

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        Counted.forwards += 1
        return self.drop(self.fc(x))


@pytest.mark.parametrize(
    "training, seed_verdict",
    [(True, "seed_sensitive"), (False, "seed_insensitive")],
    ids=["train", "eval"],
)
def test_seed_sensitivity_adds_exactly_one_run_in_a_second_slot(
    training: bool, seed_verdict: str
) -> None:
    model = Counted().train(training)
    before = Counted.forwards
    report = tl.debug.check_determinism(model, torch.ones(2, 4), runs=2, seed_sensitivity=True)
    assert Counted.forwards - before == 3  # runs + 1
    assert (report.verdict, report.seed_verdict, report.total_runs) == (
        "repeatable_under_test",
        seed_verdict,
        3,
    )
    assert report.disclosures[2] == "seed_sensitivity ran one extra run (total runs: 3)"


def test_rng_consuming_ops_are_attributed_to_the_consuming_op() -> None:
    class Noisy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.drop = nn.Dropout(0.1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.drop(x + torch.randn_like(x))

    report = tl.debug.check_determinism(Noisy(), torch.ones(3))
    assert [(r.op, r.func, r.module) for r in report.rng_ops] == [
        ("randn_like_1", "randn_like", ""),
        ("dropout_1", "dropout", "drop"),
    ]
    assert report.rng_ops[0].source_line.endswith(
        f"test_determinism.py:{Noisy.forward.__code__.co_firstlineno + 1}"
    )


def test_environment_witnesses_are_recorded() -> None:
    report = tl.debug.check_determinism(nn.Linear(2, 2), torch.ones(1, 2))
    env = report.environment
    assert env["deterministic_algorithms"] == torch.are_deterministic_algorithms_enabled()
    assert env["num_threads"] == torch.get_num_threads()
    assert env["cudnn_benchmark"] == torch.backends.cudnn.benchmark
    assert "CUBLAS_WORKSPACE_CONFIG" in env and env["devices"] == ("cpu",)


def test_tolerances_loosen_the_bitwise_default() -> None:
    class Jitter(nn.Module):
        calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            Jitter.calls += 1
            return x + 1e-9 * Jitter.calls

    assert (
        tl.debug.check_determinism(Jitter(), torch.ones(2, dtype=torch.float64)).verdict
        == "nondeterminism_observed"
    )
    loose = tl.debug.check_determinism(Jitter(), torch.ones(2, dtype=torch.float64), atol=1e-6)
    assert (loose.verdict, loose.rtol, loose.atol) == ("repeatable_under_test", None, 1e-6)


def test_caller_model_inputs_and_rng_untouched_with_dict_inputs(tiny_gpt2) -> None:
    ids = torch.randint(0, 64, (1, 6))
    state = {k: v.clone() for k, v in tiny_gpt2.state_dict().items()}
    rng = torch.get_rng_state()
    report = tl.debug.check_determinism(tiny_gpt2, {"input_ids": ids})
    assert report.verdict == "repeatable_under_test"
    assert all(torch.equal(state[k], v) for k, v in tiny_gpt2.state_dict().items())
    assert torch.equal(rng, torch.get_rng_state())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"runs": 1}, r"runs must be an int in \[2, 100000\]"),
        ({"atol": -1.0}, "atol must be None"),
        ({"seed": 1.5}, "seed must be an int"),
    ],
    ids=["one_run", "negative_atol", "float_seed"],
)
def test_bad_arguments_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(tl.errors.DiagnosticArgumentError, match=message):
        tl.debug.check_determinism(nn.ReLU(), torch.ones(1), **kwargs)
