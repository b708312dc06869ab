"""tl.trace on small real models: labels, modules, parents, source lines, shapes, equality."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn
from torch.nn.modules import module as nn_module
from torch.overrides import _get_current_function_mode_stack

import torchlens_nb as tl
from tests import models


def assert_no_capture_state_left() -> None:
    assert not nn_module._global_forward_hooks
    assert not nn_module._global_forward_pre_hooks
    assert _get_current_function_mode_stack() == []


def test_mlp_labels_modules_parents_and_shapes(mlp: nn.Sequential) -> None:
    trace = tl.trace(mlp, torch.ones(2, 8))
    assert [op.label for op in trace] == ["input_1", "linear_1", "relu_1", "linear_2"]
    assert [op.module for op in trace] == ["", "0", "1", "2"]
    assert trace["relu_1"].parents == ("linear_1",)
    assert trace["linear_1"].children == ("relu_1",)
    assert trace["linear_1"].param_names == ("0.weight", "0.bias")
    assert trace["linear_2"].shape == (2, 4) and trace["linear_2"].dtype == "float32"
    assert trace.input_layers == ("input_1",) and trace.output_layers == ("linear_2",)
    assert trace["linear_2"].is_output and trace["input_1"].is_input
    assert len(trace) == 4 and trace[-1] is trace["linear_2"]


def test_outputs_are_bitwise_equal_and_saved_values_match(small_cnn: nn.Module) -> None:
    small_cnn.train()
    x = torch.randn(2, 3, 8, 8)
    expected = models.small_cnn()(x)  # same seed, fresh BatchNorm stats
    trace = tl.trace(small_cnn, x)
    assert torch.equal(trace.output, expected)
    assert torch.equal(trace[trace.output_layers[0]].out, expected)
    assert small_cnn.training  # mode untouched
    funcs = [op.func for op in trace]
    # train-mode BatchNorm counts batches in place first: num_batches_tracked.add_(1)
    assert funcs == [
        "input",
        "conv2d",
        "add_",
        "batch_norm",
        "relu",
        "adaptive_avg_pool2d",
        "flatten",
        "linear",
    ]
    assert trace["add__1"].param_names == ("bn.num_batches_tracked",)
    assert trace["batch_norm_1"].module == "bn"
    assert trace["batch_norm_1"].param_names == (
        "bn.running_mean",
        "bn.running_var",
        "bn.weight",
        "bn.bias",
    )


def test_source_line_is_the_users_line_inside_a_submodule() -> None:
    class Inner(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.log(x)  # the recorded line

    model = nn.Sequential(nn.Identity(), nn.Sequential(Inner()))
    trace = tl.trace(model, torch.tensor([[-1.0, 1.0]]))
    op = trace["log_1"]
    lines, start = inspect.getsourcelines(Inner.forward)
    expected_line = start + next(i for i, text in enumerate(lines) if "torch.log" in text)
    assert (op.file, op.line) == (__file__, expected_line)
    assert op.code == "return torch.log(x)  # the recorded line"
    assert op.module == "1.0" and op.module_stack == ("1", "1.0")


def test_inplace_views_multiple_outputs_and_control_flow() -> None:
    torch.manual_seed(0)
    model = models.InPlaceViews()
    x = torch.randn(3, 4)
    expected = model(x)
    trace = tl.trace(model, x)
    # randn seed 0 makes flat.sum() > 0, so the branch taken is `flat * 2`
    assert [op.label for op in trace] == [
        "input_1",
        "linear_1",
        "relu__1",
        "view_1",
        "sum_1",
        "gt_1",
        "mul_1",
        "setitem_1",
        "t_1",
    ]
    assert trace["relu__1"].is_inplace and trace["relu__1"].parents == ("linear_1",)
    assert trace["view_1"].is_view and trace["view_1"].parents == ("relu__1",)
    assert trace["setitem_1"].is_inplace
    # copy on write: the saved relu_ output is the value before y[:, 0] = 0 wrote into it
    relu_out = torch.relu(model.fc(x))
    assert torch.equal(trace["relu__1"].out, relu_out)
    assert trace["setitem_1"].out[:, 0].eq(0).all()
    assert all(torch.equal(a, b) for a, b in zip(trace.output, expected))
    assert len(trace.output_layers) == 2


def test_dict_inputs_are_keyword_arguments() -> None:
    torch.manual_seed(0)
    model = models.DictInput()
    ids = torch.tensor([[1, 2, 3]])
    trace = tl.trace(model, {"ids": ids, "scale": 2.0})
    assert torch.equal(trace.output, model(ids, scale=2.0))
    assert [op.func for op in trace] == ["input", "embedding", "mean", "mul"]


def test_hugging_face_batch_encoding_is_keyword_arguments(tiny_gpt2: nn.Module) -> None:
    from transformers import BatchEncoding

    batch = BatchEncoding(
        {"input_ids": torch.tensor([[1, 2, 3]]), "attention_mask": torch.tensor([[1, 1, 0]])}
    )
    trace = tl.trace(tiny_gpt2, batch, save=False)
    expected = tiny_gpt2(**batch).logits
    assert torch.equal(trace.output.logits, expected)
    assert [trace[label].shape for label in trace.input_layers] == [(1, 3), (1, 3)]


def test_gpt2_labels_and_module_addresses(tiny_gpt2: nn.Module) -> None:
    ids = torch.arange(8).unsqueeze(0)
    trace = tl.trace(tiny_gpt2, {"input_ids": ids})
    assert torch.equal(trace.output.logits, tiny_gpt2(input_ids=ids).logits)
    softmaxes = [op for op in trace if op.func == "softmax"]
    assert [op.module for op in softmaxes] == ["transformer.h.0.attn", "transformer.h.1.attn"]
    assert {op.module for op in trace if op.func == "layer_norm"} >= {
        "transformer.h.0.ln_1",
        "transformer.h.1.ln_2",
        "transformer.ln_f",
    }
    assert "modeling_gpt2.py" in softmaxes[0].file
    block_outputs = [c.output_labels for c in trace.module_calls if c.address == "transformer.h.1"]
    assert len(block_outputs) == 1 and block_outputs[0]


def test_save_selectors_false_and_globs(mlp: nn.Sequential) -> None:
    x = torch.ones(1, 8)
    nothing = tl.trace(mlp, x, save=False)
    assert not any(op.has_saved for op in nothing)
    only_relu = tl.trace(mlp, x, save=tl.func("relu"))
    assert [op.label for op in only_relu if op.has_saved] == ["relu_1"]
    union = tl.trace(mlp, x, save=tl.func("re*") | tl.module("2"))
    assert [op.label for op in union if op.has_saved] == ["relu_1", "linear_2"]


def test_forward_that_raises_leaves_no_hooks_and_keeps_partial_trace() -> None:
    class Boom(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.fc(x).relu()
            raise ValueError("boom inside forward")

    with pytest.raises(tl.errors.ForwardError, match="ValueError: boom") as caught:
        tl.trace(Boom(), torch.ones(1, 2))
    partial = caught.value.partial_trace
    assert partial.is_partial and isinstance(partial.exception, ValueError)
    assert [op.label for op in partial] == ["input_1", "linear_1", "relu_1"]
    assert_no_capture_state_left()


def test_no_hooks_or_modes_left_after_success(mlp: nn.Sequential) -> None:
    tl.trace(mlp, torch.ones(1, 8))
    assert_no_capture_state_left()
    assert not mlp._forward_hooks and not mlp._forward_pre_hooks


def test_capture_under_no_grad_and_parameters_untouched(mlp: nn.Sequential) -> None:
    before = {k: v.clone() for k, v in mlp.state_dict().items()}
    with torch.no_grad():
        trace = tl.trace(mlp, torch.ones(1, 8))
    assert not trace["linear_2"].requires_grad
    assert all(torch.equal(before[k], v) for k, v in mlp.state_dict().items())


def test_hook_plan_observes_values_without_adding_ops(mlp: nn.Sequential) -> None:
    seen: list[tuple[str, str, float]] = []

    def observe(site: tl.options.Site, value: torch.Tensor) -> None:
        seen.append(
            (site.label, site.kind, float(value.detach().abs().sum()))
        )  # torch ops: not recorded

    plan = tl.options.HookPlan(((tl.func("relu"), observe), (tl.module("2"), observe)))
    x = torch.randn(2, 8)
    plain = tl.trace(mlp, x)
    hooked = tl.trace(mlp, x, capture=tl.options.CaptureOptions(hooks=plan))
    assert [op.label for op in hooked] == [op.label for op in plain]
    assert torch.equal(hooked.output, plain.output)
    assert [(label, kind) for label, kind, _ in seen] == [("relu_1", "op"), ("linear_2", "module")]


def test_backward_records_per_op_gradients_and_fire_order() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    x = torch.randn(4, 2)
    trace = tl.trace(model, x, capture=tl.options.CaptureOptions(save_grads=True))
    loss = trace[trace.output_layers[0]].out.sum()
    record = trace.backward(loss)
    # d(sum)/d(out) is all ones; the tanh output's gradient is ones @ W2
    assert torch.equal(trace["linear_2"].grad, torch.ones(4, 1))
    assert torch.allclose(trace["tanh_1"].grad, torch.ones(4, 1) @ model[2].weight)
    fired = [fire.labels for fire in record.fires if fire.labels]
    assert fired == [("linear_2",), ("tanh_1",), ("linear_1",)]  # reverse execution order
    assert record.fires[0].node == "SumBackward0"
    assert model[0].weight.grad is not None  # accumulates like loss.backward()
    assert_no_capture_state_left()


def test_backward_without_backward_ready_is_refused(mlp: nn.Sequential) -> None:
    trace = tl.trace(mlp, torch.ones(1, 8))
    with pytest.raises(tl.errors.BackwardError, match="save_grads=True"):
        trace.backward(trace.output.sum())


def test_second_backward_without_retain_graph_is_a_typed_error(mlp: nn.Sequential) -> None:
    trace = tl.trace(mlp, torch.ones(1, 8), capture=tl.options.CaptureOptions(save_grads=True))
    loss = trace.output.sum()
    trace.backward(loss)
    with pytest.raises(tl.errors.BackwardError, match="retain_graph=True"):
        trace.backward(loss)


def test_compiled_model_is_captured_eagerly_with_a_warning(mlp: nn.Sequential) -> None:
    compiled = torch.compile(mlp)
    with pytest.warns(tl.errors.TorchlensNbWarning, match="force_eager"):
        trace = tl.trace(compiled, torch.ones(1, 8))
    assert [op.func for op in trace] == ["input", "linear", "relu", "linear"]


@pytest.mark.parametrize(
    ("model", "inputs", "error", "match"),
    [
        ([nn.Linear(2, 2)], torch.ones(1, 2), tl.errors.ModelTypeError, "nn.Sequential"),
        (nn.Linear(2, 2), "hello", tl.errors.InputFormError, "tokenize"),
        (nn.Linear(2, 2), None, tl.errors.InputFormError, "pass a tensor"),
        (nn.Linear(2, 2), {1: torch.ones(1, 2)}, tl.errors.InputFormError, "keys must be"),
    ],
    ids=["list-not-module", "string-input", "none-input", "non-string-keys"],
)
def test_bad_arguments_get_typed_errors(
    model: object, inputs: object, error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        tl.trace(model, inputs)  # type: ignore[arg-type]


def test_bad_save_and_lookup_errors(mlp: nn.Sequential) -> None:
    with pytest.raises(tl.errors.CaptureOptionsError, match="save must be"):
        tl.trace(mlp, torch.ones(1, 8), save="relu")  # type: ignore[arg-type]
    trace = tl.trace(mlp, torch.ones(1, 8))
    with pytest.raises(tl.errors.OpNotFoundError, match="Labels like it"):
        trace["relu_9"]
    with pytest.raises(KeyError):  # also a KeyError for callers who catch that
        trace["nothing_1"]
    with pytest.raises(tl.errors.SelectorError, match="at least one pattern"):
        tl.func()
