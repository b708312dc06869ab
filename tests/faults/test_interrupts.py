"""Ctrl-C at any instant: no hook, mode or collector state outlives an interrupted call, and the
interrupt reaches the caller as ``KeyboardInterrupt``.

A one-shot ``SIGALRM`` timer whose handler raises ``KeyboardInterrupt`` (what Python's SIGINT
handler does on Ctrl-C) fires at a random instant of each call, drawn uniformly over the call's
measured duration, so it lands in the set-up, the forward, the analysis and the tear-down alike.
After every interrupted call the process is compared with how it was before: the global module
hooks of ``torch.nn.modules.module``, every hook registry of the model, the torch-function and
dispatch mode stacks, the collector's switch and freeze count, the ``torch.vmap`` entry point and
the capture's own bookkeeping (no active capture in the thread or the process). A call that
raised anything but ``KeyboardInterrupt`` (a ``ForwardError`` wrapping torch's "pop from empty
mode stack"), or that returned although the timer fired inside it, fails the test.

The same comparison covers torch's global switches (grad mode, inference mode, anomaly mode, the
default dtype), the global RNG streams (Python, NumPy, torch CPU) and what the model holds
(buffers bitwise, each parameter's ``.grad`` object, train/eval flags): an analysis such as
``investigate`` sets and restores all of them around its replay.
"""

from __future__ import annotations

import gc
import random
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.modules.module as module_globals
from torch import nn
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import torchlens_nb as tl
from tests.faults._guards import GLOBAL_MODULE_HOOK_DICTS, MODULE_HOOK_DICTS, bits, rng_state
from torchlens_nb.capture import _scope
from torchlens_nb.options import CaptureOptions

pytestmark = [
    pytest.mark.fault("no_leak"),
    pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer"),
]


class _Timer:
    """A one-shot timer that raises ``KeyboardInterrupt`` in the main thread when it fires."""

    def __init__(self) -> None:
        self.fired = False
        self.armed = False

    def _fire(self, signum: int, frame: Any) -> None:
        """Deliver Ctrl-C as Python does: the main thread's SIGINT handler, called with the
        frame the signal interrupted (``signal.default_int_handler`` raises KeyboardInterrupt;
        a scope of ours may hold it, ``torchlens_nb/_interrupts.py``).

        SIGALRM goes to any thread of the process (torch's worker threads too), and Python runs
        the handler in the main thread at its next check: on a loaded machine that can come
        after disarm(), inside the harness's own state comparison. A late one is ignored."""
        if not self.armed:
            return
        self.armed = False
        self.fired = True
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    def __enter__(self) -> _Timer:
        self._previous = signal.signal(signal.SIGALRM, self._fire)
        return self

    def __exit__(self, *exc_info: object) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._previous)

    def arm(self, delay_s: float) -> None:
        self.fired = False
        self.armed = True
        signal.setitimer(signal.ITIMER_REAL, max(delay_s, 1e-6))

    def disarm(self) -> None:
        """Cancel the timer and let a signal that already arrived run its handler here."""
        signal.setitimer(signal.ITIMER_REAL, 0)
        self.armed = False
        for _ in range(3):  # each call is a point where a pending handler runs
            time.perf_counter()


def process_state(model: nn.Module) -> dict[str, Any]:
    """Everything an interrupted call must leave as it found it."""
    apis = sys.modules.get("torch._functorch.apis")
    return {
        **{
            f"global {name}": tuple(getattr(module_globals, name))
            for name in GLOBAL_MODULE_HOOK_DICTS
        },
        **{
            f"{address or '<root>'} {attr}": tuple(getattr(sub, attr, {}) or {})
            for address, sub in model.named_modules()
            for attr in MODULE_HOOK_DICTS
        },
        "function modes": [type(m).__name__ for m in _get_current_function_mode_stack()],
        "dispatch modes": [type(m).__name__ for m in _get_current_dispatch_mode_stack()],
        "gc enabled": gc.isenabled(),
        "gc freeze count": gc.get_freeze_count(),
        "vmap entry point": getattr(apis, "vmap_impl", None),
        "compile stance": getattr(sys.modules.get("torch._dynamo.eval_frame"), "_stance", None),
        "capture in this thread": _scope.active_recorder(),
        "captures in the process": _scope.running_captures(),
        "grad enabled": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(),
        "anomaly mode": (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
        "default dtype": torch.get_default_dtype(),
        **{f"rng {stream}": state for stream, state in rng_state().items()},
        **{f"buffer {name}": bits(buffer) for name, buffer in model.named_buffers()},
        **{f"grad {name}": id(param.grad) for name, param in model.named_parameters()},
        **{f"training {name or '<root>'}": sub.training for name, sub in model.named_modules()},
    }


@dataclass
class Tally:
    """What the randomised interrupts did."""

    interrupted: int = 0
    """Calls that raised ``KeyboardInterrupt`` (the timer fired inside them)."""
    completed: int = 0
    """Calls the timer missed (it fired after they returned, or not at all)."""
    problems: list[str] = field(default_factory=list)
    torch_windows: int = 0
    """Interrupts that landed in PyTorch's own windows: its mode window (a function mode pushed
    back after the call unwound, :func:`_in_torch_mode_window`) or its grad-mode window, which left grad mode off (the
    ``finally`` of ``torch.optim.optimizer._use_grad`` calls ``torch._dynamo.graph_break()``
    before it restores grad mode: a Ctrl-C there does the same without any tool of ours). The
    harness turns grad mode back on and counts them; they are never in a frame of ours."""


def _in_torch_grad_window(interrupt: KeyboardInterrupt) -> bool:
    """Whether ``interrupt`` was raised in torch's own code, no frame of ours below it but the
    Ctrl-C delivery (``_interrupts._handler``) and this harness's timer."""
    frames = traceback.extract_tb(interrupt.__traceback__)
    ours = [f for f in frames if "/torchlens_nb/" in f.filename]
    inner = [f for f in frames if f.name not in {"_fire", "_handler"}]
    is_torch = bool(inner) and "/torch/" in inner[-1].filename
    return is_torch and all(f.name == "_handler" for f in ours)


def _in_torch_mode_window(interrupt: KeyboardInterrupt) -> bool:
    """Whether ``interrupt`` was raised in torch's own mode window: at the first line of the
    ``__exit__`` of ``with _pop_mode_temporarily()`` in ``torch.overrides.handle_torch_function``
    (a ``contextlib`` frame), before the generator pushed the mode back. The suspended generator
    pushes it when the exception's frames are freed, after every ``__exit__`` of ours has run:
    a Ctrl-C there does the same to any function mode, without any tool of ours."""
    frames = [
        f
        for f in traceback.extract_tb(interrupt.__traceback__)
        if f.name not in {"_fire", "_handler"}
    ]
    return (
        len(frames) >= 2
        and frames[-1].filename.endswith("contextlib.py")
        and frames[-2].name == "handle_torch_function"
        and frames[-2].filename.endswith("/torch/overrides.py")
    )


def interrupt_at_random(
    call: Callable[[], object],
    model: nn.Module,
    interrupts: int,
    seed: int = 0,
    state: Callable[[], dict[str, Any]] | None = None,
) -> Tally:
    """Run ``call`` under a timer at a random instant until ``interrupts`` calls were
    interrupted; after each, ``state()`` (by default :func:`process_state` of ``model``) must
    equal what it was before."""
    rng = random.Random(seed)
    state = state or (lambda: process_state(model))
    before = state()
    for _ in range(3):  # warm up first: the first calls are slower and would skew the draw
        call()
    started = time.perf_counter()
    for _ in range(5):
        call()
    duration_s = (time.perf_counter() - started) / 5
    tally = Tally()
    with _Timer() as timer:
        while tally.interrupted < interrupts and tally.completed < 10 * interrupts:
            outcome, where, in_torch, in_mode_window = "returned", None, False, False
            try:
                try:
                    timer.arm(rng.uniform(0.0, 1.2 * duration_s))
                    call()
                except KeyboardInterrupt as interrupt:
                    outcome = "interrupted"
                    in_torch = _in_torch_grad_window(interrupt)
                    in_mode_window = _in_torch_mode_window(interrupt)
                    where = [
                        f"{f.name}:{f.lineno}"
                        for f in traceback.extract_tb(interrupt.__traceback__)[-5:-1]
                    ]
                except BaseException as exc:  # what the user would see instead
                    outcome = f"raised {type(exc).__name__}: {str(exc)[:120]}"
                finally:
                    timer.disarm()
            except KeyboardInterrupt:  # fired in this harness, after the call had returned
                pass
            if outcome == "interrupted":
                tally.interrupted += 1
            elif outcome == "returned":
                tally.completed += 1
            else:
                tally.problems.append(outcome)
            after = state()
            if in_torch and not after["grad enabled"] and before["grad enabled"]:
                torch.set_grad_enabled(True)
                tally.torch_windows += 1
                after = state()
            while in_mode_window and len(after["function modes"]) > len(before["function modes"]):
                torch._C._pop_torch_function_stack()  # torch's window pushed the mode back late
                tally.torch_windows += 1
                after = state()
            if after != before:
                changed = sorted(f"{k}: {after[k]!r:.80}" for k in before if before[k] != after[k])
                tally.problems.append(f"after {outcome} at {where}: {changed}")
            if tally.problems:
                return tally  # the process is no longer clean: later counts would mislead
    return tally


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model[1].register_forward_hook(lambda module, args, output: None)  # own-hook markers too
    model[1].register_forward_pre_hook(lambda module, args: None)
    return model


def _trace(model: nn.Module) -> Callable[[], object]:
    x = torch.randn(2, 4)
    return lambda: tl.trace(model, x)


def _find_nan(model: nn.Module) -> Callable[[], object]:
    x = torch.randn(2, 4)
    return lambda: tl.debug.find_nan(model, x)


def _train_step_model() -> nn.Module:
    """A train-mode model whose replay touches every state ``investigate`` restores: BatchNorm
    running statistics, a Dropout draw from the global RNG, populated ``.grad``."""
    torch.manual_seed(0)
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 2))
    model(torch.randn(3, 4)).sum().backward()
    return model.train()


def _investigate(model: nn.Module) -> Callable[[], object]:
    x = torch.randn(3, 4)
    return lambda: tl.debug.investigate(model, x, loss_fn=lambda out: out.square().mean())


def _nonfinite_origin(model: nn.Module) -> Callable[[], object]:
    x = torch.randn(3, 4)
    return lambda: tl.debug.nonfinite_origin(model, x)


def _liveness_probe(model: nn.Module) -> Callable[[], object]:
    x = torch.randn(2, 4)
    probe = tl.debug.LivenessProbe([tl.func("relu")])
    options = CaptureOptions(hooks=probe.hook_plan())
    return lambda: tl.trace(model, x, capture=options)


Call = Callable[[], object]
ENTRY_POINTS: dict[str, tuple[Callable[[], nn.Module], Callable[[nn.Module], Call], int]] = {
    "tl.trace": (_mlp, _trace, 2000),
    "live find_nan": (_mlp, _find_nan, 300),
    "LivenessProbe": (_mlp, _liveness_probe, 300),
    "investigate": (_train_step_model, _investigate, 300),
    "live nonfinite_origin": (_train_step_model, _nonfinite_origin, 300),
}
"""Entry point -> (model, the call to interrupt, how many interrupts): 3,200 in all. The
``with`` statements of ``ChecksSession`` and ``SinkProbe`` (where the interpreter calls
``__exit__``) are in test_interrupts_with.py."""


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_an_interrupt_at_any_instant_leaves_nothing_behind(entry: str) -> None:
    build, make_call, interrupts = ENTRY_POINTS[entry]
    model = build()
    tally = interrupt_at_random(make_call(model), model, interrupts)
    assert tally.problems == []
    assert tally.interrupted == interrupts
    # and the next capture records the whole forward, as on a fresh process
    after = tl.trace(_mlp(), torch.randn(2, 4))
    assert [op.func for op in after] == ["input", "linear", "relu", "linear"]
    assert after.blind_spots == ()


def test_the_harness_sees_a_leaked_hook() -> None:
    """The state check is not blind: a hook left behind is a difference."""
    model = _mlp()
    before = process_state(model)
    handle = nn.modules.module.register_module_forward_hook(lambda module, args, output: None)
    try:
        assert process_state(model) != before
    finally:
        handle.remove()
    assert process_state(model) == before
