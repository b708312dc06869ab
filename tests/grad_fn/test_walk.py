"""walk_grad_fn: the graph it reads is exactly autograd's, named and bounded."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchlens_nb as tl
from tests import models
from tests.grad_fn.conftest import reference_graph
from torchlens_nb.errors import DiagnosticArgumentError, GradFnWalkError, ModelTypeError


def test_nodes_and_edges_agree_with_an_independent_walk(model_and_loss) -> None:
    model, loss = model_and_loss
    reference, reference_edges = reference_graph(loss)

    sketch = tl.debug.walk_grad_fn(loss, model=model)

    assert [n.name for n in sketch.nodes] == [type(fn).__name__ for fn in reference]
    assert {(e.src, e.dst, e.slot) for e in sketch.edges} == reference_edges
    assert len(sketch.edges) == len(reference_edges)  # no edge twice
    assert [n.kind for n in sketch.nodes] == [
        "leaf" if hasattr(fn, "variable") else "op" for fn in reference
    ]
    assert not sketch.truncated and sketch.status == "complete"


def test_parameter_names_match_named_parameters(model_and_loss) -> None:
    model, loss = model_and_loss
    sketch = tl.debug.walk_grad_fn(loss, model=model)

    by_name = dict(model.named_parameters(remove_duplicate=False))
    leaves = [n for n in sketch.nodes if n.kind == "leaf"]
    every_name = {name for n in leaves for name in (n.param_name, *n.aliases)}
    assert every_name == set(by_name)  # every parameter feeds these losses
    for leaf in leaves:
        assert leaf.shapes == (tuple(by_name[leaf.param_name].shape),)


def test_the_first_name_comes_from_named_parameters_and_tied_weights_keep_both(
    gpt2_and_loss,
) -> None:
    model, loss = gpt2_and_loss
    sketch = tl.debug.walk_grad_fn(loss, model=model)

    (tied,) = [n for n in sketch.nodes if n.aliases]
    assert (tied.param_name, tied.aliases) == ("transformer.wte.weight", ("lm_head.weight",))
    assert tied.group == ""  # owned by transformer.wte and lm_head: their common module is root


def test_params_names_win_over_model_names(mlp) -> None:
    loss = mlp(torch.randn(2, 8)).sum()
    sketch = tl.debug.walk_grad_fn(loss, params={"W0": mlp[0].weight}, model=mlp)

    leaf = next(n for n in sketch.nodes if n.param_name == "W0")
    assert leaf.aliases == ("0.weight",)
    assert leaf.label == "W0"


def test_params_alone_name_leaves_torchviz_style() -> None:
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    sketch = tl.debug.walk_grad_fn((x * w).sum(), params={"x": x, "w": w})

    # SumBackward0 <- MulBackward0 <- (x, w) in next_functions order
    assert [n.label for n in sketch.nodes] == ["SumBackward0", "MulBackward0", "x", "w"]
    assert sketch.groups == ()  # top-level names: nothing to group


def test_without_names_leaves_are_unnamed_and_nothing_is_grouped(mlp) -> None:
    sketch = tl.debug.walk_grad_fn(mlp(torch.randn(2, 8)).sum())

    assert {n.param_name for n in sketch.nodes} == {None}
    assert sketch.groups == () and {n.group for n in sketch.nodes} == {""}


def test_several_outputs_share_their_common_subgraph(mlp) -> None:
    hidden = mlp[1](mlp[0](torch.randn(2, 8)))
    logits = mlp[2](hidden)
    reference, edges = reference_graph(logits, hidden)

    sketch = tl.debug.walk_grad_fn([logits, hidden], model=mlp)

    assert len(sketch.nodes) == len(reference)
    assert {(e.src, e.dst, e.slot) for e in sketch.edges} == edges
    assert [(o.index, o.shape) for o in sketch.outputs] == [(0, (2, 4)), (1, (2, 16))]
    assert sketch.subject == "2 outputs, shapes (2, 4), (2, 16)"
    assert sketch.nodes[sketch.outputs[1].node].name == "ReluBackward0"


def test_op_nodes_carry_forward_output_shapes(mlp) -> None:
    sketch = tl.debug.walk_grad_fn(mlp(torch.randn(5, 8)).sum())

    first_linear = [n for n in sketch.nodes if n.name == "AddmmBackward0"][-1]
    assert first_linear.shapes == ((5, 16),) and first_linear.dtype == "float32"


@pytest.mark.parametrize(
    "max_nodes_delta, truncated",
    [(0, False), (-1, True), (5, False)],
    ids=["exactly-enough", "one-short", "room-to-spare"],
)
def test_truncated_exactly_when_max_nodes_is_hit(
    gpt2_and_loss, max_nodes_delta: int, truncated: bool
) -> None:
    model, loss = gpt2_and_loss
    full = tl.debug.walk_grad_fn(loss, model=model)
    limit = len(full.nodes) + max_nodes_delta

    sketch = tl.debug.walk_grad_fn(loss, model=model, max_nodes=limit)

    assert sketch.truncated is truncated
    assert len(sketch.nodes) == min(limit, len(full.nodes))
    assert [n.name for n in sketch.nodes] == [n.name for n in full.nodes[:limit]]
    assert all(e.src < limit and e.dst < limit for e in sketch.edges)
    assert sketch.status == ("truncated" if truncated else "complete")
    assert ("grad_fn_truncated" in {f.code for f in sketch.findings}) is truncated


def test_a_truncated_walk_marks_the_nodes_whose_inputs_were_cut(mlp) -> None:
    loss = mlp(torch.randn(2, 8)).sum()
    # BFS order: Sum, Addmm(2), 2.bias, Relu, T(2), Addmm(0), 2.weight, 0.bias, T(0), 0.weight
    sketch = tl.debug.walk_grad_fn(loss, max_nodes=4)

    assert [n.name for n in sketch.nodes] == [
        "SumBackward0",
        "AddmmBackward0",
        "AccumulateGrad",
        "ReluBackward0",
    ]
    # Addmm(2) lost its T(2) input, Relu lost Addmm(0); Sum and the leaf are whole
    assert [n.is_cut for n in sketch.nodes] == [False, True, False, True]


def test_max_nodes_below_one_or_below_the_outputs_is_refused(mlp) -> None:
    hidden = mlp[0](torch.randn(2, 8))
    logits = mlp[2](hidden.relu())
    with pytest.raises(DiagnosticArgumentError, match="max_nodes must be an int >= 1, got 0"):
        tl.debug.walk_grad_fn(logits, max_nodes=0)
    with pytest.raises(DiagnosticArgumentError, match="cannot hold the 2 distinct grad_fns"):
        tl.debug.walk_grad_fn([logits, hidden], max_nodes=1)
    assert len(tl.debug.walk_grad_fn([logits, hidden, logits], max_nodes=2).nodes) == 2


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: torch.ones(2, requires_grad=True),
            "leaf tensor .* pass a tensor computed from it",
        ),
        (lambda: torch.ones(2) * 2, "requires_grad is False: compute it with requires_grad inputs"),
        (lambda: (torch.ones(2, requires_grad=True) * 2).detach(), "outside torch.no_grad"),
        (lambda: 3, "must be a tensor or a sequence of tensors, got int"),
        (lambda: [], "outputs is empty"),
        (lambda: [torch.ones(1, requires_grad=True) * 2, "x"], r"outputs\[1\] is a str"),
        (
            lambda: {"loss": torch.ones(1, requires_grad=True) * 2},
            r"mapping; pass its tensors instead, e.g. outputs\['loss'\]",
        ),
    ],
    ids=["leaf", "no-grad-input", "detached", "int", "empty", "str-in-list", "mapping"],
)
def test_no_walkable_graph_raises_with_the_fix(make, message: str) -> None:
    with pytest.raises(GradFnWalkError, match=message):
        tl.debug.walk_grad_fn(make())


def test_tensors_from_no_grad_and_inference_mode_say_how_to_recompute() -> None:
    w = torch.ones(2, requires_grad=True)
    with torch.no_grad():
        under_no_grad = w * 2
    with torch.inference_mode():
        under_inference = w * 2
    with pytest.raises(GradFnWalkError, match=r"outside torch.no_grad\(\)"):
        tl.debug.walk_grad_fn(under_no_grad)
    with pytest.raises(GradFnWalkError, match="outside inference_mode"):
        tl.debug.walk_grad_fn(under_inference)
    assert issubclass(GradFnWalkError, ValueError)


def test_bad_params_and_model_are_refused_before_walking(mlp) -> None:
    loss = mlp(torch.randn(2, 8)).sum()
    with pytest.raises(DiagnosticArgumentError, match="params must map names to tensors"):
        tl.debug.walk_grad_fn(loss, params=[mlp[0].weight])
    with pytest.raises(DiagnosticArgumentError, match=r"params\['w'\] is a float"):
        tl.debug.walk_grad_fn(loss, params={"w": 1.0})
    with pytest.raises(ModelTypeError, match="must be a torch.nn.Module, got list"):
        tl.debug.walk_grad_fn(loss, model=[mlp])


def test_the_walk_runs_nothing_and_changes_nothing() -> None:
    model = models.small_cnn()
    loss = model(torch.randn(2, 3, 8, 8)).sum()
    calls = []
    handle = nn.modules.module.register_module_forward_hook(lambda *a: calls.append(a))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        tl.debug.walk_grad_fn(loss, model=model)
    finally:
        handle.remove()

    assert calls == []  # no forward ran
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    loss.backward()  # the graph is intact: backward still works after the walk
    assert model.head.weight.grad is not None


def test_a_graph_deeper_than_the_recursion_limit_walks() -> None:
    x = torch.ones(2, requires_grad=True)
    y = x
    for _ in range(3000):  # 3x Python's default recursion limit: a recursive walk would raise
        y = y * 1.5

    sketch = tl.debug.walk_grad_fn(y.sum())

    # SumBackward0, 3000 MulBackward0, and the AccumulateGrad of x: 3002 nodes in one chain
    assert len(sketch.nodes) == 3002 and len(sketch.edges) == 3001
    assert sketch.nodes[-1].kind == "leaf"


def test_trainable_parameters_missing_from_the_graph_are_named() -> None:
    torch.manual_seed(0)
    model = nn.ModuleDict(
        {
            "used": nn.Linear(4, 2),
            "cached": nn.Linear(4, 2),
            "frozen": nn.Linear(4, 2).requires_grad_(False),
        }
    )
    x = torch.randn(3, 4)
    cached = model["cached"](x).detach()  # a cache on the path: no gradient flows back
    loss = (model["used"](x) + cached + model["frozen"](x)).sum()

    sketch = tl.debug.walk_grad_fn(loss, model=model)

    (finding,) = [f for f in sketch.findings if f.code == "grad_fn_unreached_parameters"]
    assert finding.fields["names"] == ("cached.weight", "cached.bias")  # frozen is expected
    assert finding.message == (
        "2 trainable parameters of the model are not in this graph, so these outputs give them "
        "no gradient: cached.weight, cached.bias."
    )
    truncated = tl.debug.walk_grad_fn(loss, model=model, max_nodes=2)
    assert "grad_fn_unreached_parameters" not in {f.code for f in truncated.findings}
