"""Per-op FLOP formulas and the cross-check against torch.utils.flop_counter.FlopCounterMode."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

import torchlens_nb as tl


class Call(nn.Module):
    """Runs one function: the op under test is the model's only op."""

    def __init__(self, function) -> None:
        super().__init__()
        self.function = function

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.function(*args)


def _only_op(function, *args: torch.Tensor) -> tl.capture.Op:
    trace = tl.trace(Call(function), args)
    return [op for op in trace if not op.is_input][-1]


CASES = [
    # (id, function, input shapes, expected FLOPs) -- worked out in the comment of each line
    ("linear", lambda x, w: F.linear(x, w), [(3, 5), (7, 5)], 2 * 3 * 7 * 5),
    ("linear_3d", lambda x, w: F.linear(x, w), [(2, 3, 5), (7, 5)], 2 * 2 * 3 * 7 * 5),
    ("matmul_broadcast", torch.matmul, [(4, 2, 3), (3, 6)], 2 * 4 * 2 * 6 * 3),
    ("matmul_vector", torch.matmul, [(5,), (5,)], 2 * 5),
    ("bmm", torch.bmm, [(4, 2, 3), (4, 3, 6)], 2 * 4 * 2 * 6 * 3),
    ("addmm", torch.addmm, [(6,), (2, 3), (3, 6)], 2 * 2 * 6 * 3),
    ("baddbmm", torch.baddbmm, [(4, 2, 6), (4, 2, 3), (4, 3, 6)], 2 * 4 * 2 * 6 * 3),
    # out (1, 8, 6, 6), weight (8, 2, 3, 3) with groups=2: 2 * 288 * 2 * 9
    (
        "conv2d_groups",
        lambda x, w: F.conv2d(x, w, groups=2),
        [(1, 4, 8, 8), (8, 2, 3, 3)],
        2 * 288 * 18,
    ),
    ("conv1d", lambda x, w: F.conv1d(x, w), [(2, 3, 10), (5, 3, 4)], 2 * (2 * 5 * 7) * 12),
    # transposed: 2 * numel(in) * prod(w[1:]) = 2 * (1*4*5*5) * (3*3*3)
    (
        "conv_transpose2d",
        lambda x, w: F.conv_transpose2d(x, w),
        [(1, 4, 5, 5), (4, 3, 3, 3)],
        2 * 100 * 27,
    ),
    # q, k, v (2, 4, 8, 16): 2*B*H*L*S*E + 2*B*H*L*S*Ev = 2 * 8*8*8*16 * 2
    ("sdpa", F.scaled_dot_product_attention, [(2, 4, 8, 16)] * 3, 2 * 2 * 8 * 8 * 8 * 16),
    ("relu", torch.relu, [(3, 4)], 12),
    ("add_inplace", lambda a, b: a.add_(b), [(3, 4), (3, 4)], 12),
    ("layer_norm", lambda x: F.layer_norm(x, (4,)), [(3, 4)], 5 * 12),
    ("softmax", lambda x: x.softmax(-1), [(3, 4)], 3 * 12),
    ("sum_reduction", lambda x: x.sum(dim=1), [(3, 4)], 12),
    ("view_is_free", lambda x: x.view(12), [(3, 4)], 0),
]


@pytest.mark.parametrize(
    "function, shapes, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_formula(function, shapes, expected) -> None:
    torch.manual_seed(0)
    args = [torch.randn(shape) for shape in shapes]
    assert tl.debug.op_flops(_only_op(function, *args)).flops == expected


@pytest.mark.parametrize(
    "case",
    [
        "linear",
        "linear_3d",
        "matmul_broadcast",
        "bmm",
        "addmm",
        "baddbmm",
        "conv2d_groups",
        "conv1d",
        "conv_transpose2d",
    ],
)
def test_matmul_and_conv_formulas_equal_flop_counter_mode(case: str) -> None:
    _, function, shapes, expected = next(c for c in CASES if c[0] == case)
    args = [torch.randn(shape) for shape in shapes]
    with FlopCounterMode(display=False) as counter:
        function(*args)
    assert counter.get_total_flops() == expected


def test_an_op_without_formula_is_unknown_not_zero() -> None:
    count = tl.debug.op_flops(
        _only_op(lambda a, b: torch.einsum("ij,jk->ik", a, b), torch.ones(2, 3), torch.ones(3, 4))
    )
    assert (count.flops, count.family, count.formula) == (None, "unknown", "unknown")


class MatmulChain(nn.Module):
    """Matmul-heavy: three chained matmuls and a batched one, no element-wise op."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 16, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x @ self.w[0] @ self.w[1] @ self.w[2]
        return torch.bmm(h.unsqueeze(0).expand(2, -1, -1), h.t().unsqueeze(0).expand(2, -1, -1))


MODELS = {
    "linear": (lambda: nn.Sequential(nn.Linear(8, 32), nn.Linear(32, 4)), (5, 8)),
    "conv": (
        lambda: nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 3, stride=2)),
        (2, 3, 16, 16),
    ),
    "matmul_heavy": (MatmulChain, (4, 16)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_flop_counts_agree_with_flop_counter_mode(name: str) -> None:
    torch.manual_seed(0)
    build, shape = MODELS[name]
    report = tl.report.flops_vs_dispatch(build(), torch.randn(shape))
    assert report.witness == "passed"
    assert report.status == "agree"
    assert (report.delta, report.comparable_delta, report.unknown_ops) == (0, 0, 0)
    assert report.ours_total == report.native_total > 0


def test_real_models_agree_over_the_families_both_registries_count(small_cnn, tiny_gpt2) -> None:
    torch.manual_seed(0)
    cnn = tl.report.flops_vs_dispatch(small_cnn.eval(), torch.randn(2, 3, 8, 8))
    # conv: 2 * (2*4*8*8) * (3*3*3) = 27648; head: 2 * 2 * 2 * 4 = 32
    assert (cnn.native_total, cnn.comparable_ours) == (27648 + 32, 27648 + 32)
    # ours also counts batch_norm (4 * 512), relu (512) and the pool (512): FlopCounterMode not
    assert cnn.delta == 4 * 512 + 512 + 512
    gpt = tl.report.flops_vs_dispatch(tiny_gpt2, {"input_ids": torch.randint(0, 64, (1, 8))})
    assert (gpt.status, gpt.comparable_delta) == ("agree", 0)
    families = {row["family"]: row for row in gpt.table("families").dicts()}
    assert families["elementwise"]["native"] is None  # the native registry has no such family
    assert {row["overload"] for row in gpt.table("native_ledger").dicts()} >= {"aten.addmm"}


class Attention(nn.Module):
    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, q, q)


def test_cpu_fused_attention_is_a_native_registry_gap_disagreeing_loudly() -> None:
    report = tl.report.flops_vs_dispatch(Attention(), torch.randn(2, 4, 8, 16))
    assert report.status == "disagree"
    assert (report.native_total, report.ours_total) == (0, 2 * 2 * 8 * 8 * 8 * 16)
    assert [f.code for f in report.findings] == ["flops_registries_disagree", "native_registry_gap"]


class Einsum(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("ij,jk->ik", x, x)


def test_native_values_never_fill_our_unknown_cells() -> None:
    report = tl.report.flops_vs_dispatch(Einsum(), torch.ones(4, 4))
    unknown = report.table("unknown_ops").dicts()
    assert unknown == [{"func": "einsum", "count": 1, "flops": None, "ops": ("einsum_1",)}]
    assert report.ours_total == 0
    assert report.native_total == 2 * 4 * 4 * 4  # einsum dispatches to aten.mm (or bmm)
    assert report.comparable_delta == -128


class Drifting(nn.Module):
    """Its output depends on how often it ran: no second run can reproduce the first."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * self.calls


def test_output_witness_refuses_when_the_raw_run_diverges() -> None:
    report = tl.report.flops_vs_dispatch(Drifting(), torch.ones(2))
    assert (report.status, report.witness, report.delta) == ("refused", "failed", None)
    assert [f.code for f in report.findings] == ["flops_crosscheck_witness_failed"]


def test_model_state_and_rng_are_restored() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5)).train()
    x = torch.randn(8, 4)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    report = tl.report.flops_vs_dispatch(model, x)
    assert report.witness == "passed"  # dropout drew the same mask twice: RNG restored between
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(rng, torch.get_rng_state())
