"""The development half of the public bug zoo: the cases triage is tuned on.

Same contract as ``heldout.py`` (each ports a publicly reported mistake, with the accepted fix
as its twin and the ground truth measured by ``measure.py``), but other variants of the
mistakes: other models, optimizers and spellings, so that a rule tuned here is tried on the
held-out half unseen.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ._kit import (
    CLASSES,
    FEATURES,
    PublicCase,
    RNNClassifier,
    Setup,
    adam,
    images,
    imbalanced,
    mistake,
    mlp,
    multilabel,
    padded_tokens,
    plain_setup,
    regression,
    sgd,
    tabular,
)

KARPATHY = "https://karpathy.github.io/2019/04/25/recipe/"
CE_NOT_DECREASING = "https://discuss.pytorch.org/t/cross-entropy-loss-is-not-decreasing/43814/16"
FORWARD_LAYERS = "https://thecodeforge.io/ml-ai/pytorch-neural-network/"
SCHEDULER_STEP = (
    "https://runebook.dev/en/docs/pytorch/generated/torch.optim.lr_scheduler.lrscheduler/"
    "torch.optim.lr_scheduler.LRScheduler.step"
)

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


class DictMLP(nn.Module):
    """Hidden layers kept in a plain dict (bug) or an nn.ModuleDict (fix)."""

    def __init__(self, registered: bool) -> None:
        super().__init__()
        torch.manual_seed(1)
        layers = {"a": nn.Linear(FEATURES, 64), "b": nn.Linear(64, 64)}
        self.layers = nn.ModuleDict(layers) if registered else layers
        self.head = nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.layers["b"](torch.relu(self.layers["a"](x)))))


class TupleMLP(nn.Module):
    """Hidden layers kept in a tuple attribute (bug) or nn.Sequential (fix)."""

    def __init__(self, registered: bool) -> None:
        super().__init__()
        torch.manual_seed(2)
        blocks = (nn.Linear(FEATURES, 48), nn.Linear(48, 48))
        self.blocks = nn.Sequential(*blocks) if registered else blocks
        self.head = nn.Linear(48, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.relu(block(x))
        return self.head(x)


class HeadInForward(nn.Module):
    """The output layer is built in forward with its input size read from the tensor."""

    def __init__(self, in_init: bool) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.body = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU())
        self.head = nn.Linear(64, CLASSES) if in_init else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        head = self.head if self.head is not None else nn.Linear(h.shape[1], CLASSES)
        return head(h)


class FlattenAcrossBatch(nn.Module):
    """CNN whose flatten is ``x.view(-1, 64)`` written for a (C, H, W) order it no longer has
    (bug: ``x.permute(1, 0, 2, 3).reshape(-1, ...)`` mixes examples) vs ``x.flatten(1)``."""

    def __init__(self, broken: bool) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.conv = nn.Conv2d(1, 16, 3, padding=1)
        self.head = nn.Linear(16 * 4, 4)
        self.broken = broken

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.adaptive_avg_pool2d(torch.relu(self.conv(x)), 2)
        flat = h.permute(1, 0, 2, 3).reshape(h.shape[0], -1) if self.broken else h.flatten(1)
        return self.head(flat)


def nll_function(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.nll_loss(out, y)


def nll_on_probabilities(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """NLL on softmax probabilities (log missing)."""
    return F.nll_loss(out.softmax(dim=1), y)


def detached_logits_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = F.cross_entropy(torch.tensor(out.tolist()), y)
    loss.requires_grad_(True)
    return loss


def clamped_ce(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y, reduction="none").clamp(max=2.0).mean()


def _sgd_softmax(broken: bool) -> Setup:
    model = mlp(seed=1, out=nn.Softmax(dim=1) if broken else None)
    return plain_setup(model, tabular, optimizer=lambda m: sgd(m, 0.05))


def _log_softmax_over_batch(broken: bool) -> Setup:
    return plain_setup(
        mlp(seed=2, out=nn.LogSoftmax(dim=0 if broken else 1)), tabular, nn.NLLLoss()
    )


def _dict(broken: bool) -> Setup:
    return plain_setup(DictMLP(registered=not broken), tabular)


def _tuple(broken: bool) -> Setup:
    return plain_setup(TupleMLP(registered=not broken), tabular)


def _head_in_forward(broken: bool) -> Setup:
    return plain_setup(HeadInForward(in_init=not broken), tabular)


def _no_zero_grad_adam(broken: bool) -> Setup:
    return plain_setup(mlp(seed=1), tabular, zero_grad=not broken)


def _no_zero_grad_cnn(broken: bool) -> Setup:
    return plain_setup(mlp(seed=2), tabular, optimizer=lambda m: sgd(m, 0.01), zero_grad=not broken)


def _exponential_per_batch(broken: bool) -> Setup:
    setup = plain_setup(mlp(seed=1), tabular, optimizer=lambda m: adam(m, 1e-3))
    setup.scheduler = torch.optim.lr_scheduler.ExponentialLR(setup.optimizer, gamma=0.9)
    setup.scheduler_per_batch = broken
    return setup


def _multistep_per_batch(broken: bool) -> Setup:
    setup = plain_setup(mlp(seed=2), tabular, optimizer=lambda m: sgd(m, 0.05))
    setup.scheduler = torch.optim.lr_scheduler.MultiStepLR(
        setup.optimizer, milestones=[10, 20, 30], gamma=0.1
    )
    setup.scheduler_per_batch = broken
    return setup


def _gru_padding(broken: bool) -> Setup:
    return plain_setup(
        RNNClassifier(cell=nn.GRU, read="padded_end" if broken else "length"), padded_tokens
    )


def _l1_broadcast(broken: bool) -> Setup:
    def data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = regression(seed)
        return x, (y.squeeze(1) if broken else y)

    return plain_setup(mlp((FEATURES, 32, 1), seed=1), data, nn.L1Loss())


def _nll_function(broken: bool) -> Setup:
    return plain_setup(
        mlp(seed=2),
        tabular,
        nll_function if broken else nn.CrossEntropyLoss(),
        optimizer=lambda m: sgd(m, 0.05),
    )


def _nll_on_probabilities(broken: bool) -> Setup:
    return plain_setup(
        mlp(seed=1), tabular, nll_on_probabilities if broken else nn.CrossEntropyLoss()
    )


def _raw_pixels_mlp(broken: bool) -> Setup:
    def data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = images(seed, raw=broken)
        return x.flatten(1), y

    return plain_setup(mlp((64, 64, 4), seed=1), data, optimizer=lambda m: sgd(m, 0.01))


def _adam_lr_high(broken: bool) -> Setup:
    return plain_setup(mlp(seed=1), tabular, optimizer=lambda m: adam(m, 1.0 if broken else 1e-3))


def _detached_logits(broken: bool) -> Setup:
    return plain_setup(mlp(seed=1), tabular, detached_logits_loss if broken else None)


def _sigmoid_bce_logits_sgd(broken: bool) -> Setup:
    model = mlp((FEATURES, 48, 48, 6), seed=1, out=nn.Sigmoid() if broken else None)
    return plain_setup(model, multilabel, nn.BCEWithLogitsLoss(), optimizer=lambda m: sgd(m, 0.1))


def _multi_hot_wide(broken: bool) -> Setup:
    loss = nn.CrossEntropyLoss() if broken else nn.MultiLabelSoftMarginLoss()
    return plain_setup(mlp((FEATURES, 32, 6), seed=1), multilabel, loss)


def _class_weight_counts(broken: bool) -> Setup:
    counts = torch.tensor([51.0, 7.0, 6.0])
    weight = counts / counts.sum() if broken else counts.max() / counts
    return plain_setup(
        mlp((FEATURES, 32, 3), seed=1), imbalanced, nn.CrossEntropyLoss(weight=weight)
    )


def _deep_tanh_sigmoid(broken: bool) -> Setup:
    act = nn.Sigmoid if broken else nn.ReLU
    return plain_setup(
        mlp((FEATURES, 48, 48, 48, 48, 48, CLASSES), act=act, seed=1),
        tabular,
        optimizer=lambda m: sgd(m, 0.05),
    )


def _flatten_mixes_batch(broken: bool) -> Setup:
    return plain_setup(FlattenAcrossBatch(broken), images)


def _clamped_mse(broken: bool) -> Setup:
    return plain_setup(mlp(seed=2), tabular, clamped_ce if broken else nn.CrossEntropyLoss())


def _steplr_adam_per_batch(broken: bool) -> Setup:
    setup = plain_setup(mlp(seed=2), tabular, optimizer=lambda m: adam(m, 1e-3))
    setup.scheduler = torch.optim.lr_scheduler.StepLR(setup.optimizer, step_size=10, gamma=0.1)
    setup.scheduler_per_batch = broken
    return setup


def _softmax_and_lr_low_no_zero(broken: bool) -> Setup:
    return plain_setup(
        mlp(seed=1, out=nn.Softmax(dim=1) if broken else None),
        tabular,
        optimizer=lambda m: sgd(m, 0.05),
        zero_grad=not broken,
    )


def _dict_and_raw(broken: bool) -> Setup:
    def data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        return tabular(seed, scale=50.0, shift=200.0) if broken else tabular(seed)

    return plain_setup(DictMLP(registered=not broken), data)


def _sigmoid_deep_and_decayed(broken: bool) -> Setup:
    setup = _deep_tanh_sigmoid(broken)
    setup.scheduler = torch.optim.lr_scheduler.StepLR(setup.optimizer, step_size=20, gamma=0.1)
    setup.scheduler_per_batch = broken
    return setup


def _sgd_lr_two(broken: bool) -> Setup:
    return plain_setup(mlp(seed=2), tabular, optimizer=lambda m: sgd(m, 2.0 if broken else 0.05))


class PlainListStack(nn.Module):
    """A stack of ``depth`` hidden layers kept in a plain list (bug) or an nn.ModuleList (fix),
    with the activation given."""

    def __init__(self, registered: bool, act: type[nn.Module], depth: int = 2) -> None:
        super().__init__()
        torch.manual_seed(4)
        self.first = nn.Linear(FEATURES, 48)
        hidden = [nn.Linear(48, 48) for _ in range(depth)]
        self.hidden = nn.ModuleList(hidden) if registered else hidden
        self.act = act()
        self.head = nn.Linear(48, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.first(x))
        for layer in self.hidden:
            x = self.act(layer(x))
        return self.head(x)


class SharedStack(nn.Module):
    """``[nn.Linear(48, 48)] * 4`` in a plain list with sigmoids (bug: one unregistered layer
    repeated) vs four distinct registered layers with ReLU (fix)."""

    def __init__(self, broken: bool) -> None:
        super().__init__()
        torch.manual_seed(6)
        self.first = nn.Linear(FEATURES, 48)
        if broken:
            self.stack: list[nn.Module] | nn.ModuleList = [nn.Linear(48, 48)] * 4
        else:
            self.stack = nn.ModuleList(nn.Linear(48, 48) for _ in range(4))
        self.act = nn.Sigmoid() if broken else nn.ReLU()
        self.head = nn.Linear(48, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.first(x))
        for layer in self.stack:
            x = self.act(layer(x))
        return self.head(x)


def _shared_sigmoid_stack(broken: bool) -> Setup:
    return plain_setup(SharedStack(broken), tabular, optimizer=lambda m: sgd(m, 0.05))


def _plain_list_and_sgd_lr_high(broken: bool) -> Setup:
    return plain_setup(
        PlainListStack(not broken, nn.ReLU),
        tabular,
        optimizer=lambda m: sgd(m, 4.0 if broken else 0.05),
    )


def _plain_list_of_sigmoid_layers(broken: bool) -> Setup:
    model = PlainListStack(not broken, nn.Sigmoid if broken else nn.ReLU, depth=5)
    return plain_setup(model, tabular, optimizer=lambda m: sgd(m, 0.05))


def _softmax_deep_sigmoid_no_zero_grad(broken: bool) -> Setup:
    act = nn.Sigmoid if broken else nn.ReLU
    model = mlp(
        (FEATURES, 48, 48, 48, 48, 48, 48, CLASSES),
        act=act,
        out=nn.Softmax(dim=1) if broken else None,
        seed=4,
    )
    return plain_setup(model, tabular, optimizer=lambda m: sgd(m, 0.05), zero_grad=not broken)


def _four_at_once_dropout(broken: bool) -> Setup:
    """softmax into CrossEntropyLoss + model.eval() before each step + a deep sigmoid MLP with
    dropout + no zero_grad(); the fix: logits, model.train(), ReLU, zero_grad()."""
    model = mlp(
        (FEATURES, 48, 48, 48, 48, 48, CLASSES),
        act=nn.Sigmoid if broken else nn.ReLU,
        dropout=0.2,
        out=nn.Softmax(dim=1) if broken else None,
        seed=5,
    )
    return plain_setup(
        model,
        tabular,
        optimizer=lambda m: sgd(m, 0.05),
        eval_in_loop=broken,
        zero_grad=not broken,
    )


def _softmax_and_adam_lr_high(broken: bool) -> Setup:
    model = mlp(seed=4, out=nn.Softmax(dim=1) if broken else None)
    return plain_setup(model, tabular, optimizer=lambda m: adam(m, 0.5 if broken else 1e-3))


def _softmax_no_zero_grad_sgd_lr_high(broken: bool) -> Setup:
    model = mlp((FEATURES, 48, 48, CLASSES), seed=6, out=nn.Softmax(dim=1) if broken else None)
    return plain_setup(
        model, tabular, optimizer=lambda m: sgd(m, 5.0 if broken else 0.05), zero_grad=not broken
    )


def _tanh_deep_and_adam_lr_high(broken: bool) -> Setup:
    act = nn.Sigmoid if broken else nn.ReLU
    return plain_setup(
        mlp((FEATURES, 48, 48, 48, 48, 48, 48, CLASSES), act=act, seed=5),
        tabular,
        optimizer=lambda m: adam(m, 0.3 if broken else 1e-3),
    )


DEVELOPMENT: tuple[PublicCase, ...] = (
    PublicCase("sgd_softmax_into_ce", CE_NOT_DECREASING, (DOUBLE_SOFTMAX,), _sgd_softmax, ""),
    PublicCase(
        "log_softmax_over_the_batch",
        "https://runebook.dev/en/articles/pytorch/generated/torch.nn.softmax (calculating "
        "softmax across the batch dimension instead of the class dimension)",
        (mistake("log_softmax over dim 0 mixes the batch", "normalised_over_batch", "batch_leak"),),
        _log_softmax_over_batch,
        "",
    ),
    PublicCase(
        "layers_in_plain_dict",
        "https://shihaizhou.com/2020/05/17/Pytorch-nn-ModuleList-and-nn-Sequential/ "
        "(.parameters() ignores plain containers)",
        (NOT_REGISTERED,),
        _dict,
        "",
    ),
    PublicCase(
        "layers_in_tuple",
        "https://runebook.dev/zh/docs/pytorch/generated/torch.nn.modulelist/torch.nn.ModuleList",
        (NOT_REGISTERED,),
        _tuple,
        "",
    ),
    PublicCase(
        "head_built_in_forward",
        f"{FORWARD_LAYERS} (layers in forward() create new weights each batch)",
        (NOT_REGISTERED,),
        _head_in_forward,
        "",
    ),
    PublicCase(
        "forgot_zero_grad_adam",
        "https://theneuralbase.com/pytorch/learn/beginner/optimizer-zero-grad-clearing-old-"
        "gradients/",
        (STALE_GRAD,),
        _no_zero_grad_adam,
        "",
        handed_after=5,
    ),
    PublicCase(
        "forgot_zero_grad_sgd_001",
        "https://preproom.ai/learn/model-training-pytorch.html (gradients add up by default)",
        (STALE_GRAD,),
        _no_zero_grad_cnn,
        "",
        handed_after=5,
    ),
    PublicCase(
        "exponential_lr_per_batch",
        SCHEDULER_STEP,
        (LR_DECAYED,),
        _exponential_per_batch,
        "",
        handed_after=60,
    ),
    PublicCase(
        "multistep_lr_per_batch",
        "http://theneuralbase.com/pytorch/qna/how-to-use-learning-rate-scheduler-in-pytorch/ "
        "(scheduler.step() inside the batch loop destroys convergence)",
        (LR_DECAYED,),
        _multistep_per_batch,
        "",
        handed_after=40,
    ),
    PublicCase(
        "gru_reads_state_after_padding",
        "https://yumpu.com/en/document/view/68632516/daniel-voigt-godoy-deep-learning-with-"
        "pytorch-step-by-step-a-beginners-guide-leanpub/681 (padded points change the hidden "
        "state)",
        (mistake("the classifier reads the RNN state after the padding", "reads_padding"),),
        _gru_padding,
        "",
    ),
    PublicCase(
        "l1_target_broadcast",
        "https://github.com/deepset-ai/FARM/issues/229 (target (32, 1) vs input (32,))",
        (mistake("(N, 1) output vs (N,) target broadcast", "target_broadcast"),),
        _l1_broadcast,
        "",
    ),
    PublicCase(
        "sgd_nll_function_on_scores",
        "https://runebook.dev/en/docs/pytorch/generated/torch.nn.softmax",
        (mistake("nll_loss on raw scores in a plain function", "nll_on_scores"),),
        _nll_function,
        "",
    ),
    PublicCase(
        "nll_on_softmax_probabilities",
        "https://runebook.dev/en/articles/pytorch/generated/torch.nn.softmax (Softmax + NLLLoss)",
        (mistake("nll_loss on probabilities", "nll_on_probabilities"),),
        _nll_on_probabilities,
        "",
    ),
    PublicCase(
        "raw_pixels_to_mlp",
        f"{KARPATHY} (become one with the data: check the input scale)",
        (RAW_INPUTS,),
        _raw_pixels_mlp,
        "",
    ),
    PublicCase(
        "adam_lr_one",
        f"{CE_NOT_DECREASING} (use a smaller learning rate)",
        (LR_HIGH,),
        _adam_lr_high,
        "",
    ),
    PublicCase(
        "sgd_momentum_lr_two",
        f"{CE_NOT_DECREASING} (use a smaller learning rate; added after the held-out run: "
        "SGD-momentum at lr 1 there got no finding)",
        (LR_HIGH,),
        _sgd_lr_two,
        "",
    ),
    PublicCase(
        "tolist_then_requires_grad",
        "https://jishuzhan.net/article/1722447953278275585 (element 0 of tensors does not "
        "require grad: the tensor left the graph)",
        (mistake("nothing of the model reaches the loss", "loss_detached", "no_gradient"),),
        _detached_logits,
        "",
    ),
    PublicCase(
        "sgd_sigmoid_into_bce_with_logits",
        "https://runebook.dev/en/docs/pytorch/generated/torch.sigmoid",
        (mistake("sigmoid output fed to BCEWithLogitsLoss", "double_sigmoid"),),
        _sigmoid_bce_logits_sgd,
        "",
    ),
    PublicCase(
        "multi_hot_to_ce_vs_soft_margin",
        "https://discuss.pytorch.org/t/converting-single-label-classification-to-multi-label-"
        "classification/148272",
        (mistake("multi-hot targets to softmax cross-entropy", "multi_hot_targets"),),
        _multi_hot_wide,
        "",
    ),
    PublicCase(
        "class_weights_normalised_counts",
        "https://androidkt.com/how-to-use-class-weight-in-crossentropyloss-for-an-imbalanced-"
        "dataset/ (higher weight: more emphasis; the minority gets it)",
        (mistake("class weights favour the majority class", "class_weight_favours_majority"),),
        _class_weight_counts,
        "",
        balanced=True,
    ),
    PublicCase(
        "deep_sigmoid_mlp_48",
        "https://paudelanil9.com.np/posts/whysigmoidfails",
        (VANISHING,),
        _deep_tanh_sigmoid,
        "",
    ),
    PublicCase(
        "permute_then_reshape_mixes_batch",
        f"{KARPATHY} (view/permute)",
        (mistake("the reshape mixes examples across the batch", "batch_leak", "dependency_leak"),),
        _flatten_mixes_batch,
        "",
    ),
    PublicCase(
        "clamped_cross_entropy",
        f"{KARPATHY} (clipping the loss instead of the gradients)",
        (mistake("the loss is clamped: clamped examples give no gradient", "loss_clamped"),),
        _clamped_mse,
        "",
    ),
    PublicCase(
        "steplr_adam_per_batch",
        SCHEDULER_STEP,
        (LR_DECAYED,),
        _steplr_adam_per_batch,
        "",
        handed_after=40,
    ),
    PublicCase(
        "softmax_and_no_zero_grad",
        f"{KARPATHY} (mistakes 3 and 4 of the tweet at once)",
        (DOUBLE_SOFTMAX, STALE_GRAD),
        _softmax_and_lr_low_no_zero,
        "",
        handed_after=5,
    ),
    PublicCase(
        "dict_layers_and_raw_inputs",
        "shihaizhou.com (plain containers) + Karpathy (input scale), in one model",
        (NOT_REGISTERED, RAW_INPUTS),
        _dict_and_raw,
        "",
    ),
    PublicCase(
        "deep_sigmoid_and_steplr_per_batch",
        "paudelanil9.com.np (sigmoid) + runebook LRScheduler.step (per batch), in one loop",
        (VANISHING, LR_DECAYED),
        _sigmoid_deep_and_decayed,
        "",
        handed_after=60,
    ),
    PublicCase(
        "plain_list_and_sgd_lr_high",
        "https://github.com/dbgannon/NNets-and-Diffeqns/issues/1 (the Net held its layers in "
        "a list: no parameters) + https://github.com/MichalDanielDobrzanski/DeepLearningPython/"
        "issues/13 (use a smaller learning rate), in one model",
        (NOT_REGISTERED, LR_HIGH),
        _plain_list_and_sgd_lr_high,
        "",
    ),
    PublicCase(
        "plain_list_of_sigmoid_layers",
        "dbgannon/NNets-and-Diffeqns#1 (layers in a list) + https://github.com/rogertrullo/"
        "Receptive-Field-in-Pytorch/issues/3 (the gradient vanishes through sigmoids)",
        (NOT_REGISTERED, VANISHING),
        _plain_list_of_sigmoid_layers,
        "",
    ),
    PublicCase(
        "shared_sigmoid_layer_in_plain_list",
        "https://github.com/yaoppeng/U-Net_v2/issues/10 ([conv] * 4: one instance four times) "
        "+ https://github.com/acids-ircam/ddsp_pytorch/issues/37 (list multiplication shares "
        "the module) + rogertrullo/Receptive-Field-in-Pytorch#3 (sigmoid), kept in a list",
        (NOT_REGISTERED, VANISHING),
        _shared_sigmoid_stack,
        "",
    ),
    PublicCase(
        "softmax_deep_sigmoid_no_zero_grad",
        "https://openillumi.com/?p=73112 (softmax before CrossEntropyLoss) + rogertrullo/"
        "Receptive-Field-in-Pytorch#3 (sigmoid) + https://github.com/udacity/deep-learning-v2-"
        "pytorch/pull/160 (zero_grad missing), in one loop",
        (DOUBLE_SOFTMAX, VANISHING, STALE_GRAD),
        _softmax_deep_sigmoid_no_zero_grad,
        "",
        handed_after=3,
    ),
    PublicCase(
        "four_at_once_with_dropout",
        "openillumi.com/?p=73112 (softmax before CrossEntropyLoss) + https://mcklay.github.io/"
        "cnn-companion-book/chapter16 (train vs eval mode) + rogertrullo/Receptive-Field-in-"
        "Pytorch#3 (sigmoid) + udacity/deep-learning-v2-pytorch#160 (zero_grad), in one loop",
        (DOUBLE_SOFTMAX, IN_EVAL, VANISHING, STALE_GRAD),
        _four_at_once_dropout,
        "",
        handed_after=3,
    ),
    PublicCase(
        "softmax_and_adam_lr_high",
        "openillumi.com/?p=73112 + https://grindskills.com/cost-function-turning-into-nan-after-"
        "a-certain-number-of-iterations/ (the lr too large), in one model",
        (DOUBLE_SOFTMAX, LR_HIGH),
        _softmax_and_adam_lr_high,
        "",
    ),
    PublicCase(
        "softmax_no_zero_grad_sgd_lr_high",
        "https://openillumi.com/?p=73112 (softmax before CrossEntropyLoss) + https://github.com/LoreGoetschalckx/GANalyze/"
        "issues/7 (zero_grad is missing) + https://alexacabs.in/why-loss-become-nan-while-"
        "training.html (the learning rate too high), in one loop",
        (DOUBLE_SOFTMAX, STALE_GRAD, LR_HIGH),
        _softmax_no_zero_grad_sgd_lr_high,
        "",
        handed_after=3,
    ),
    PublicCase(
        "deep_sigmoid_and_adam_lr_high",
        "https://github.com/akash13singh/mxnet-for-cdl/issues/2 (sigmoid vs relu) + grindskills "
        "(the lr too large), in one model",
        (VANISHING, LR_HIGH),
        _tanh_deep_and_adam_lr_high,
        "",
    ),
)
"""35 cases, 50 bugs (11 cases hold two to four bugs at once)."""

MEASURED: dict[str, str] = {
    "sgd_momentum_lr_two": "bug error 0.844 vs fix 0.219 (first loss 2.28 / 2.28)",
    "sgd_softmax_into_ce": "bug error 0.469 vs fix 0.219 (first loss 2.3 / 2.3)",
    "log_softmax_over_the_batch": "bug error 0.297 vs fix 0.266 (first loss 4.16 / 2.28)",
    "layers_in_plain_dict": "bug error 0.672 vs fix 0.219 (first loss 2.3 / 2.3)",
    "layers_in_tuple": "bug error 0.781 vs fix 0.266 (first loss 2.29 / 2.29)",
    "head_built_in_forward": "bug error 0.969 vs fix 0.25 (first loss 2.34 / 2.34)",
    "forgot_zero_grad_adam": "bug error 0.469 vs fix 0.219 (first loss 2.3 / 2.3)",
    "forgot_zero_grad_sgd_001": "bug error 0.906 vs fix 0.25 (first loss 2.28 / 2.28)",
    "exponential_lr_per_batch": "bug error 0.875 vs fix 0.438 (first loss 2.3 / 2.3)",
    "multistep_lr_per_batch": "bug error 0.797 vs fix 0.25 (first loss 2.28 / 2.28)",
    "gru_reads_state_after_padding": "bug error 0.0938 vs fix 0 (first loss 1.4 / 1.41)",
    "l1_target_broadcast": "bug error 0.91 vs fix 0.0119 (first loss 0.847 / 0.855)",
    "sgd_nll_function_on_scores": "bug error 0.875 vs fix 0.219 (first loss -0.00785 / 2.28)",
    "nll_on_softmax_probabilities": "bug error 0.406 vs fix 0.219 (first loss -0.1 / 2.3)",
    "raw_pixels_to_mlp": "bug error 0.75 vs fix 0 (first loss 24.2 / 1.41)",
    "adam_lr_one": "bug error 0.844 vs fix 0.219 (first loss 2.3 / 2.3)",
    "tolist_then_requires_grad": "bug error 0.938 vs fix 0.219 (first loss 2.3 / 2.3)",
    "sgd_sigmoid_into_bce_with_logits": "bug error 0.659 vs fix 0.0677 (first loss 0.813 / 0.689)",
    "multi_hot_to_ce_vs_soft_margin": "bug error 0.214 vs fix 0.138 (first loss 3.47 / 0.695)",
    "class_weights_normalised_counts": "bug error 0.667 vs fix 0.223 (first loss 1.35 / 1.16)",
    "deep_sigmoid_mlp_48": "bug error 0.844 vs fix 0.297 (first loss 2.32 / 2.31)",
    "permute_then_reshape_mixes_batch": "bug error 0.781 vs fix 0 (first loss 1.41 / 1.36)",
    "clamped_cross_entropy": "bug error 0.859 vs fix 0.266 (first loss 2 / 2.28)",
    "steplr_adam_per_batch": "bug error 0.812 vs fix 0.578 (first loss 2.28 / 2.28)",
    "softmax_and_no_zero_grad": "bug error 0.812 vs fix 0.219 (first loss 2.3 / 2.3)",
    "dict_layers_and_raw_inputs": "bug error 0.625 vs fix 0.219 (first loss 21.8 / 2.3)",
    "deep_sigmoid_and_steplr_per_batch": "bug error 0.844 vs fix 0.688 (first loss 2.32 / 2.31)",
    "plain_list_and_sgd_lr_high": "bug error 0.453 vs fix 0.266 (first loss 2.28 / 2.28)",
    "plain_list_of_sigmoid_layers": "bug error 0.844 vs fix 0.625 (first loss 2.32 / 2.3)",
    "shared_sigmoid_layer_in_plain_list": "bug error 0.844 vs fix 0.344 (first loss 2.31 / 2.3)",
    "softmax_deep_sigmoid_no_zero_grad": "bug error 0.844 vs fix 0.625 (first loss 2.3 / 2.3)",
    "four_at_once_with_dropout": "bug error 0.922 vs fix 0.438 (first loss 2.3 / 2.29)",
    "softmax_and_adam_lr_high": "bug error 0.844 vs fix 0.156 (first loss 2.3 / 2.33)",
    "softmax_no_zero_grad_sgd_lr_high": "bug error 0.891 vs fix 0.203 (first loss 2.3 / 2.3)",
    "deep_sigmoid_and_adam_lr_high": "bug error 0.844 vs fix 0.5 (first loss 2.35 / 2.3)",
}
"""Recorded by ``python -m tests.triage_public.measure development`` (torch 2.13 CPU, 1 thread):
held-out error after 300 steps of the user's loop, the bug against its accepted fix."""

DEVELOPMENT = tuple(dataclasses.replace(case, measured=MEASURED[case.name]) for case in DEVELOPMENT)
