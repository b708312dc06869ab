"""A 2-block GPT (d_model 64) and its training loop: the shared builder of the reproductions.

Pre-LN blocks (Radford et al. 2019, GPT-2), separate query/key/value projections with biases,
a softmax over explicit pre-softmax logits (the tensor Wortsman et al. 2023 watch), and the knobs
the stable twins turn: ``qk_norm`` (LayerNorm on queries and keys, Dehghani et al. 2023),
``final_norm`` (LayerNorm before the output head), ``z_loss`` (PaLM's ``1e-4 * log(Z)^2``),
``warmup_steps`` (linear warmup to the peak lr), and the no-warmup search's (``post_ln``: the
norm after each residual sum, Vaswani et al. 2017, which Xiong et al. 2020 show needs warmup;
``depth``; ``batch``). Data: sequences of a fixed random Markov chain
over 64 tokens with 4 successors per token (learnable: the loss falls from log 64 = 4.16 toward
log 4 = 1.39), drawn from a seeded generator, so every run is reproducible on the CPU.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 64
D_MODEL = 64
HEADS = 4
SEQ = 32
BATCH = 16


class Block(nn.Module):
    def __init__(self, qk_norm: bool, post_ln: bool = False) -> None:
        super().__init__()
        self.post_ln = post_ln
        self.ln1 = nn.LayerNorm(D_MODEL)
        self.query = nn.Linear(D_MODEL, D_MODEL)
        self.key = nn.Linear(D_MODEL, D_MODEL)
        self.value = nn.Linear(D_MODEL, D_MODEL)
        self.proj = nn.Linear(D_MODEL, D_MODEL)
        self.q_norm = nn.LayerNorm(D_MODEL // HEADS) if qk_norm else nn.Identity()
        self.k_norm = nn.LayerNorm(D_MODEL // HEADS) if qk_norm else nn.Identity()
        self.ln2 = nn.LayerNorm(D_MODEL)
        self.mlp = nn.Sequential(
            nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(), nn.Linear(4 * D_MODEL, D_MODEL)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = x if self.post_ln else self.ln1(x)

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, HEADS, D_MODEL // HEADS).transpose(1, 2)

        q, k, v = (
            self.q_norm(heads(self.query(h))),
            self.k_norm(heads(self.key(h))),
            heads(self.value(h)),
        )
        logits = q @ k.transpose(-1, -2) / math.sqrt(D_MODEL // HEADS)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        attn = logits.masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, D_MODEL))
        if self.post_ln:  # Vaswani et al. 2017: the norm after each residual sum
            x = self.ln1(x)
            return self.ln2(x + self.mlp(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(
        self,
        qk_norm: bool = False,
        final_norm: bool = True,
        post_ln: bool = False,
        depth: int = 2,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.pos = nn.Embedding(SEQ, D_MODEL)
        self.blocks = nn.ModuleList([Block(qk_norm, post_ln) for _ in range(depth)])
        self.norm = nn.LayerNorm(D_MODEL) if final_norm else nn.Identity()
        self.head = nn.Linear(D_MODEL, VOCAB, bias=False)
        for module in self.modules():  # GPT-2's init: N(0, 0.02)
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


@dataclass(frozen=True)
class Setup:
    """One run: the model's knobs, the optimizer's, the schedule and the data."""

    name: str
    steps: int
    lr: float
    qk_norm: bool = False
    final_norm: bool = True
    post_ln: bool = False
    depth: int = 2
    batch: int = BATCH
    z_loss: float = 0.0
    warmup_steps: int = 0
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.0
    eps: float = 1e-8
    seed: int = 0
    lr_at: Callable[[int], float] | None = None
    """A multiplier of ``lr`` per step (after warmup), e.g. a step up mid-run."""
    loss_weight_at: Callable[[int], float] | None = None
    """A factor on the loss per step (a quiet phase: the gradients shrink, Adam's second
    moment with them)."""

    def twin(self, name: str, **changes: Any) -> Setup:
        return replace(self, name=name, **changes)


def markov_chain(seed: int) -> torch.Tensor:
    """A (VOCAB, 4) table of successors."""
    gen = torch.Generator().manual_seed(1000 + seed)
    return torch.randint(0, VOCAB, (VOCAB, 4), generator=gen)


def markov_batch(
    table: torch.Tensor, gen: torch.Generator, vocab: int = VOCAB, batch: int = BATCH
) -> torch.Tensor:
    tokens = torch.empty(batch, SEQ + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, vocab, (batch,), generator=gen)
    for t in range(SEQ):
        choice = torch.randint(0, 4, (batch,), generator=gen)
        tokens[:, t + 1] = table[tokens[:, t], choice]
    return tokens


def loss_of(model: GPT, tokens: torch.Tensor, z_loss: float) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
    if z_loss:
        loss = loss + z_loss * logits.logsumexp(-1).square().mean()
    return loss


def build(setup: Setup) -> tuple[GPT, torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    torch.manual_seed(setup.seed)
    model = GPT(
        qk_norm=setup.qk_norm,
        final_norm=setup.final_norm,
        post_ln=setup.post_ln,
        depth=setup.depth,
    )
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=setup.lr,
        betas=setup.betas,
        eps=setup.eps,
        weight_decay=setup.weight_decay,
    )

    def factor(step: int) -> float:
        warm = min(1.0, (step + 1) / setup.warmup_steps) if setup.warmup_steps else 1.0
        return warm * (setup.lr_at(step) if setup.lr_at is not None else 1.0)

    return model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@dataclass
class Run:
    losses: list[float]
    attached: Any


def train(
    setup: Setup,
    attach: Callable[[nn.Module, torch.optim.Optimizer], contextlib.AbstractContextManager[Any]]
    | None = None,
) -> Run:
    """Train ``setup.steps`` steps; ``attach(model, optimizer)`` is entered around the loop.
    Stops early once the loss is non-finite (the event happened)."""
    model, optimizer, scheduler = build(setup)
    table = markov_chain(setup.seed)
    gen = torch.Generator().manual_seed(setup.seed)
    losses: list[float] = []
    scope = attach(model, optimizer) if attach is not None else contextlib.nullcontext()
    with scope as attached:
        for step in range(setup.steps):
            tokens = markov_batch(table, gen, batch=setup.batch)
            optimizer.zero_grad()
            loss = loss_of(model, tokens, setup.z_loss)
            weight = setup.loss_weight_at(step) if setup.loss_weight_at is not None else 1.0
            (loss * weight if weight != 1.0 else loss).backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            if not math.isfinite(losses[-1]):
                break
    return Run(losses, attached)


def event_step(losses: list[float], factor: float = 1.5, after: int = 10) -> int | None:
    """The run's loss event: the first step whose loss is non-finite or above ``factor`` x the
    running minimum of the steps before it (from step ``after`` on), None when none."""
    best = math.inf
    for step, loss in enumerate(losses):
        if not math.isfinite(loss) or (step >= after and loss > factor * best):
            return step
        best = min(best, loss)
    return None


def steps(losses: list[float]) -> Iterator[tuple[int, float]]:
    return iter(enumerate(losses))
