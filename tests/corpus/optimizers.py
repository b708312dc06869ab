"""Optimizer recipes people add to an ordinary loop: SAM, Lookahead, EMA weights, LoRA adapters,
gradual unfreezing, a warm-up-frozen backbone with its own optimizer, the fused AdamW of the
Hugging Face Trainer under a long warm-up, and a GradScaler that really skips steps."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ._loop import Attach, HealthyLoop, LoopRun, attached, labelled

STEPS = 8


def classifier() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 4))


def _data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    return labelled(2, (32, 16), 4, 7)


# ----- SAM ---------------------------------------------------------------------------------------
class SAM(torch.optim.Optimizer):
    """github:davda54/sam sam.py (rewritten): ``first_step`` climbs to the local worst case
    ``w + rho * g / ||g||``, ``second_step`` returns to ``w`` and lets ``base_optimizer`` step
    with the gradient taken there."""

    def __init__(self, params: Any, base_optimizer: type, rho: float = 0.05, **kwargs: Any) -> None:
        super().__init__(params, {"rho": rho, **kwargs})
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups

    @torch.no_grad()
    def first_step(self, zero_grad: bool = False) -> None:
        grads = [
            p.grad.norm(2) for g in self.param_groups for p in g["params"] if p.grad is not None
        ]
        scale_base = torch.stack(grads).norm(2) + 1e-12
        for group in self.param_groups:
            scale = group["rho"] / scale_base
            for p in group["params"]:
                if p.grad is None:
                    continue
                self.state[p]["old_p"] = p.data.clone()
                p.add_(p.grad * scale.to(p))
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad: bool = False) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data = self.state[p]["old_p"]
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad()


def sam(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """SAM over SGD (lr 0.1, momentum 0.9) as its README trains: backward, ``first_step(
    zero_grad=True)``, a second forward-backward, ``second_step(zero_grad=True)``. The twin
    calls both with sam.py's default ``zero_grad=False``: every base step adds the last one's
    gradient."""
    model = classifier()
    optimizer = SAM(model.parameters(), torch.optim.SGD, lr=0.1, momentum=0.9)
    data = _data()
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        for step in range(steps):
            x, y = data[step % len(data)]
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.first_step(zero_grad=not planted)
            F.cross_entropy(model(x), y).backward()
            optimizer.second_step(zero_grad=not planted)
            run.losses.append(loss.item())
    return run


# ----- Lookahead ---------------------------------------------------------------------------------
class Lookahead(torch.optim.Optimizer):
    """github:huggingface/pytorch-image-models timm/optim/lookahead.py (rewritten): the wrapper
    keeps its inner optimizer as ``_base_optimizer`` and, every ``k`` inner steps, pulls the
    slow weights towards the fast ones and copies them back in place (``fast.copy_(slow)``)."""

    def __init__(
        self, base_optimizer: torch.optim.Optimizer, alpha: float = 0.5, k: int = 6
    ) -> None:
        self._base_optimizer = base_optimizer
        self.param_groups = base_optimizer.param_groups
        self.defaults = base_optimizer.defaults
        self.state = base_optimizer.state
        self.alpha, self.k, self._count = alpha, k, 0
        self._slow = [[p.detach().clone() for p in g["params"]] for g in self.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._base_optimizer.zero_grad(set_to_none)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = self._base_optimizer.step(closure)
        self._count += 1
        if self._count % self.k == 0:
            for group, slows in zip(self.param_groups, self._slow):
                for fast, slow in zip(group["params"], slows):
                    slow.add_(fast - slow, alpha=self.alpha)
                    fast.copy_(slow)
        return loss


def lookahead(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """Lookahead(Adam lr 1e-3, alpha 0.5, k 6); the twin forgets ``zero_grad``."""
    model = classifier()
    optimizer = Lookahead(torch.optim.Adam(model.parameters(), lr=1e-3))
    data = _data()
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        for step in range(steps):
            x, y = data[step % len(data)]
            if not planted:
                optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            run.losses.append(loss.item())
    return run


# ----- EMA ---------------------------------------------------------------------------------------
def ema(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """An exponential moving average of the weights (``torch.optim.swa_utils.AveragedModel``
    with ``get_ema_multi_avg_fn(0.999)``) updated after every step. The twin's update is
    written the wrong way round (``model`` pulled to the average in place)."""
    model = classifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    average = torch.optim.swa_utils.AveragedModel(
        model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.999)
    )
    data = _data()
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        for step in range(steps):
            x, y = data[step % len(data)]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            if planted:
                with torch.no_grad():
                    for p, a in zip(model.parameters(), average.module.parameters()):
                        p.lerp_(a, 0.001)
            else:
                average.update_parameters(model)
            run.losses.append(loss.item())
    return run


# ----- LoRA --------------------------------------------------------------------------------------
class LoRALinear(nn.Module):
    """A frozen ``base`` linear plus a trainable low-rank ``B @ A`` (github:microsoft/LoRA
    loralib/layers.py: A Kaiming-uniform, B zero, scaling alpha / r)."""

    def __init__(self, base: nn.Linear, r: int = 4, alpha: float = 8.0) -> None:
        super().__init__()
        self.base = base
        self.base.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scaling = alpha / r

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scaling


def lora(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """LoRA on both linears of a pretrained-like classifier, AdamW lr 1e-3 over the trainable
    parameters only. The twin builds the optimizer before injecting the adapters (over the
    base weights, frozen by the injection)."""
    model = classifier()
    if planted:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    first, last = model[0], model[3]
    assert isinstance(first, nn.Linear) and isinstance(last, nn.Linear)
    model[0], model[3] = LoRALinear(first), LoRALinear(last)
    model[1].requires_grad_(False)
    if not planted:
        optimizer = torch.optim.AdamW((p for p in model.parameters() if p.requires_grad), lr=1e-3)
    data = _data()
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        for step in range(steps):
            x, y = data[step % len(data)]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            run.losses.append(loss.item())
    return run


# ----- unfreezing --------------------------------------------------------------------------------
def gradual_unfreezing(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """ULMFiT-style (github:fastai/fastai ``Learner.freeze_to``): the head trains alone, then
    the backbone is unfrozen at a quarter of the run and given to the optimizer with
    ``add_param_group`` at a tenth of the lr. The twin forgets ``add_param_group``."""
    model = classifier()
    backbone, head = model[:3], model[3]
    backbone.requires_grad_(False)
    optimizer = torch.optim.AdamW(head.parameters(), lr=1e-3)
    data = _data()
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        for step in range(steps):
            if step == max(1, steps // 4):
                backbone.requires_grad_(True)
                if not planted:
                    optimizer.add_param_group({"params": list(backbone.parameters()), "lr": 1e-4})
            x, y = data[step % len(data)]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            run.losses.append(loss.item())
    return run


def frozen_backbone_optimizer(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """Discriminative fine-tuning with one optimizer per part, both built at the start while
    the backbone is frozen for a warm-up; the backbone is unfrozen at a quarter of the run and
    its optimizer starts to train it. The twin never unfreezes it (its optimizer trains
    nothing for the whole run)."""
    model = classifier()
    backbone, head = model[:3], model[3]
    backbone.requires_grad_(False)
    head_opt = torch.optim.AdamW(head.parameters(), lr=1e-3)
    backbone_opt = torch.optim.AdamW(backbone.parameters(), lr=1e-4)
    data = _data()
    run = LoopRun()
    with attached(attach, [(head, head_opt), (backbone, backbone_opt)], run):
        for step in range(steps):
            if step == max(1, steps // 4) and not planted:
                backbone.requires_grad_(True)
            x, y = data[step % len(data)]
            head_opt.zero_grad()
            backbone_opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            head_opt.step()
            backbone_opt.step()
            run.losses.append(loss.item())
    return run


# ----- fused AdamW under a long warm-up ----------------------------------------------------------
class _Rebinding(torch.optim.Optimizer):
    """A custom step that computes the update out of place and writes nothing back."""

    def __init__(self, params: Any, lr: float) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p = p - group["lr"] * p.grad  # the planted bug


def fused_adamw_warmup(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """The Hugging Face Trainer's defaults (github:huggingface/transformers
    src/transformers/training_args.py: ``adamw_torch_fused``, lr 5e-5, weight decay 0) with
    ``warmup_steps=4000`` of a linear schedule: the first updates are below float32 precision
    at a LayerNorm weight of 1.0 and leave it bitwise unchanged. The twin's step writes
    nothing (an out-of-place custom step)."""
    model = classifier()
    optimizer: torch.optim.Optimizer = torch.optim.AdamW(
        model.parameters(), lr=5e-5, weight_decay=0.0, fused=True
    )
    if planted:
        optimizer = _Rebinding(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 4000))
    data = _data()
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        for step in range(steps):
            x, y = data[step % len(data)]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            run.losses.append(loss.item())
    return run


# ----- GradScaler --------------------------------------------------------------------------------
def grad_scaler(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """The AMP recipe of the PyTorch docs (``scaler.scale(loss).backward()``,
    ``scaler.step(optimizer)``, ``scaler.update()``) with an initial scale of 2**127, so the
    first steps overflow and are really skipped until the scale has come down. The twin
    forgets ``zero_grad``."""
    model = classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127)
    data = _data()
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        for step in range(steps):
            x, y = data[step % len(data)]
            if not planted:
                optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            run.losses.append(loss.item())
    return run


# ----- torch.compile ---------------------------------------------------------------------------
def compiled(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """The torch.compile tutorial's training loop (pytorch/tutorials
    intermediate_source/torch_compile_tutorial.py): ``torch.compile(model)``, AdamW, zero_grad /
    backward / step. Compiled with ``backend="aot_eager"`` (Dynamo and AOTAutograd as the
    default, without Inductor's C++ build: seconds on a shared CPU). The session is handed the
    compiled module. The twin forgets ``zero_grad``."""
    model = classifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    compiled_model = torch.compile(model, backend="aot_eager")
    data = _data()
    run = LoopRun()
    with attached(attach, [(compiled_model, optimizer)], run):  # type: ignore[list-item]
        for step in range(steps):
            x, y = data[step % len(data)]
            if not planted:
                optimizer.zero_grad()
            loss = F.cross_entropy(compiled_model(x), y)
            loss.backward()
            optimizer.step()
            run.losses.append(loss.item())
    torch._dynamo.reset()
    return run


# ----- a reset through .data ---------------------------------------------------------------------
def grad_data_zero(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """github:jcjohnson/pytorch-examples autograd/two_layer_net_autograd.py (2017): a hand-written
    SGD update under ``torch.no_grad()`` through an optimizer here, and the gradients reset with
    ``p.grad.data.zero_()`` after the step (no version bump). The twin forgets the reset."""
    model = classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = _data()
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        for step in range(steps):
            x, y = data[step % len(data)]
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            if not planted:
                for p in model.parameters():
                    assert p.grad is not None
                    p.grad.data.zero_()
            run.losses.append(loss.item())
    return run


LOOPS = (
    HealthyLoop(
        "sam",
        "github:davda54/sam sam.py, README",
        "optimizer",
        "first_step / second_step with zero_grad=False (sam.py's default)",
        "grads_not_reset",
        sam,
    ),
    HealthyLoop(
        "lookahead",
        "github:huggingface/pytorch-image-models timm/optim/lookahead.py",
        "optimizer",
        "optimizer.zero_grad() forgotten",
        "grads_not_reset",
        lookahead,
    ),
    HealthyLoop(
        "ema",
        "pytorch/pytorch torch/optim/swa_utils.py (AveragedModel)",
        "optimizer",
        "the model pulled to its average in place after each step",
        "param_written_outside_step",
        ema,
    ),
    HealthyLoop(
        "lora",
        "github:microsoft/LoRA loralib/layers.py",
        "optimizer",
        "the optimizer built before the adapters were injected",
        "optimizer_has_nothing_to_train",
        lora,
    ),
    HealthyLoop(
        "gradual_unfreezing",
        "github:fastai/fastai fastai/learner.py (freeze_to)",
        "schedule",
        "the unfrozen backbone never given to the optimizer (add_param_group forgotten)",
        "params_trained_by_no_optimizer",
        gradual_unfreezing,
    ),
    HealthyLoop(
        "frozen_backbone_optimizer",
        "discriminative fine-tuning, one optimizer per part",
        "schedule",
        "the backbone never unfrozen: its optimizer trains nothing",
        "optimizer_has_nothing_to_train",
        frozen_backbone_optimizer,
    ),
    HealthyLoop(
        "fused_adamw_warmup",
        "github:huggingface/transformers training_args.py defaults",
        "optimizer",
        "an out-of-place custom step that writes nothing",
        "step_did_not_move",
        fused_adamw_warmup,
    ),
    HealthyLoop(
        "grad_scaler",
        "pytorch/pytorch docs/source/notes/amp_examples.rst",
        "optimizer",
        "optimizer.zero_grad() forgotten",
        "grads_not_reset",
        grad_scaler,
    ),
    HealthyLoop(
        "torch_compile",
        "pytorch/tutorials intermediate_source/torch_compile_tutorial.py",
        "optimizer",
        "optimizer.zero_grad() forgotten",
        "grads_not_reset",
        compiled,
    ),
    HealthyLoop(
        "grad_data_zero",
        "github:jcjohnson/pytorch-examples autograd/two_layer_net_autograd.py",
        "optimizer",
        "the p.grad.data.zero_() reset forgotten",
        "grads_not_reset",
        grad_data_zero,
    ),
)
