"""The held-out half of the public bug zoo: FROZEN (written before triage was changed for it).

Each case ports a mistake that PyTorch users reported in public (``source``) to a seeded CPU
repro that keeps the mistake exactly; ``build(False)`` is the accepted fix. ``measured`` is the
ground truth from ``tests/triage_public/measure.py`` (error on held-out data after
``MEASURE_STEPS`` steps of the user's own loop, bug vs fix). Only ``benchmarks/bench_triage.py``
and ``tests/triage_public/test_heldout.py`` run triage on these cases; do not tune triage to
them (tune on ``development.py``).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ._kit import (
    CLASSES,
    FEATURES,
    VOCAB,
    PublicCase,
    RNNClassifier,
    Setup,
    adam,
    imbalanced,
    mistake,
    mlp,
    multilabel,
    padded_tokens,
    plain_setup,
    regression,
    sgd,
    tabular,
    tokens,
)

KARPATHY = "https://karpathy.github.io/2019/04/25/recipe/"
CE_NOT_DECREASING = "https://discuss.pytorch.org/t/cross-entropy-loss-is-not-decreasing/43814/16"

DOUBLE_SOFTMAX = mistake("softmax output fed to CrossEntropyLoss", "double_softmax")
NOT_REGISTERED = mistake(
    "layers the forward uses are not model parameters", "params_not_registered"
)
STALE_GRAD = mistake("optimizer.zero_grad() never called: .grad accumulates", "stale_grad")
LR_DECAYED = mistake("the lr was decayed far below the one chosen", "lr_decayed")
IN_EVAL = mistake("model.eval() in the training loop", "model_in_eval")
VANISHING = mistake("deep sigmoid MLP: gradients vanish", "grad_vanishing")
RAW_INPUTS = mistake("inputs not standardised", "input_not_standardized", "unscaled_inputs")
LR_HIGH = mistake("lr far too high", "lr_too_high", "loss_diverged", "update_ratio_too_high")


# ----- models that carry the users' mistakes ----------------------------------------------------
class ListMLP(nn.Module):
    """Hidden layers kept in a plain Python list (bug) or an nn.ModuleList (fix)."""

    def __init__(self, registered: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        hidden = [nn.Linear(FEATURES, 64), nn.Linear(64, 64)]
        self.hidden = nn.ModuleList(hidden) if registered else hidden
        self.head = nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.head(x)


class BuiltInForward(nn.Module):
    """The hidden layer is constructed inside forward (bug: new random weights every call)."""

    def __init__(self, in_init: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = nn.Linear(FEATURES, 64)
        self.second = nn.Linear(64, 64) if in_init else None
        self.head = nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        second = self.second if self.second is not None else nn.Linear(64, 64)
        return self.head(torch.relu(second(torch.relu(self.first(x)))))


class SeqFirstEncoder(nn.Module):
    """Embedding -> seq-first GRU -> last state; the bug reshapes (B, T, E) to (T, B, E) with
    ``.view`` instead of ``.transpose`` (Karpathy's "view() and permute() are not the same")."""

    def __init__(self, use_view: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, 32)
        self.rnn = nn.GRU(32, 48)
        self.head = nn.Linear(48, 4)
        self.use_view = use_view

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        e = self.embed(ids)
        b, t, d = e.shape
        seq_first = e.view(t, b, d) if self.use_view else e.transpose(0, 1)
        _, hidden = self.rnn(seq_first)
        return self.head(hidden[-1])


def cut_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The user's loss after "fixing" *element 0 of tensors does not require grad*: the
    outputs were detached on the way (here: ``.detach()`` to log them) and the loss was made a
    leaf that requires grad; backward() runs, nothing reaches the model."""
    loss = F.cross_entropy(out.detach(), y)
    loss.requires_grad = True
    return loss


def nll_on_scores(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The user's plain function: NLL on raw scores (no log_softmax anywhere)."""
    return F.nll_loss(out, y)


# ----- builders (broken: the mistake; else the accepted fix) ----------------------------------
def _softmax_ce(broken: bool) -> Setup:
    return plain_setup(mlp(out=nn.Softmax(dim=1) if broken else None), tabular)


def _python_list(broken: bool) -> Setup:
    return plain_setup(ListMLP(registered=not broken), tabular)


def _built_in_forward(broken: bool) -> Setup:
    return plain_setup(BuiltInForward(in_init=not broken), tabular)


def _no_zero_grad(broken: bool) -> Setup:
    return plain_setup(mlp(), tabular, optimizer=sgd, zero_grad=not broken)


def _steplr_per_batch(broken: bool) -> Setup:
    setup = plain_setup(mlp(), tabular, optimizer=lambda m: sgd(m, 0.05))
    setup.scheduler = torch.optim.lr_scheduler.StepLR(setup.optimizer, step_size=30, gamma=0.1)
    setup.scheduler_per_batch = broken
    return setup


def _lstm_padding(broken: bool) -> Setup:
    return plain_setup(RNNClassifier(read="padded_end" if broken else "length"), padded_tokens)


def _mse_broadcast(broken: bool) -> Setup:
    def data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = regression(seed)
        return x, (y.squeeze(1) if broken else y)  # the loader yields (N,) targets

    return plain_setup(mlp((FEATURES, 64, 1)), data, nn.MSELoss())


def clipped_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The user's loss with per-example losses clamped at 1 ("clipping the loss instead of the
    gradients"): every example above 1 gives no gradient."""
    return F.cross_entropy(out, y, reduction="none").clamp(max=1.0).mean()


def _loss_clipped(broken: bool) -> Setup:
    return plain_setup(mlp(), tabular, clipped_loss if broken else nn.CrossEntropyLoss())


def _karpathy_four(broken: bool) -> Setup:
    """softmax into CrossEntropyLoss + model.eval() in the loop (dropout) + a deep sigmoid MLP
    + no zero_grad(); the fix: logits, model.train(), ReLU, zero_grad()."""
    act = nn.Sigmoid if broken else nn.ReLU
    model = mlp(
        (FEATURES, 64, 64, 64, 64, 64, CLASSES),
        act=act,
        dropout=0.3,
        out=nn.Softmax(dim=1) if broken else None,
    )
    return plain_setup(
        model, tabular, optimizer=lambda m: sgd(m, 0.05), eval_in_loop=broken, zero_grad=not broken
    )


def _nll_on_scores(broken: bool) -> Setup:
    return plain_setup(mlp(), tabular, nll_on_scores if broken else nn.CrossEntropyLoss())


def _raw_features(broken: bool) -> Setup:
    def data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        return tabular(seed, scale=100.0, shift=50.0) if broken else tabular(seed)

    return plain_setup(mlp(), data, optimizer=lambda m: sgd(m, 0.01))


def _sgd_lr_one(broken: bool) -> Setup:
    return plain_setup(mlp(), tabular, optimizer=lambda m: sgd(m, 1.0 if broken else 0.05))


def _cut_graph(broken: bool) -> Setup:
    return plain_setup(mlp(), tabular, cut_loss if broken else nn.CrossEntropyLoss())


def _sigmoid_into_bce_logits(broken: bool) -> Setup:
    model = mlp((FEATURES, 64, 6), out=nn.Sigmoid() if broken else None)
    return plain_setup(model, multilabel, nn.BCEWithLogitsLoss())


def _multi_hot_ce(broken: bool) -> Setup:
    loss = nn.CrossEntropyLoss() if broken else nn.BCEWithLogitsLoss()
    return plain_setup(mlp((FEATURES, 64, 6)), multilabel, loss)


def _class_weight_by_frequency(broken: bool) -> Setup:
    frequency = torch.tensor([0.8, 0.1, 0.1])
    weight = frequency if broken else 1 / frequency  # the bug: weights proportional to counts
    return plain_setup(mlp((FEATURES, 64, 3)), imbalanced, nn.CrossEntropyLoss(weight=weight))


def _deep_sigmoid(broken: bool) -> Setup:
    act = nn.Sigmoid if broken else nn.ReLU
    return plain_setup(
        mlp((FEATURES, 64, 64, 64, 64, 64, CLASSES), act=act),
        tabular,
        optimizer=lambda m: sgd(m, 0.05),
    )


def _view_not_transpose(broken: bool) -> Setup:
    return plain_setup(SeqFirstEncoder(use_view=broken), tokens)


def _zero_grad_between(broken: bool) -> Setup:
    return plain_setup(mlp(), tabular, zero_grad_after_backward=broken)


def _warmup_never_stepped(broken: bool) -> Setup:
    setup = plain_setup(mlp(), tabular, optimizer=lambda m: adam(m, 1e-3))
    warmup = torch.optim.lr_scheduler.LinearLR(setup.optimizer, start_factor=0.001, total_iters=8)
    setup.scheduler = None if broken else warmup  # the bug: scheduler.step() is never called
    setup.scheduler_per_batch = True
    return setup


def _no_zero_grad_and_steplr(broken: bool) -> Setup:
    setup = _steplr_per_batch(broken)
    setup.zero_grad = not broken
    return setup


def _softmax_and_raw(broken: bool) -> Setup:
    def data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        return tabular(seed, scale=100.0, shift=50.0) if broken else tabular(seed)

    return plain_setup(mlp(out=nn.Softmax(dim=1) if broken else None), data)


def _list_and_lr(broken: bool) -> Setup:
    return plain_setup(
        ListMLP(registered=not broken), tabular, optimizer=lambda m: sgd(m, 2.0 if broken else 0.05)
    )


HELDOUT: tuple[PublicCase, ...] = (
    PublicCase(
        "softmax_into_cross_entropy",
        f"{CE_NOT_DECREASING} (solution 1: do not pass the softmax into CrossEntropyLoss)",
        (DOUBLE_SOFTMAX,),
        _softmax_ce,
        "",
    ),
    PublicCase(
        "layers_in_python_list",
        "https://theflyingbirds.in/blog/pytorch-mysteries-lets-understand-nnmodule-nnparameter-"
        "modulelist-sequential-and-the-classic-layers-linear-activations-dropout (the model did "
        "not know it had parameters)",
        (NOT_REGISTERED,),
        _python_list,
        "",
    ),
    PublicCase(
        "layer_built_in_forward",
        "https://discuss.pytorch.org/t/can-i-instantiate-layers-in-forward-function/105054",
        (NOT_REGISTERED,),
        _built_in_forward,
        "",
    ),
    PublicCase(
        "forgot_zero_grad",
        "https://apxml.com/courses/getting-started-with-pytorch/chapter-6-implementing-training-"
        "loop/zeroing-gradients (stale, combined gradients)",
        (STALE_GRAD,),
        _no_zero_grad,
        "",
        handed_after=5,
    ),
    PublicCase(
        "steplr_stepped_per_batch",
        "https://runebook.dev/en/docs/pytorch/generated/torch.optim.lr_scheduler.lrscheduler/"
        "torch.optim.lr_scheduler.LRScheduler.step (StepLR inside the batch loop: the lr "
        "plummets and the model stops learning)",
        (LR_DECAYED,),
        _steplr_per_batch,
        "",
        handed_after=100,
    ),
    PublicCase(
        "lstm_reads_state_after_padding",
        "https://statedai.com/how-to-handle-variable-length-sequences-padding-in-pytorch-rnn."
        "html (the representation comes from the pad symbols, not the last word)",
        (mistake("the classifier reads the RNN state after the padding", "reads_padding"),),
        _lstm_padding,
        "",
    ),
    PublicCase(
        "mse_target_broadcast",
        "https://github.com/pytorch/pytorch/pull/18349 (MSELoss between (n, 1) and (n,) "
        "broadcasts to (n, n); pytorch/pytorch#16045)",
        (mistake("(N, 1) output vs (N,) target broadcast", "target_broadcast"),),
        _mse_broadcast,
        "",
    ),
    PublicCase(
        "loss_clipped_instead_of_gradients",
        f"{KARPATHY} ('you clipped your loss instead of your gradients, causing the outlier "
        "examples to be ignored')",
        (mistake("the loss is clamped: clamped examples give no gradient", "loss_clamped"),),
        _loss_clipped,
        "",
    ),
    PublicCase(
        "karpathy_four_at_once",
        f"{KARPATHY}: softmaxed outputs to a loss that expects logits, train/eval mode, "
        "zero_grad, plus a deep sigmoid stack",
        (DOUBLE_SOFTMAX, IN_EVAL, VANISHING, STALE_GRAD),
        _karpathy_four,
        "",
        handed_after=3,
    ),
    PublicCase(
        "nll_loss_on_raw_scores",
        "https://runebook.dev/en/articles/pytorch/generated/torch.nn.softmax (NLLLoss expects "
        "log-probabilities)",
        (mistake("nll_loss on raw scores in a plain function", "nll_on_scores"),),
        _nll_on_scores,
        "",
    ),
    PublicCase(
        "unscaled_features",
        "https://robotsatlas.com/courses/sieci-neuronowe-od-podstaw-do-nowoczesnej-ai/trening-w-"
        "praktyce-optymalizatory-i-diagnostyka/systematyczna-diagnostyka-overfit-single-batch-"
        "init-loss (common traps: unscaled inputs)",
        (RAW_INPUTS,),
        _raw_features,
        "",
    ),
    PublicCase(
        "sgd_lr_far_too_high",
        f"{CE_NOT_DECREASING} (solution 2: use a smaller learning rate)",
        (LR_HIGH,),
        _sgd_lr_one,
        "",
    ),
    PublicCase(
        "loss_requires_grad_hides_cut",
        "https://php.bkmy88.com/faq/1835025.html (element 0 of tensors does not require grad: "
        "the graph was cut on the way to the loss)",
        (mistake("nothing of the model reaches the loss", "loss_detached", "no_gradient"),),
        _cut_graph,
        "",
    ),
    PublicCase(
        "sigmoid_into_bce_with_logits",
        "http://www.philkr.net/cs342/doc/sigmoid/ (do not pass the output through the sigmoid "
        "before BCEWithLogitsLoss)",
        (mistake("sigmoid output fed to BCEWithLogitsLoss", "double_sigmoid"),),
        _sigmoid_into_bce_logits,
        "",
    ),
    PublicCase(
        "multi_hot_targets_to_cross_entropy",
        "https://discuss.pytorch.org/t/using-bcewithlogisloss-for-multi-label-classification/"
        "67011 (you can't use CrossEntropyLoss to do multi-label classification)",
        (mistake("multi-hot targets to softmax cross-entropy", "multi_hot_targets"),),
        _multi_hot_ce,
        "",
    ),
    PublicCase(
        "class_weights_proportional_to_counts",
        "https://discuss.pytorch.org/t/what-is-the-weight-values-mean-in-torch-nn-"
        "crossentropyloss/11455 (weights go to the rare classes: 1/class_size)",
        (mistake("class weights favour the majority class", "class_weight_favours_majority"),),
        _class_weight_by_frequency,
        "",
        balanced=True,
    ),
    PublicCase(
        "deep_sigmoid_mlp",
        "https://github.com/juebrauer/code_jb (a deep sigmoid stack: mean |grad| of the first "
        "layers is zero to 10 digits)",
        (VANISHING,),
        _deep_sigmoid,
        "",
    ),
    PublicCase(
        "view_instead_of_transpose",
        f"{KARPATHY} (the tweet: 'thinking view() and permute() are the same thing')",
        (mistake("view() mixes examples across the batch", "batch_leak", "dependency_leak"),),
        _view_not_transpose,
        "",
    ),
    PublicCase(
        "zero_grad_between_backward_and_step",
        "https://velog.io/@rhss10 (optimizer.zero_grad() anywhere but between loss.backward() "
        "and optimizer.step())",
        (mistake("gradients cleared before the step", "zero_grad_before_step", "stale_grad"),),
        _zero_grad_between,
        "",
        handed_after=3,
    ),
    PublicCase(
        "warmup_scheduler_never_stepped",
        "https://runebook.dev/en/docs/pytorch/generated/torch.optim.lr_scheduler.steplr/"
        "torch.optim.lr_scheduler.StepLR (you forgot to call scheduler.step())",
        (mistake("warmup never stepped: the lr stays at its first value", "lr_decayed"),),
        _warmup_never_stepped,
        "",
        handed_after=3,
    ),
    PublicCase(
        "no_zero_grad_and_steplr_per_batch",
        "apxml zeroing-gradients + runebook LRScheduler.step (both above), in one loop",
        (STALE_GRAD, LR_DECAYED),
        _no_zero_grad_and_steplr,
        "",
        handed_after=100,
    ),
    PublicCase(
        "softmax_and_unscaled_features",
        f"{CE_NOT_DECREASING} + the robotsatlas unscaled-inputs trap, in one model",
        (DOUBLE_SOFTMAX, RAW_INPUTS),
        _softmax_and_raw,
        "",
    ),
    PublicCase(
        "python_list_and_lr_too_high",
        "theflyingbirds.in (layers in a list) + discuss 43814 (lr too high), in one model",
        (NOT_REGISTERED, LR_HIGH),
        _list_and_lr,
        "",
    ),
)
"""23 cases, 29 bugs (4 cases hold two to four bugs at once)."""

MEASURED: dict[str, str] = {
    "softmax_into_cross_entropy": "bug error 0.344 vs fix 0.203 (first loss 2.31 / 2.34)",
    "layers_in_python_list": "bug error 0.688 vs fix 0.203 (first loss 2.34 / 2.34)",
    "layer_built_in_forward": "bug error 0.844 vs fix 0.203 (first loss 2.3 / 2.34)",
    "forgot_zero_grad": "bug error 0.859 vs fix 0.219 (first loss 2.34 / 2.34)",
    "steplr_stepped_per_batch": "bug error 0.641 vs fix 0.234 (first loss 2.34 / 2.34)",
    "lstm_reads_state_after_padding": "bug error 0.125 vs fix 0 (first loss 1.41 / 1.41)",
    "mse_target_broadcast": "bug error 0.907 vs fix 0.0146 (first loss 1.2 / 1.16)",
    "loss_clipped_instead_of_gradients": "bug error 0.938 vs fix 0.203 (first loss 1 / 2.34)",
    "karpathy_four_at_once": "bug error 0.922 vs fix 0.438 (first loss 2.3 / 2.31)",
    "nll_loss_on_raw_scores": "bug error 0.922 vs fix 0.203 (first loss 0.0264 / 2.34)",
    "unscaled_features": "bug error 0.375 vs fix 0.25 (first loss 15.8 / 2.34)",
    "sgd_lr_far_too_high": "bug error 0.844 vs fix 0.219 (first loss 2.34 / 2.34)",
    "loss_requires_grad_hides_cut": "bug error 0.938 vs fix 0.203 (first loss 2.34 / 2.34)",
    "sigmoid_into_bce_with_logits": "bug error 0.659 vs fix 0.107 (first loss 0.821 / 0.72)",
    "multi_hot_targets_to_cross_entropy": "bug error 0.154 vs fix 0.107 (first loss 3.56 / 0.72)",
    "class_weights_proportional_to_counts": "bug error 0.667 vs fix 0.145 (first loss 0.997 / 1.13)",
    "deep_sigmoid_mlp": "bug error 0.844 vs fix 0.422 (first loss 2.34 / 2.31)",
    "view_instead_of_transpose": "bug error 0.656 vs fix 0.438 (first loss 1.39 / 1.37)",
    "zero_grad_between_backward_and_step": "bug error 0.938 vs fix 0.203 (first loss 2.34 / 2.34)",
    "warmup_scheduler_never_stepped": "bug error 0.938 vs fix 0.219 (first loss 2.34 / 2.34)",
    "no_zero_grad_and_steplr_per_batch": "bug error 0.516 vs fix 0.234 (first loss 2.34 / 2.34)",
    "softmax_and_unscaled_features": "bug error 0.484 vs fix 0.203 (first loss 2.37 / 2.34)",
    "python_list_and_lr_too_high": "bug error 0.484 vs fix 0.219 (first loss 2.34 / 2.34)",
}
"""Recorded by ``python -m tests.triage_public.measure heldout`` (torch 2.13 CPU, 1 thread):
held-out error after 300 steps of the user's loop, the bug against its accepted fix."""

HELDOUT = tuple(dataclasses.replace(case, measured=MEASURED[case.name]) for case in HELDOUT)
