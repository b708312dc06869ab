"""Small real models the tests build (seeded, CPU, built in milliseconds).

Import from tests as ``from tests.models import ...``; fixtures in ``conftest.py`` wrap them.
"""

from __future__ import annotations

import threading

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import torchlens_nb as tl
from torchlens_nb.options import CaptureOptions


def mlp(seed: int = 0) -> nn.Sequential:
    """Linear(8, 16) -> ReLU -> Linear(16, 4)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def adamw_mlp_session(steps: int) -> tl.debug.ChecksSession:
    """A default ``ChecksSession`` over ``steps`` AdamW steps of :func:`mlp` (a model without
    attention), closed: its report is final."""
    torch.manual_seed(0)
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    with tl.debug.ChecksSession(model, optimizer, scaler=None) as session:
        for _ in range(steps):
            optimizer.zero_grad()
            model(torch.randn(4, 8)).square().mean().backward()
            optimizer.step()
    return session


class SmallCNN(nn.Module):
    """conv -> BatchNorm -> ReLU -> pool -> linear head, input (N, 3, 8, 8)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.act(self.bn(self.conv(x))))
        return self.head(torch.flatten(x, 1))


def small_cnn(seed: int = 0) -> SmallCNN:
    torch.manual_seed(seed)
    return SmallCNN()


def tiny_gpt2(seed: int = 0, n_layer: int = 2) -> nn.Module:
    """A 2-layer GPT-2 (random init, eager attention): input ``{"input_ids": (1, T)}``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        n_layer=n_layer,
        n_embd=32,
        n_head=4,
        vocab_size=64,
        n_positions=32,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation="eager",
    )
    return GPT2LMHeadModel(config).eval()


class InPlaceViews(nn.Module):
    """In-place ops, views, two outputs and data-dependent control flow."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.fc(x)
        y.relu_()
        flat = y.view(-1)
        flat = flat * 2 if flat.sum() > 0 else flat - 1
        y[:, 0] = 0.0
        return flat, y.t()


class DictInput(nn.Module):
    """forward(ids, scale): takes keyword arguments, like a Hugging Face model."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)

    def forward(self, ids: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.emb(ids).mean(dim=1) * scale


class Locked(nn.Module):
    """A model ``copy.deepcopy`` refuses (it holds a lock), like ones owning a process handle."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.lock = threading.Lock()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


DEAD_BLOCK = 2
"""Index of the block whose ReLU never fires in ``dead_block_mlp``."""


def five_block_mlp(dead_block: int | None = DEAD_BLOCK) -> nn.Sequential:
    """Five Linear(8, 8) -> ReLU blocks and a Linear(8, 1) head; block ``dead_block`` has bias
    -100, so its ReLU outputs 0 for every input of magnitude ~1 (a dead block)."""
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(5)]
    if dead_block is not None:
        with torch.no_grad():
            blocks[dead_block][0].bias.fill_(-100.0)
    return nn.Sequential(*blocks, nn.Linear(8, 1))


def traced_backward(model: nn.Module, x: torch.Tensor, scale=None) -> tl.Trace:
    """``tl.trace`` with saved gradients, then one backward of ``mean(out ** 2)`` (optionally
    passed through ``scale``, e.g. ``scaler.scale``)."""
    trace = tl.trace(model, x, capture=CaptureOptions(save_grads=True))
    loss = trace[trace.output_layers[0]].out.square().mean()
    trace.backward(scale(loss) if scale is not None else loss)
    return trace


class Checkpointed(nn.Module):
    """A Linear(8, 8) stem, the five blocks of ``five_block_mlp`` (block 2 dead: bias -100)
    each run under ``checkpoint``, then the Linear(8, 1) head. ``stem=False`` drops the stem: pass
    an input that requires grad then (as an embedding output does), or no block gets a gradient."""

    def __init__(self, *, use_reentrant: bool, stem: bool = True) -> None:
        super().__init__()
        layers = five_block_mlp()
        self.blocks, self.head = layers[:5], layers[5]
        self.stem = nn.Linear(8, 8) if stem else nn.Identity()
        self.use_reentrant = use_reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=self.use_reentrant)
        return self.head(x)
