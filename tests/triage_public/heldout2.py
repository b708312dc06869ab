"""The second held-out half of the public bug zoo: FROZEN (written and committed before triage
was changed for its multi-bug naming; the first held-out half, ``heldout.py``, had been read).

Every case ports a mistake from a public report that neither ``heldout.py`` nor
``development.py`` uses (``source``) to a seeded CPU repro that keeps the mistake exactly;
``build(False)`` is the accepted fix. ``measured`` is the ground truth from
``python -m tests.triage_public.measure heldout2`` (error on held-out data after
``MEASURE_STEPS`` steps of the user's own loop, bug vs fix). Only
``tests/triage_public/test_heldout2.py`` and ``benchmarks/bench_triage.py`` run triage on these
cases, once, at the end of a piece of work: do not tune triage to them.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from ._kit import (
    CLASSES,
    FEATURES,
    PublicCase,
    Setup,
    adam,
    mistake,
    mlp,
    plain_setup,
    sgd,
    tabular,
)

DOUBLE_SOFTMAX = mistake("softmax output fed to CrossEntropyLoss", "double_softmax")
NOT_REGISTERED = mistake(
    "layers the forward uses are not model parameters", "params_not_registered"
)
NOT_IN_OPTIMIZER = mistake(
    "trainable parameters left out of the optimizer", "trainable_params_not_in_optimizer"
)
STALE_GRAD = mistake("optimizer.zero_grad() never called: .grad accumulates", "stale_grad")
LR_DECAYED = mistake("the lr was decayed far below the one chosen", "lr_decayed")
VANISHING = mistake("deep sigmoid stack: gradients vanish", "grad_vanishing")
RAW_INPUTS = mistake("inputs not standardised", "input_not_standardized", "unscaled_inputs")
LR_HIGH = mistake("lr far too high", "lr_too_high", "loss_diverged", "update_ratio_too_high")

OPENILLUMI = "https://openillumi.com/en/en-pytorch-crossentropy-logits-nllloss-mechanism"
HVPNET = "https://github.com/zjunlp/HVPNeT/issues/5"
LIST_TIMES_N = "https://github.com/mikeizbicki/cmc-csci181-deeplearning/issues/7"
NAN_LR = "https://datascience.stackexchange.com/questions/15962"
SIGMOID_TO_RELU = "https://github.com/aymericdamien/TensorFlow-Examples/pull/146"
NO_ZERO_GRAD = "https://github.com/IDEA-Research/DN-DETR/issues/19"
SCHEDULER_PER_STEP = "https://github.com/pytorch/vision/issues/1261"
UNSCALED = "https://stats.stackexchange.com/questions/259286"


# ----- models that carry the users' mistakes ----------------------------------------------------
class RepeatedListMLP(nn.Module):
    """``self.hidden = n * [nn.Linear(64, 64)]``: a plain list holding one layer n times (bug:
    unregistered, and one weight shared by every repeat) vs an nn.ModuleList of n layers."""

    def __init__(self, registered: bool, *, act: type[nn.Module] = nn.ReLU, repeats: int = 2):
        super().__init__()
        torch.manual_seed(3)
        self.first = nn.Linear(FEATURES, 64)
        if registered:
            self.hidden: list[nn.Module] | nn.ModuleList = nn.ModuleList(
                nn.Linear(64, 64) for _ in range(repeats)
            )
        else:
            self.hidden = repeats * [nn.Linear(64, 64)]
        self.act = act()
        self.head = nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.first(x))
        for layer in self.hidden:
            x = self.act(layer(x))
        return self.head(x)


class EncoderHead(nn.Module):
    """A one-layer encoder and a two-layer classifier head (the part the bug leaves out of the
    optimizer: HVPNeT's fc and crf)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.encoder = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def grouped_adam(model: EncoderHead, *, head_included: bool) -> torch.optim.Optimizer:
    """HVPNeT's pattern: param groups appended one by one; the bug forgets the head's group."""
    groups = [{"params": list(model.encoder.parameters())}]
    if head_included:
        groups.append({"params": list(model.head.parameters())})
    return torch.optim.Adam(groups, lr=1e-3)


def poly_per_step(setup: Setup, broken: bool, epochs: int = 30) -> Setup:
    """A polynomial decay written for ``epochs`` epochs; the bug steps it after every batch."""
    setup.scheduler = torch.optim.lr_scheduler.LambdaLR(
        setup.optimizer, lambda e: max(0.0, 1 - e / epochs) ** 0.9
    )
    setup.scheduler_per_batch = broken
    return setup


# ----- builders (broken: the mistake; else the accepted fix) ----------------------------------
def _softmax_wide_mlp(broken: bool) -> Setup:
    model = mlp((FEATURES, 128, CLASSES), out=nn.Softmax(dim=1) if broken else None, seed=3)
    return plain_setup(model, tabular, optimizer=lambda m: sgd(m, 0.02))


def _list_times_n(broken: bool) -> Setup:
    return plain_setup(RepeatedListMLP(registered=not broken), tabular)


def _head_not_in_optimizer(broken: bool) -> Setup:
    model = EncoderHead()
    return Setup(
        model, tabular, nn.CrossEntropyLoss(), grouped_adam(model, head_included=not broken)
    )


def _adam_lr_high(broken: bool) -> Setup:
    return plain_setup(mlp(seed=3), tabular, optimizer=lambda m: adam(m, 0.3 if broken else 1e-3))


def _deep_sigmoid_sgd(broken: bool) -> Setup:
    act = nn.Sigmoid if broken else nn.ReLU
    return plain_setup(
        mlp((FEATURES, 40, 40, 40, 40, 40, 40, CLASSES), act=act, seed=3),
        tabular,
        optimizer=lambda m: sgd(m, 0.1),
    )


def _no_zero_grad(broken: bool) -> Setup:
    return plain_setup(
        mlp((FEATURES, 48, 48, CLASSES), seed=3),
        tabular,
        optimizer=lambda m: sgd(m, 0.02),
        zero_grad=not broken,
    )


def _poly_per_step(broken: bool) -> Setup:
    return poly_per_step(
        plain_setup(mlp(seed=3), tabular, optimizer=lambda m: sgd(m, 0.05)), broken
    )


def _list_times_n_sigmoid(broken: bool) -> Setup:
    model = RepeatedListMLP(not broken, act=nn.Sigmoid if broken else nn.ReLU, repeats=5)
    return plain_setup(model, tabular, optimizer=lambda m: sgd(m, 0.1))


def _softmax_no_zero_grad_lr_high(broken: bool) -> Setup:
    return plain_setup(
        mlp(seed=3, out=nn.Softmax(dim=1) if broken else None),
        tabular,
        optimizer=lambda m: sgd(m, 3.0 if broken else 0.05),
        zero_grad=not broken,
    )


def _list_and_poly_per_step(broken: bool) -> Setup:
    model = RepeatedListMLP(registered=not broken)
    return poly_per_step(plain_setup(model, tabular, optimizer=lambda m: sgd(m, 0.05)), broken)


def _head_out_and_raw_features(broken: bool) -> Setup:
    model = EncoderHead()

    def data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        return tabular(seed, scale=100.0, shift=50.0) if broken else tabular(seed)

    return Setup(model, data, nn.CrossEntropyLoss(), grouped_adam(model, head_included=not broken))


def _sigmoid_deep_and_lr_high(broken: bool) -> Setup:
    act = nn.Sigmoid if broken else nn.ReLU
    return plain_setup(
        mlp((FEATURES, 40, 40, 40, 40, 40, 40, CLASSES), act=act, seed=4),
        tabular,
        optimizer=lambda m: adam(m, 0.5 if broken else 1e-3),
    )


HELDOUT2: tuple[PublicCase, ...] = (
    PublicCase(
        "softmax_head_into_ce_sgd",
        f"{OPENILLUMI} (a Softmax before nn.CrossEntropyLoss is applied twice: feed logits)",
        (DOUBLE_SOFTMAX,),
        _softmax_wide_mlp,
        "",
    ),
    PublicCase(
        "layer_list_times_n",
        f"{LIST_TIMES_N} (self.cnns = (n-1)*[nn.Conv1d(...)]: a plain list, one layer repeated)",
        (NOT_REGISTERED,),
        _list_times_n,
        "",
    ),
    PublicCase(
        "head_group_left_out_of_optimizer",
        f"{HVPNET} (the crf and fc parameters were never appended to the optimizer's groups)",
        (NOT_IN_OPTIMIZER,),
        _head_not_in_optimizer,
        "",
    ),
    PublicCase(
        "adam_lr_far_too_high",
        f"{NAN_LR} (the loss rose to nan at one lr; an order of magnitude lower trained)",
        (LR_HIGH,),
        _adam_lr_high,
        "",
    ),
    PublicCase(
        "deep_sigmoid_stack_sgd",
        f"{SIGMOID_TO_RELU} (use ReLU instead of sigmoid: the vanishing gradient problem)",
        (VANISHING,),
        _deep_sigmoid_sgd,
        "",
    ),
    PublicCase(
        "zero_grad_missing",
        f"{NO_ZERO_GRAD} (the loop never calls optimizer.zero_grad(): gradients accumulate)",
        (STALE_GRAD,),
        _no_zero_grad,
        "",
        handed_after=4,
    ),
    PublicCase(
        "poly_decay_stepped_per_batch",
        f"{SCHEDULER_PER_STEP} (the lr scheduler is stepped at each batch, not each epoch)",
        (LR_DECAYED,),
        _poly_per_step,
        "",
        handed_after=40,
    ),
    PublicCase(
        "list_times_n_of_sigmoid_layers",
        f"{LIST_TIMES_N} + {SIGMOID_TO_RELU}: a repeated plain list of sigmoid layers",
        (NOT_REGISTERED, VANISHING),
        _list_times_n_sigmoid,
        "",
    ),
    PublicCase(
        "softmax_no_zero_grad_lr_high",
        f"{OPENILLUMI} + {NO_ZERO_GRAD} + {NAN_LR}, in one loop",
        (DOUBLE_SOFTMAX, STALE_GRAD, LR_HIGH),
        _softmax_no_zero_grad_lr_high,
        "",
        handed_after=3,
    ),
    PublicCase(
        "list_times_n_and_poly_per_batch",
        f"{LIST_TIMES_N} + {SCHEDULER_PER_STEP}, in one loop",
        (NOT_REGISTERED, LR_DECAYED),
        _list_and_poly_per_step,
        "",
        handed_after=40,
    ),
    PublicCase(
        "head_left_out_and_raw_features",
        f"{HVPNET} + {UNSCALED} (inputs on a wide range were untrainable until normalised)",
        (NOT_IN_OPTIMIZER, RAW_INPUTS),
        _head_out_and_raw_features,
        "",
    ),
    PublicCase(
        "deep_sigmoid_and_adam_lr_high",
        f"{SIGMOID_TO_RELU} + {NAN_LR}, in one model",
        (VANISHING, LR_HIGH),
        _sigmoid_deep_and_lr_high,
        "",
    ),
)
"""12 cases, 18 bugs (5 cases hold two or three bugs at once)."""

MEASURED: dict[str, str] = {
    "softmax_head_into_ce_sgd": "bug error 0.453 vs fix 0.219 (first loss 2.3 / 2.31)",
    "layer_list_times_n": "bug error 0.547 vs fix 0.312 (first loss 2.31 / 2.3)",
    "head_group_left_out_of_optimizer": "bug error 0.656 vs fix 0.312 (first loss 2.31 / 2.31)",
    "adam_lr_far_too_high": "bug error 0.844 vs fix 0.25 (first loss 2.31 / 2.31)",
    "deep_sigmoid_stack_sgd": "bug error 0.844 vs fix 0.516 (first loss 2.3 / 2.33)",
    "zero_grad_missing": "bug error 0.906 vs fix 0.281 (first loss 2.29 / 2.29)",
    "poly_decay_stepped_per_batch": "bug error 0.75 vs fix 0.203 (first loss 2.31 / 2.31)",
    "list_times_n_of_sigmoid_layers": "bug error 0.844 vs fix 0.328 (first loss 2.3 / 2.31)",
    "softmax_no_zero_grad_lr_high": "bug error 0.844 vs fix 0.188 (first loss 2.3 / 2.31)",
    "list_times_n_and_poly_per_batch": "bug error 0.844 vs fix 0.234 (first loss 2.31 / 2.3)",
    "head_left_out_and_raw_features": "bug error 0.703 vs fix 0.312 (first loss 13.1 / 2.31)",
    "deep_sigmoid_and_adam_lr_high": "bug error 0.969 vs fix 0.562 (first loss 2.41 / 2.34)",
}
"""Recorded by ``python -m tests.triage_public.measure heldout2`` (torch 2.13 CPU, 1 thread):
held-out error after 300 steps of the user's loop, the bug against its accepted fix."""

HELDOUT2 = tuple(dataclasses.replace(case, measured=MEASURED[case.name]) for case in HELDOUT2)
