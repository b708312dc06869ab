"""The parts the public bug zoo is built from: tasks, small models, the user's loop, the case.

Each case of ``heldout.py`` / ``development.py`` ports a mistake someone reported in public
(the ``source`` URL) to a seeded CPU repro that keeps the mistake exactly; ``build(broken=False)``
is the accepted fix (its healthy twin). The ground truth is measured by training both with the
user's own loop (``measure.py``: ``MEASURE_STEPS`` steps over 8 batches in turn, scored on a
held-out batch) and recorded in ``measured``: the bug trains measurably worse.

Triage receives what the user holds when they call it: the objects after ``handed_after``
steps of their own loop (0 for most cases: the model as built; a loop-state mistake such as a
forgotten ``zero_grad()`` or a scheduler stepped per batch needs the loop to have run).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

FEATURES, CLASSES = 20, 10
VOCAB, SEQ = 24, 12
MEASURE_STEPS = 300
DATA_SEEDS = tuple(range(1, 9))
HELD_OUT_SEED = 99


# ----- tasks: a fixed rule makes every one learnable ---------------------------------------
def tabular(seed: int, *, scale: float = 1.0, shift: float = 0.0) -> tuple[Any, Any]:
    """64 standard-normal rows (times ``scale`` plus ``shift``: raw units) labelled by a fixed
    linear teacher over 10 classes."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(64, FEATURES, generator=generator)
    teacher = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(7))
    return x * scale + shift, (x @ teacher).argmax(dim=1)


def regression(seed: int) -> tuple[Any, Any]:
    """64 rows, target ``(64, 1)``: a fixed linear function plus a little noise."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(64, FEATURES, generator=generator)
    w = torch.randn(FEATURES, 1, generator=torch.Generator().manual_seed(8))
    return x, x @ w / math.sqrt(FEATURES) + 0.05 * torch.randn(64, 1, generator=generator)


def images(seed: int, *, raw: bool = False) -> tuple[Any, Any]:
    """32 noisy 1x8x8 images with a bright quadrant; the label is the quadrant (``raw``:
    0-255 pixel values, as a loader without ToTensor/Normalize hands them over)."""
    generator = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (32,), generator=generator)
    x = torch.randn(32, 1, 8, 8, generator=generator)
    for i, label in enumerate(y.tolist()):
        row, col = divmod(label, 2)
        x[i, 0, 4 * row : 4 * row + 4, 4 * col : 4 * col + 4] += 1.5
    return ((x * 40 + 128).clamp(0, 255) if raw else x), y


def multilabel(seed: int) -> tuple[Any, Any]:
    """64 rows with multi-hot float targets over 6 labels (each label: a teacher score > 0.5)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(64, FEATURES, generator=generator)
    teacher = torch.randn(FEATURES, 6, generator=torch.Generator().manual_seed(9))
    return x, ((x @ teacher) / math.sqrt(FEATURES) > 0.5).float()


def imbalanced(seed: int) -> tuple[Any, Any]:
    """64 rows, 3 classes, about 80% of them class 0 (a threshold on two teacher scores)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(64, FEATURES, generator=generator)
    teacher = torch.randn(FEATURES, 2, generator=torch.Generator().manual_seed(10))
    score = x @ teacher / math.sqrt(FEATURES)
    y = torch.zeros(64, dtype=torch.long)
    y[score[:, 0] > 1.0] = 1
    y[(score[:, 1] > 1.0) & (y == 0)] = 2
    return x, y


def padded_tokens(seed: int) -> dict[str, torch.Tensor]:
    """32 right-padded token sequences (pad id 0, lengths 3-12); the label is the group
    (id // 6) of each sequence's last real token."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, SEQ + 1, (32,), generator=generator)
    ids = torch.randint(1, VOCAB, (32, SEQ), generator=generator)
    ids[torch.arange(SEQ).expand(32, SEQ) >= lengths[:, None]] = 0
    last = ids[torch.arange(32), lengths - 1]
    return {"ids": ids, "lengths": lengths, "labels": last // 6}


def tokens(seed: int) -> tuple[Any, Any]:
    """32 token sequences; the label is the most frequent of 4 token groups (ids // 6)."""
    ids = torch.randint(0, VOCAB, (32, SEQ), generator=torch.Generator().manual_seed(seed))
    counts = torch.stack([(ids // 6 == g).sum(dim=1) for g in range(4)], dim=1)
    return ids, counts.argmax(dim=1)


# ----- models --------------------------------------------------------------------------------
def mlp(
    widths: tuple[int, ...] = (FEATURES, 64, 64, CLASSES),
    *,
    act: type[nn.Module] = nn.ReLU,
    dropout: float = 0.0,
    out: nn.Module | None = None,
    seed: int = 0,
) -> nn.Sequential:
    """Linear -> act [-> Dropout] ... -> Linear [-> out], seeded."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(act())
            if dropout:
                layers.append(nn.Dropout(dropout))
    if out is not None:
        layers.append(out)
    return nn.Sequential(*layers)


class CNN(nn.Module):
    """conv(1->8) -> BatchNorm -> ReLU -> conv(8->16) -> BatchNorm -> ReLU -> pool -> Linear(4),
    optionally a softmax on the output."""

    def __init__(self, *, softmax: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
        )
        self.head = nn.Linear(64, 4)
        self.softmax = softmax

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.features(x).flatten(1))
        return logits.softmax(dim=1) if self.softmax else logits


class RNNClassifier(nn.Module):
    """Embedding(pad 0) -> LSTM/GRU -> Linear(4) on right-padded sequences.

    ``read="padded_end"`` reads the state at the last position of the padded tensor (after the
    padding of every shorter sequence); ``"length"`` packs the sequences (the accepted fix).
    """

    def __init__(self, *, cell: type[nn.Module] = nn.LSTM, read: str = "length") -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, 32, padding_idx=0)
        self.rnn = cell(32, 48, batch_first=True)
        self.head = nn.Linear(48, 4)
        self.read = read

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        embedded = self.embed(ids)
        if self.read == "padded_end":
            states, _ = self.rnn(embedded)
            return self.head(states[:, -1])
        packed = nn.utils.rnn.pack_padded_sequence(
            embedded, lengths, batch_first=True, enforce_sorted=False
        )
        _, hidden = self.rnn(packed)
        last = hidden[0] if isinstance(hidden, tuple) else hidden
        return self.head(last[-1])


class TokenClassifier(nn.Module):
    """Embedding -> 2-layer transformer encoder (batch_first) -> mean over positions -> Linear."""

    def __init__(self, *, softmax: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, 32)
        self.pos = nn.Parameter(torch.zeros(1, SEQ, 32))
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 4)
        self.softmax = softmax

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.encoder(self.embed(ids) + self.pos).mean(dim=1))
        return logits.softmax(dim=-1) if self.softmax else logits


# ----- the user's loop -------------------------------------------------------------------------
@dataclass
class Setup:
    """What the user built: their model, batch source, loss, optimizer, scheduler and loop."""

    model: nn.Module
    data: Callable[[int], Any]
    loss_fn: Callable[..., torch.Tensor]
    optimizer: torch.optim.Optimizer
    scheduler: Any = None
    zero_grad: bool = True
    """False: the loop never clears .grad (gradients of every step add up)."""
    scheduler_per_batch: bool = False
    """True: ``scheduler.step()`` after every batch; False: once per pass over the 8 batches."""
    zero_grad_after_backward: bool = False
    """True: ``loss.backward(); optimizer.zero_grad(); optimizer.step()`` (no update)."""
    eval_in_loop: bool = False
    """True: the loop calls ``model.eval()`` before each step (dropout/BatchNorm in eval)."""
    call: Callable[[nn.Module, Any], Any] | None = None
    """How the loop feeds a batch to the model and its loss (default: ``(inputs, targets)``
    or a dict with ``labels``)."""

    def split(self, batch: Any) -> tuple[Any, Any]:
        if isinstance(batch, dict):
            inputs = {k: v for k, v in batch.items() if k != "labels"}
            return inputs, batch["labels"]
        return batch[0], batch[1]

    def forward(self, batch: Any) -> tuple[Any, Any]:
        inputs, targets = self.split(batch)
        out = self.model(**inputs) if isinstance(inputs, dict) else self.model(inputs)
        return out, targets

    def step(self, index: int) -> float:
        """One step of the user's loop on batch ``index`` (cycling over ``DATA_SEEDS``)."""
        if self.eval_in_loop:
            self.model.eval()
        else:
            self.model.train()
        if self.zero_grad:
            self.optimizer.zero_grad()
        out, targets = self.forward(self.data(DATA_SEEDS[index % len(DATA_SEEDS)]))
        loss = self.loss_fn(out, targets)
        loss.backward()
        if self.zero_grad_after_backward:
            self.optimizer.zero_grad()
        self.optimizer.step()
        if self.scheduler is not None and (
            self.scheduler_per_batch or (index + 1) % len(DATA_SEEDS) == 0
        ):
            self.scheduler.step()
        return float(loss.detach())


@dataclass(frozen=True)
class Mistake:
    """One mistake of a case, and the finding codes that name it."""

    what: str
    named_by: frozenset[str]


def mistake(what: str, *codes: str) -> Mistake:
    return Mistake(what, frozenset(codes))


def error_rate(setup: Setup, batch: Any, *, balanced: bool = False) -> float:
    """1 - accuracy of the argmax (classification; ``balanced``: 1 - the mean per-class
    recall), or the MSE (a (N, 1) or (N,) float target), or 1 - per-label accuracy (multi-hot
    float targets); the model in eval mode, no grad."""
    setup.model.eval()
    with torch.no_grad():
        out, targets = setup.forward(batch)
    out = out[0] if isinstance(out, tuple) else out
    if targets.is_floating_point() and (targets.dim() == 1 or targets.shape[-1] == 1):
        return float(((out.reshape(targets.shape) - targets) ** 2).mean())
    if targets.is_floating_point():
        return float(((out > 0) != (targets > 0.5)).float().mean())
    wrong = out.argmax(-1) != targets
    if balanced:
        recalls = [1 - float(wrong[targets == c].float().mean()) for c in targets.unique()]
        return 1 - sum(recalls) / len(recalls)
    return float(wrong.float().mean())


@dataclass(frozen=True)
class PublicCase:
    """A reported mistake (or several at once) ported to a CPU repro, and its accepted fix."""

    name: str
    source: str
    """Where it was reported (URL), and what the report says in a few words."""
    mistakes: tuple[Mistake, ...]
    """The case's bugs, the dominant one first."""
    build: Callable[[bool], Setup]
    """``build(True)``: the bug; ``build(False)``: the accepted fix."""
    measured: str
    """Ground truth recorded by ``measure.py``: error on held-out data, bug vs fix."""
    handed_after: int = 0
    """Steps of the user's loop run before triage is called (loop-state mistakes)."""
    triage_options: dict[str, Any] = field(default_factory=dict)
    balanced: bool = False
    """Score with the balanced error (class-weight mistakes: plain accuracy rewards the
    majority class)."""

    def hand_over(self, broken: bool) -> dict[str, Any]:
        """triage's arguments: the user's objects after ``handed_after`` steps of their loop."""
        setup = self.build(broken)
        for index in range(self.handed_after):
            setup.step(index)
        return {
            "model": setup.model,
            "batch": setup.data(DATA_SEEDS[0]),
            "loss_fn": setup.loss_fn,
            "optimizer": setup.optimizer,
            **self.triage_options,
        }


def measure(case: PublicCase, broken: bool, steps: int = MEASURE_STEPS) -> tuple[float, float]:
    """(first loss, held-out error) after ``steps`` steps of the user's loop."""
    setup = case.build(broken)
    first = setup.step(0)
    for index in range(1, steps):
        if not math.isfinite(setup.step(index)):
            break
    return first, error_rate(setup, setup.data(HELD_OUT_SEED), balanced=case.balanced)


# ----- optimizers and losses the cases use --------------------------------------------------
def adam(model: nn.Module, lr: float = 1e-3, **kw: Any) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=lr, **kw)


def sgd(model: nn.Module, lr: float = 0.05, momentum: float = 0.9) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)


def plain_setup(
    model: nn.Module,
    data: Callable[[int], Any],
    loss_fn: Callable[..., torch.Tensor] | None = None,
    optimizer: Callable[[nn.Module], torch.optim.Optimizer] = adam,
    **loop: Any,
) -> Setup:
    """The usual set-up: CrossEntropyLoss and Adam 1e-3 unless given."""
    return Setup(model, data, loss_fn or nn.CrossEntropyLoss(), optimizer(model), **loop)
