"""Backprop-to-input dependency checks: ``batch_independence`` and ``causal_dependency``.

The gradient dual of NaN poisoning: it works inside models, where NaN dye gives false positives
(attention softmax, normalisation statistics). For EVERY output index i the recipe backpropagates
a random projection of output i to the input and records, per input index j, the largest
|gradient|. A leak is a non-zero gradient where the check forbids one: j != i across the batch,
j > i along a causal sequence. Testing every i matters: a leak between examples 3 and 4 is
invisible from output 0.

Why a random projection instead of ``output[i].sum()``: the sum of a softmax output is constant,
so its gradient is zero everywhere and would hide every dependency. The weights come from a
private seeded generator.

Side effects: none on the caller's model. It runs in eval mode (dropout and batch statistics
would add dependencies of their own) and its train/eval flags are restored; gradients are taken
with ``torch.autograd.grad`` with respect to the input only, so no parameter ``.grad`` is
written. Cost: one forward and one backward per output index.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import torch
from torch import nn

from ..._hooks import add_forward_hooks
from ..._undo import Undo, undoing
from ..._validate import check_int, check_number
from ...debug._isolation import keeps_torch_switches
from ...errors import DiagnosticArgumentError, InputFormError
from ...report import Finding, Table
from ...report._recipes_data import recipe_status, worst_finding
from ...report._recipes_flow import DependencyCheck, DependencyReport, Leak
from .._batches import (
    call_model,
    check_model,
    model_device,
    primary_output,
    to_device,
)
from .._model_state import preserved

Tap = tuple[str, Any]
"""(embedding module's name, its output) seen by :func:`_embedding_taps`."""
MATRIX_MAX = 64
"""The report keeps the full output x input matrix up to 64 indices (4,096 numbers): above that
the payload would outgrow a panel, and the leaks alone are kept."""
_REMEDY = {
    "batch_independence": "look for a view/reshape that moves the batch dimension (use transpose/permute instead), "
    "a reduction over dim 0, or normalisation over the batch in eval mode.",
    "causal_dependency": "check the attention mask: position t must see keys 0..t only, i.e. mask "
    "torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1) (diagonal=1, not 2).",
}


def _probed_tensor(x: Any) -> tuple[torch.Tensor, str | None]:
    """The tensor to perturb and, for a dict, its key."""
    if isinstance(x, torch.Tensor):
        return x, None
    if isinstance(x, Mapping):
        if isinstance(x.get("input_ids"), torch.Tensor):
            return x["input_ids"], "input_ids"
        floats = [k for k, v in x.items() if isinstance(v, torch.Tensor) and v.is_floating_point()]
        if len(floats) == 1:
            return x[floats[0]], floats[0]
    raise InputFormError(
        f"x must be a tensor or a dict with input_ids (or exactly one float tensor), got "
        f"{type(x).__name__}; pass the model input whose examples/positions you want checked."
    )


def _embedding_taps(model: nn.Module, ids: torch.Tensor, x: Any) -> tuple[Any, list[Tap]]:
    """The model's output on ``x`` and the outputs of the embedding modules that embed ``ids``
    (token ids have no grad), collected by forward hooks removed afterwards whatever instant a
    Ctrl-C arrives at (each removal registered before its hook: ``_hooks.add_forward_hooks``).

    A frozen embedding (``requires_grad=False``) outputs a tensor without grad: the hook hands
    the forward a leaf copy that requires grad instead, so the gradient still reaches the tap."""
    taps: list[Tap] = []

    def hook(name: str, module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        if (
            args
            and isinstance(args[0], torch.Tensor)
            and args[0].shape == ids.shape
            and bool(torch.equal(args[0], ids))
        ):
            if isinstance(output, torch.Tensor) and not output.requires_grad:
                output = output.detach().requires_grad_(True)
            taps.append((name, output))
            return output
        return None

    def run(undo: Undo) -> Any:
        for name, module in model.named_modules():
            if isinstance(module, nn.Embedding):
                add_forward_hooks(undo, module, post=partial(hook, name))
        return primary_output(call_model(model, x))

    return undoing(run), taps


def _dependency_matrix(model: nn.Module, x: Any, dim: int, seed: int) -> tuple[torch.Tensor, str]:
    tensor, key = _probed_tensor(x)
    if tensor.dim() <= dim:
        raise DiagnosticArgumentError(
            f"x has shape {tuple(tensor.shape)}; dimension {dim} does not exist."
        )
    if tensor.shape[dim] == 0:
        raise DiagnosticArgumentError(
            f"x has shape {tuple(tensor.shape)}: dimension {dim} holds no item to compare; pass "
            "at least two."
        )
    x = to_device(x, model_device(model))
    tensor, _ = _probed_tensor(x)
    with preserved(model, mode="eval"), torch.enable_grad():
        if tensor.is_floating_point():
            leaf = tensor.detach().clone().requires_grad_(True)
            inputs = leaf if key is None else {**x, key: leaf}
            output = primary_output(call_model(model, inputs))
            target, probed = leaf, "input"
        else:
            output, taps = _embedding_taps(model, tensor, x)
            if not taps:
                raise InputFormError(
                    "x holds integer ids and no nn.Embedding of the model embeds them; pass a "
                    "float input (e.g. the embeddings) to check dependencies."
                )
            name, target = taps[0]
            probed = f"embedding {name}"
        if output.grad_fn is None:
            raise DiagnosticArgumentError(
                "the model's output has no grad_fn: its forward runs under no_grad or detaches; "
                "the dependency check needs gradients from output to input."
            )
        n_in, n_out = target.shape[dim], output.shape[dim] if output.dim() > dim else -1
        if n_out != n_in:
            raise DiagnosticArgumentError(
                f"the output has {n_out} indices along dim {dim} but the input has {n_in}; the "
                "check needs one output per input example/position (pass dim= for another "
                "layout)."
            )
        generator = torch.Generator().manual_seed(seed)
        weights = torch.randn(output.shape, generator=generator).to(output.device, output.dtype)
        rows = []
        for i in range(n_out):
            projection = (output.select(dim, i) * weights.select(dim, i)).sum()
            (grad,) = torch.autograd.grad(
                projection, target, retain_graph=i < n_out - 1, allow_unused=True
            )
            if grad is None:
                rows.append(torch.zeros(n_in, dtype=torch.float64))
                continue
            per_index = grad.detach().abs().movedim(dim, 0).reshape(n_in, -1).amax(dim=1)
            rows.append(per_index.to(torch.float64).cpu())
    return torch.stack(rows), probed


def _check(
    check: DependencyCheck, model: nn.Module, x: Any, dim: int, rtol: float, seed: int
) -> DependencyReport:
    check_model(model)
    check_int("seed", seed)
    check_int("dim", dim, low=0)
    check_number("rtol", rtol, low=0, high=1, high_open=True, expect="a number in [0, 1)")
    matrix, probed = _dependency_matrix(model, x, dim, seed)
    n = matrix.shape[0]
    threshold = float(rtol) * float(matrix.max())
    index = torch.arange(n)
    forbidden = (
        (index[None, :] != index[:, None])
        if check == "batch_independence"
        else (index[None, :] > index[:, None])
    )
    hits = (matrix > threshold) & forbidden
    leaks = tuple(
        Leak(
            i,
            tuple(int(j) for j in torch.nonzero(hits[i]).reshape(-1)),
            float(matrix[i][hits[i]].max()),
        )
        for i in range(n)
        if bool(hits[i].any())
    )
    blind = tuple(i for i in range(n) if float(matrix[i, i]) <= threshold)
    findings = _findings(check, leaks, blind, n, bool((matrix > threshold).any()))
    noun = "output" if check == "batch_independence" else "position"
    table = Table.from_dicts(
        "leaks",
        [
            {
                noun: leak.output_index,
                "depends_on": leak.input_indices,
                "max_grad": leak.max_grad,
                "own_grad": float(matrix[leak.output_index, leak.output_index]),
            }
            for leak in leaks
        ],
        (noun, "depends_on", "max_grad", "own_grad"),
        {"size": n, "rtol": rtol, "dim": dim},
    )
    status = recipe_status(findings)
    if findings and findings[0].code == "no_input_gradient":
        status = "inconclusive"
        lead = f"no {noun} depends even on its own input: independence cannot be judged."
    elif leaks:
        lead = f"{len(leaks)} of {n} {noun}s depend on indices they must not see."
    elif status == "pass":
        lead = f"all {n} {noun}s depend only on allowed indices."
    else:
        lead = worst_finding(findings).message
    return DependencyReport(
        subject=f"{type(model).__name__}, {n} {noun}s along dim {dim}",
        status=status,
        lead=lead,
        findings=tuple(findings),
        tables=(table,),
        check=check,
        size=n,
        dim=dim,
        probed=probed,
        matrix=tuple(tuple(row) for row in matrix.tolist()) if n <= MATRIX_MAX else None,
        leaks=leaks,
        blind=blind,
        rtol=float(rtol),
        disclosures=(
            "ran in eval mode: train-mode batch statistics (BatchNorm) and dropout are not checked",
            f"every one of the {n} output indices was tested",
        ),
    )


def _findings(
    check: DependencyCheck,
    leaks: tuple[Leak, ...],
    blind: tuple[int, ...],
    n: int,
    any_gradient: bool,
) -> list[Finding]:
    if not any_gradient:
        return [
            Finding(
                "no_input_gradient",
                "warning",
                "no output depends on the input at all (every gradient is zero), not even on "
                "its own index: dependencies between indices cannot be judged.",
                remedy="find where the input stops reaching the output with "
                "tl.recipes.gradient_flow(model, batch, loss_fn) (a dead layer zeroes every "
                "gradient upstream of it) and check that forward uses its input without "
                "detaching it.",
            )
        ]
    findings = []
    if leaks:
        pairs = "; ".join(
            f"{leak.output_index} <- {list(leak.input_indices)}" for leak in leaks[:5]
        )
        more = f" (and {len(leaks) - 5} more)" if len(leaks) > 5 else ""
        what = (
            "depend on other examples of the batch"
            if check == "batch_independence"
            else "see future positions"
        )
        findings.append(
            Finding(
                "batch_leak" if check == "batch_independence" else "causal_leak",
                "critical",
                f"{len(leaks)} of {n} outputs {what}: {pairs}{more}.",
                remedy=_REMEDY[check],
                fields={
                    "leaks": {str(leak.output_index): list(leak.input_indices) for leak in leaks}
                },
            )
        )
    if blind:
        findings.append(
            Finding(
                "ignores_own_input",
                "warning",
                f"{len(blind)} of {n} outputs have zero gradient on their own input index: "
                f"{list(blind[:10])}.",
                remedy="a mask that also hides the diagonal, or an index shift, drops the output's "
                "own input; check masks and any roll/shift.",
                fields={"blind": list(blind)},
            )
        )
    return findings


@keeps_torch_switches
def batch_independence(
    model: nn.Module, x: Any, *, dim: int = 0, rtol: float = 0.0, seed: int = 0
) -> DependencyReport:
    """Check that output example i depends on input example i only (every i tested).

    Catches view-instead-of-transpose bugs and anything else that mixes information across the
    batch. See the module docstring for method, side effects and cost.

    Args:
        model: runs in eval mode; its flags and parameter ``.grad`` are left as they were.
        x: the input batch: a float tensor, or integer ids / a dict with ``input_ids`` (the
            gradient is then taken at the output of the embedding that embeds them).
        dim: the batch dimension of input and output.
        rtol: count a gradient only above ``rtol`` x the largest one (0: any non-zero, the
            exact test; raise it for kernels that add rounding noise).
        seed: seed of the random output projection.

    Returns:
        A :class:`DependencyReport` naming each leaking output and the inputs it depends on.

    Example:
        >>> import torch, torchlens_nb as tl
        >>> r = tl.recipes.batch_independence(torch.nn.Linear(3, 2), torch.randn(4, 3))
        >>> r.status, r.leaks
        ('pass', ())
    """
    return _check("batch_independence", model, x, dim, rtol, seed)


@keeps_torch_switches
def causal_dependency(
    model: nn.Module, x: Any, *, dim: int = 1, rtol: float = 0.0, seed: int = 0
) -> DependencyReport:
    """Check that output position t depends on input positions <= t only (every t tested).

    Validates causal masking inside a model, where NaN poisoning cannot (NaN + -inf = NaN spreads
    through a correctly masked softmax). See the module docstring for method and cost.

    Args:
        model: runs in eval mode; its flags and parameter ``.grad`` are left as they were.
        x: a ``(batch, seq, ...)`` float input, or token ids / a dict with ``input_ids``.
        dim: the sequence dimension of input and output.
        rtol: as in :func:`batch_independence`.
        seed: seed of the random output projection.

    Returns:
        A :class:`DependencyReport` naming each position that sees the future and what it sees.
    """
    return _check("causal_dependency", model, x, dim, rtol, seed)
