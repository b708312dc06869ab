"""The stability check: loss spikes and divergence warned before they happen, with the mechanism.

On by default (``ChecksSession(stability=True)``). It judges, at each attempt's step site (S-B,
before the optimizer writes):

* the loss (the session's, ``session/_loss.py``): a 20-attempt EMA against its running minimum
  (a sustained rise) and each loss against the median of the last 64 (a spike);
* per-block gradient norms (a block is the parameters under one numbered container entry,
  ``blocks.3``, else a top-level module) against their running medians, every attempt where the
  session reads gradient norms (another check needs them), else on probed attempts;
* on one attempt in ``probe_every`` (:mod:`._probe`): the max pre-softmax attention logit and
  the least mean attention entropy over heads per layer, and the final logits' log Z;
* on one attempt in ``adam_every``, on the first, and on any attempt where a block's gradient
  norm is 3x its median or the lr rose 2x since the last sample (:mod:`._adam`): the
  update/weight ratio of the update the optimizer is about to take, and how far Adam's second
  moment lags the gradient;
* before the first write, that first update's ratio (no warmup: Adam's first step moves every
  element by the lr).

A warning names its mechanism, the layer, the trend and the attempt it started at, and needs two
signals where one is common in healthy runs: ``attention_logit_growth`` is a max logit above
:data:`ATTENTION_LOGIT_HIGH` while the loss EMA is :data:`RISE` above its minimum;
``output_logit_divergence`` / ``grad_norm_surge`` is a block's gradient norm :data:`SURGE` x its
median on 2 of 3 attempts while the loss is 10% above its running median (named for the output
logits when log Z turned upward: :meth:`StabilityCheck._is_log_z_rising`);
``adam_update_surge`` is an upcoming update ratio :data:`UPDATE_SURGE` x the run's median and
above :data:`UPDATE_RATIO_HIGH`; ``adam_second_moment_stale`` is the second moment's lag above
:data:`STALE` on the median tensor (one batch far larger than the recent ones: Adam moves every
weight by about the lr along it, and its momentum carries it over the next steps);
``first_step_update_large`` is a first update ratio above :data:`FIRST_STEP_RATIO_HIGH`. The least
attention entropy (Zhai et al. 2023's entropy collapse) is reported with the logit growth, never
judged alone: the healthy twins of ``tests/stability`` reach 0.18-0.2 nats (attention to the
current token is what their task needs), the logit-growth runs 0.00-0.04. A loss
spike or rise without a mechanism is an info hint (``loss_spike``, ``loss_rising``): a GAN's or
an RL loop's loss moves on its own. Remedies are what the measurement suggests, never certain.

Measured on the reproductions of ``tests/stability`` (``benchmarks/bench_stability.py`` prints
the event, the first warning and the lead of each, and the cost per step).
"""

from __future__ import annotations

import bisect
import contextlib
import math
import re
import statistics
import weakref
from collections import deque
from typing import Any, Literal

import torch

from ...report import Finding, Where
from ...report._checks import Action
from ..dashboard._timeline import TimelineRecorder
from ..scans._norms import device_norms, read_host
from ..session._check import Check
from ..session._evidence import Attempt
from ..session._params import Roster
from ._adam import Upcoming, ratio, upcoming_ratios
from ._probe import ForwardProbe, ProbeReading
from ._spike_keep import Keep, SpikeKeeper

Mechanism = Literal[
    "attention_logit_growth",
    "output_logit_divergence",
    "grad_norm_surge",
    "adam_update_surge",
    "adam_second_moment_stale",
    "first_step_update_large",
    "loss_spike",
    "loss_rising",
]

EMA_SPAN = 20
"""Attempts in the loss EMA (alpha = 2 / (span + 1))."""
WARM_ATTEMPTS = 20
"""Attempts before the loss trend is judged (the EMA's own warm-up)."""
RISE = 1.1
"""Loss EMA over its running minimum that counts as a sustained rise (10%)."""
SPIKE = 2.0
"""A loss this many times the median of the last :data:`HISTORY` is a spike."""
HISTORY = 64
"""Values each running median holds."""
ATTENTION_LOGIT_HIGH = 100.0
"""Max pre-softmax logit above which attention is near one-hot (exp(100) dwarfs any other key);
healthy runs of the reproductions stay below 40 (``tests/stability``)."""
SURGE = 3.0
"""A block's gradient norm over its running median that counts as a surge."""
LOG_Z_RETURN = 1.05
"""log Z's mean over the lowest it fell to after its peak that counts as turning upward."""
SURGE_LOSS = 1.1
"""Loss over its running median that corroborates a gradient surge."""
UPDATE_SURGE = 4.0
UPDATE_RATIO_HIGH = 0.05
"""An upcoming update ratio must pass both: 4x the run's median and 0.05 of the weight (AdamW's
healthy first steps reach 0.038, its steady state about 1e-3 at lr 1e-3)."""
FIRST_STEP_RATIO_HIGH = 1.0
"""A first update as large as the weights themselves replaces the initialisation: judged on the
median weight matrix (biases and norm gains left out: a LayerNorm's gain of ones would hide the
matrices' ratio). AdamW at lr 1e-3 on 0.02-std weights: 0.027-0.038; lr 3e-2 without warmup:
about 1.5 (``tests/stability``)."""
STALE = 3.0
"""How far Adam's second moment lags the gradient (:class:`._adam.Upcoming`: about 1 in steady
training, at most 4.5 at b2 0.95), median over tensors, that counts as stale. Measured on
``tests/stability`` sampled at every attempt from attempt 20: 4.09 at the full batch after a
quiet phase, at most 1.11 on the stable twins (1.34 on the no-warmup run)."""
QUIET_ATTEMPTS = 10
"""Attempts before ``adam_update_surge`` is judged (Adam's bias-corrected first steps are
sign-like and large by design)."""

_BLOCK = re.compile(r"^(.*?\.\d+)(?:\.|$)")

REMEDY: dict[Mechanism, str] = {
    "attention_logit_growth": "The measurement suggests attention logit growth (Wortsman et "
    "al. 2023): qk-layernorm (LayerNorm on queries and keys, Dehghani et al. 2023) or a lower "
    "peak lr usually stops it.",
    "output_logit_divergence": "The measurement suggests output logit divergence: a z-loss "
    "(1e-4 * logsumexp^2, PaLM), a final norm before the head, or a lower lr.",
    "grad_norm_surge": "The measurement suggests the step is becoming unstable at this lr: "
    "gradient clipping (clip_grad_norm_) or a lower lr.",
    "adam_update_surge": "The measurement suggests Adam is about to take a step far larger "
    "than its usual (after a quiet phase its second moment decayed, Molybog et al. 2023): "
    "clipping, a larger eps, a higher beta2, or a lower lr.",
    "adam_second_moment_stale": "The measurement suggests one batch far outside the recent "
    "gradients: after a quiet phase Adam's second moment decayed (Molybog et al. 2023), and its "
    "momentum will carry this batch's direction for the next steps. Skipping the batch (PaLM "
    "skips the batches before a spike), update clipping (StableAdamW / Adafactor, Wortsman et "
    "al. 2023) or a lower lr.",
    "first_step_update_large": "The measurement suggests the first steps will replace the "
    "initialisation: a linear warmup of the lr over the first hundreds of steps.",
    "loss_spike": "A loss spike without a mechanism this check watches: look at the batch of "
    "that step.",
    "loss_rising": "The loss is rising without a mechanism this check watches.",
}
SEVERITY: dict[Mechanism, Literal["warning", "info"]] = {
    "attention_logit_growth": "warning",
    "output_logit_divergence": "warning",
    "grad_norm_surge": "warning",
    "adam_update_surge": "warning",
    "adam_second_moment_stale": "warning",
    "first_step_update_large": "warning",
    "loss_spike": "info",
    "loss_rising": "info",
}


class _Median:
    """The last :data:`HISTORY` values and their median (None before ``least`` values)."""

    __slots__ = ("_least", "_sorted", "values")

    def __init__(self, least: int = WARM_ATTEMPTS) -> None:
        self.values: deque[float] = deque(maxlen=HISTORY)
        self._sorted: list[float] = []
        """The same values kept sorted (insort / remove: no sort per attempt)."""
        self._least = least

    def median(self) -> float | None:
        count = len(self._sorted)
        if count < self._least:
            return None
        middle = count // 2
        if count % 2:
            return self._sorted[middle]
        return (self._sorted[middle - 1] + self._sorted[middle]) / 2

    def push(self, value: float) -> None:
        if not math.isfinite(value):
            return
        if len(self.values) == HISTORY:
            del self._sorted[bisect.bisect_left(self._sorted, self.values[0])]
        self.values.append(value)
        bisect.insort(self._sorted, value)


class StabilityCheck(Check):
    """Warns of loss spikes and divergence before they happen (see the module docstring).

    Args:
        roster: the watched parameters.
        optimizer: the optimizer whose upcoming update is sampled (held by weak reference).
        probe_every: attempts between forward probes (attention logits, log Z).
        adam_every: attempts between samples of the upcoming update.
        action: ``warn`` (default) or ``collect`` / ``raise``.
        keep: which steps spike forensics keeps (``_spike_keep.py``): ``spikes`` or
            ``every_step``.
    """

    name = "stability"
    site = "S-B"

    def __init__(
        self,
        roster: Roster,
        optimizer: torch.optim.Optimizer,
        *,
        probe_every: int = 10,
        adam_every: int = 50,
        action: Action = "warn",
        keep: Keep = "spikes",
    ) -> None:
        super().__init__(roster, action, {"probe_every": probe_every, "adam_every": adam_every})
        self._optimizer = weakref.ref(optimizer)
        model = roster.model_ref()
        self._probe = ForwardProbe(model) if model is not None else None
        self.spikes = (
            SpikeKeeper(model, optimizer, self._probe, keep) if model is not None else None
        )
        """Spike forensics' evidence (``session.spike_forensics()``)."""
        self._ema: float | None = None
        self._ema_min = math.inf
        self._losses = _Median()
        self._loss_count = 0
        self._last_loss: float | None = None
        self._blocks: dict[str, _Median] = {}
        self._surges: deque[set[str]] = deque(maxlen=3)
        self._attention: list[tuple[int, str, float]] = []
        """(attempt, layer, max logit) of the largest layer per probe."""
        self._entropy: list[tuple[int, str, float]] = []
        """(attempt, layer, entropy) of the layer whose head has the least mean entropy."""
        self._log_z: list[tuple[int, float, float]] = []
        """(attempt, mean, max) per probe."""
        self._updates = _Median(least=3)
        """Upcoming update ratios per unit lr (a warmup raises the ratio, not this)."""
        self._update_trend: list[tuple[int, float]] = []
        self._last_sampled_lr: float | None = None
        self._block_of: dict[int, str] = {}
        self._found: dict[Mechanism, dict[str, Any]] = {}
        self._is_first = True
        self.timeline = TimelineRecorder(order=map(self._block, range(len(roster.infos))))
        """The values judged here, per attempt and layer, for the dashboard's timeline."""

    # ----- set-up ---------------------------------------------------------------------------------
    def install(self, stack: contextlib.ExitStack) -> None:
        if self._probe is not None:
            self._probe.install(stack)
        if self.spikes is not None:
            self.spikes.install(stack)

    def on_pause(self) -> None:
        if self._probe is not None:
            self._probe.reading = None

    def _block(self, index: int) -> str:
        block = self._block_of.get(index)
        if block is None:
            name = self.roster.infos[index].name
            match = _BLOCK.match(name)
            block = match.group(1) if match else name.partition(".")[0]
            self._block_of[index] = block
        return block

    # ----- site callbacks -------------------------------------------------------------------------
    def on_loss(self, attempt: Attempt) -> None:
        loss = attempt.loss
        if loss is not None:
            self.timeline.add_loss(attempt.index, loss)
        if loss is None or not math.isfinite(loss):
            return
        self._loss_count += 1
        alpha = 2 / (EMA_SPAN + 1)
        self._ema = loss if self._ema is None else self._ema + alpha * (loss - self._ema)
        if self._loss_count >= WARM_ATTEMPTS:
            self._ema_min = min(self._ema_min, self._ema)
        median = self._losses.median()
        if median is not None and median > 0 and loss > SPIKE * median:
            self._record("loss_spike", attempt.index, "", {"loss": loss, "median": median})
            if self.spikes is not None:
                self.spikes.mark_spike(attempt.index, loss, median)
        self._losses.push(loss)
        self._last_loss = loss

    def on_attempt(self, attempt: Attempt) -> Finding | None:
        self.evaluations += 1
        reading = self._take_reading()
        norms = self._block_norms(attempt.step_norms) if attempt.step_norms else {}
        surged = self._surged(norms)
        optimizer = self._optimizer()
        lr = _first_lr(optimizer)
        sample_update = optimizer is not None and (
            self._is_first
            or attempt.index % self.options["adam_every"] == 0
            or bool(self._surges and self._surges[-1])
            or (
                lr is not None
                and bool(self._last_sampled_lr)
                and lr > 2 * (self._last_sampled_lr or 0)
            )
        )
        own_norms = reading is not None and not attempt.step_norms
        values, layout = self._read(reading, own_norms, optimizer if sample_update else None)
        if own_norms:
            norms = self._block_norms(layout.pop("norms", {}))
            surged = self._surged(norms)
        self.timeline.add("grad_norm", attempt.index, norms)
        if reading is not None:
            self._note_reading(attempt.index, reading, values)
        if "update" in layout:
            upcoming, moved, weights, surprise = layout["update"]
            self._note_update(attempt.index, upcoming, moved, weights, lr)
            self._note_surprise(attempt.index, upcoming, surprise)
            owners = [self.roster.optimized[p] for p in upcoming.positions]
            self.timeline.add(
                "update_ratio", attempt.index, self._block_ratios(owners, moved, weights)
            )
            self._last_sampled_lr = lr
        self._is_first = False
        if self.spikes is not None:
            armed = bool(surged) or self._is_rising()  # a precursor: keep the weights per step
            self.spikes.on_step_site(attempt.index, attempt.loss, is_armed=armed)
        self._judge(attempt.index, surged, norms)
        if self._probe is not None:
            self._probe.is_due = (attempt.index + 1) % self.options["probe_every"] == 0
        return self._due_finding()

    # ----- reading --------------------------------------------------------------------------------
    def _take_reading(self) -> ProbeReading | None:
        if self._probe is None:
            return None
        reading, self._probe.reading = self._probe.reading, None
        return reading

    def _read(
        self,
        reading: ProbeReading | None,
        own_norms: bool,
        optimizer: torch.optim.Optimizer | None,
    ) -> tuple[list[float], dict[str, Any]]:
        """One host read of the probe's values, the gradient norms this check launches itself
        (a session that reads none) and the upcoming update's norms."""
        tensors = reading.tensors() if reading is not None else []
        layout: dict[str, Any] = {}
        tail: list[tuple[str, Any, int]] = []
        tensors_list = self.roster.tensors
        if own_norms:
            present = [(i, tensors_list[i].grad) for i in self.roster.optimized]
            held = [(i, g) for i, g in present if g is not None]
            groups = device_norms([g for _, g in held], [i for i, _ in held]) if held else []
            order = [i for positions, _ in groups for i in positions]
            tensors.extend(n for _, n in groups)
            tail.append(("norms", order, len(order)))
        if optimizer is not None:
            params = [tensors_list[i] for i in self.roster.optimized]
            upcoming = upcoming_ratios(optimizer, params)
            if upcoming is not None and upcoming.moved:
                tensors.extend(upcoming.moved + upcoming.weights + upcoming.surprise)
                tail.append(("update", upcoming, len(upcoming.moved) * 3))
        values = read_host(tensors) if tensors else []
        cursor = sum(t.numel() for t in reading.tensors()) if reading is not None else 0
        for key, order, count in tail:
            chunk = values[cursor : cursor + count]
            cursor += count
            if key == "norms":
                layout["norms"] = dict(zip(order, chunk))
            else:
                third = count // 3
                layout["update"] = (
                    order,
                    chunk[:third],
                    chunk[third : 2 * third],
                    chunk[2 * third :],
                )
        return values, layout

    def _block_norms(self, step_norms: dict[int, float]) -> dict[str, float]:
        squares: dict[str, float] = {}
        for index, norm in step_norms.items():
            block = self._block(index)
            squares[block] = squares.get(block, 0.0) + norm * norm
        return {block: math.sqrt(total) for block, total in squares.items()}

    def _block_ratios(
        self, owners: list[int], moved: list[float], weights: list[float]
    ) -> dict[str, float]:
        """Per block: ||update|| / ||weights|| over its parameters (empty when the update's
        parameters cannot be matched to the roster's)."""
        if len(owners) != len(moved):
            return {}
        squares: dict[str, list[float]] = {}
        for index, m, w in zip(owners, moved, weights):
            total = squares.setdefault(self._block(index), [0.0, 0.0])
            total[0] += m * m
            total[1] += w * w
        ratios = {b: ratio(math.sqrt(m), math.sqrt(w)) for b, (m, w) in squares.items()}
        return {b: r for b, r in ratios.items() if r is not None}

    def _surged(self, norms: dict[str, float]) -> set[str]:
        """Blocks whose norm is :data:`SURGE` x their running median now (medians updated)."""
        if not norms:
            return set()
        now = set()
        for block, norm in norms.items():
            history = self._blocks.get(block)
            if history is None:
                history = self._blocks[block] = _Median()
            median = history.median()
            if median is not None and median > 0 and norm > SURGE * median:
                now.add(block)
            history.push(norm)
        self._surges.append(now)
        counts: dict[str, int] = {}
        for seen in self._surges:
            for block in seen:
                counts[block] = counts.get(block, 0) + 1
        return {block for block, n in counts.items() if n >= 2 and block in now}

    def _note_reading(self, index: int, reading: ProbeReading, values: list[float]) -> None:
        if reading.attention:
            maxes = values[0 : 2 * len(reading.attention) : 2]
            entropies = values[1 : 2 * len(reading.attention) : 2]
            per_layer: dict[str, float] = {}
            for (layer, _), value in zip(reading.attention, maxes):
                per_layer[layer] = max(per_layer.get(layer, -math.inf), value)
            self.timeline.add("attention_logit", index, per_layer)
            best = max(range(len(maxes)), key=lambda i: maxes[i])
            self._attention.append((index, reading.attention[best][0], maxes[best]))
            del self._attention[:-HISTORY]
            least = min(range(len(entropies)), key=lambda i: entropies[i])
            self._entropy.append((index, reading.attention[least][0], entropies[least]))
            del self._entropy[:-HISTORY]
        if reading.log_z is not None:
            start = 2 * len(reading.attention)
            self._log_z.append((index, values[start], values[start + 1]))
            del self._log_z[:-HISTORY]
        if reading.activations:
            start = 2 * len(reading.attention) + (2 if reading.log_z is not None else 0)
            rms = values[start : start + len(reading.activations)]
            self.timeline.add(
                "activation_rms", index, dict(zip((n for n, _ in reading.activations), rms))
            )

    def _note_surprise(self, index: int, upcoming: Upcoming, surprise: list[float]) -> None:
        """``adam_second_moment_stale``: the median over tensors of how far Adam's second moment
        lags the gradient (:class:`._adam.Upcoming`) above :data:`STALE`, judged from
        :data:`WARM_ATTEMPTS` on. The whole model's gradient outgrew what the second moment has
        seen, not one tensor's (a single bias's gradient jumps in healthy runs)."""
        seen = [(s, p) for s, p in zip(surprise, upcoming.positions) if math.isfinite(s)]
        if index < WARM_ATTEMPTS or not seen:
            return
        typical = statistics.median(s for s, _ in seen)
        if typical > STALE:
            value, position = max(seen)
            block = self._block(self.roster.optimized[position])
            self._record(
                "adam_second_moment_stale", index, block, {"lag": typical, "lag_max": value}
            )

    def _note_update(
        self,
        index: int,
        upcoming: Upcoming,
        moved: list[float],
        weights: list[float],
        lr: float | None,
    ) -> None:
        matrices = upcoming.matrices
        total = ratio(
            math.sqrt(math.fsum(m * m for m in moved)),
            math.sqrt(math.fsum(w * w for w in weights)),
        )
        if total is None or not lr:
            return
        if self._is_first:
            per_matrix = [
                r
                for m, w, is_matrix in zip(moved, weights, matrices)
                if is_matrix
                for r in (ratio(m, w),)
                if r is not None
            ]
            typical = statistics.median(per_matrix) if per_matrix else total
            if typical > FIRST_STEP_RATIO_HIGH:
                self._record(
                    "first_step_update_large",
                    index,
                    "",
                    {"update_ratio": typical, "lr": _first_lr(self._optimizer())},
                )
            return
        per_lr = total / lr
        median = self._updates.median() if index >= QUIET_ATTEMPTS else None
        jump = lr / self._last_sampled_lr if self._last_sampled_lr else 1.0
        is_surge = median is not None and per_lr > UPDATE_SURGE * median
        if total > UPDATE_RATIO_HIGH and (is_surge or jump >= UPDATE_SURGE):
            self._record(
                "adam_update_surge",
                index,
                "",
                {
                    "update_ratio": total,
                    "median_ratio": (median or per_lr / jump) * lr,
                    "lr": lr,
                    "lr_jump": jump,
                },
            )
        self._updates.push(per_lr)
        self._update_trend.append((index, total))
        del self._update_trend[:-HISTORY]

    # ----- judging --------------------------------------------------------------------------------
    def _is_rising(self) -> bool:
        return (
            self._loss_count >= WARM_ATTEMPTS
            and self._ema is not None
            and math.isfinite(self._ema_min)
            and self._ema > RISE * self._ema_min
        )

    def _is_log_z_rising(self) -> bool:
        """The output logits' log Z turned upward: its max 1.2x the median of the earlier probes,
        or its mean :data:`LOG_Z_RETURN` x the lowest it fell to after its peak (a model's log Z
        rises while it learns, then settles; measured on ``tests/stability``: 7.8 -> 7.1 -> 7.6
        before the output logits diverged, 8.1 -> 6.8 with no rise in the final-norm twin)."""
        if len(self._log_z) < 3:
            return False
        if self._log_z[-1][2] > 1.2 * statistics.median(z for _, _, z in self._log_z[:-1]):
            return True
        means = [m for _, m, _ in self._log_z]
        peak = max(range(len(means)), key=means.__getitem__)
        low = min(means[peak:])
        return means[-1] > LOG_Z_RETURN * low

    def _judge(self, index: int, surged: set[str], norms: dict[str, float]) -> None:
        rising = self._is_rising()
        if self._attention and self._attention[-1][2] > ATTENTION_LOGIT_HIGH and rising:
            _, layer, value = self._attention[-1]
            first = next(a for a, _, v in self._attention if v > ATTENTION_LOGIT_HIGH)
            self._record(
                "attention_logit_growth",
                index,
                layer,
                {
                    "max_logit": value,
                    "above_since_attempt": first,
                    "trend": [[a, v] for a, _, v in self._attention[-8:]],
                    "min_entropy": self._entropy[-1][2] if self._entropy else None,
                    "min_entropy_layer": self._entropy[-1][1] if self._entropy else "",
                    "loss_ema": self._ema,
                    "loss_ema_min": self._ema_min,
                },
            )
        median = self._losses.median()
        loss_high = (
            self._last_loss is not None
            and median is not None
            and self._last_loss > SURGE_LOSS * median
        )
        if surged and loss_high:
            block = max(surged, key=lambda b: norms[b] / (self._blocks[b].median() or 1.0))
            log_z_up = self._is_log_z_rising()
            mechanism: Mechanism = "output_logit_divergence" if log_z_up else "grad_norm_surge"
            self._record(
                mechanism,
                index,
                block,
                {
                    "grad_norm": norms[block],
                    "median": self._blocks[block].median(),
                    "loss": self._last_loss,
                    "loss_median": median,
                    "log_z": [[a, m, z] for a, m, z in self._log_z[-4:]],
                },
            )
        if rising and not any(SEVERITY[m] == "warning" for m in self._found):
            self._record(
                "loss_rising", index, "", {"loss_ema": self._ema, "loss_ema_min": self._ema_min}
            )

    def _record(self, mechanism: Mechanism, index: int, layer: str, fields: dict[str, Any]) -> None:
        entry = self._found.get(mechanism)
        if entry is None:
            self._found[mechanism] = {
                "mechanism": mechanism,
                "first_attempt": index,
                "last_attempt": index,
                "layer": layer,
                "count": 1,
                "is_emitted": False,
                **fields,
            }
            return
        entry.update(last_attempt=index, count=entry["count"] + 1)

    def _due_finding(self) -> Finding | None:
        raised = None
        for mechanism, entry in self._found.items():
            if entry["is_emitted"] or SEVERITY[mechanism] != "warning":
                continue
            entry["is_emitted"] = True
            finding = self._finding(mechanism, entry)
            raised = self.act(finding) or raised
        return raised

    # ----- results --------------------------------------------------------------------------------
    def findings(self) -> list[Finding]:
        return [self._finding(m, e) for m, e in self._found.items()]

    def _finding(self, mechanism: Mechanism, entry: dict[str, Any]) -> Finding:
        fields = {k: v for k, v in entry.items() if k != "is_emitted"}
        return Finding(
            mechanism,
            SEVERITY[mechanism],
            _message(mechanism, entry),
            where=Where(module=entry["layer"]) if entry["layer"] else None,
            remedy=REMEDY[mechanism],
            fields={"code": mechanism, **fields},
        )


def _message(mechanism: Mechanism, e: dict[str, Any]) -> str:
    at = f"from attempt {e['first_attempt']}"
    if mechanism == "attention_logit_growth":
        trend = " -> ".join(f"{v:.3g}" for _, v in e["trend"][-4:])
        return (
            f"Attention logit growth in {e['layer']}: its max pre-softmax logit is "
            f"{e['max_logit']:.3g} (above {ATTENTION_LOGIT_HIGH:g} since attempt "
            f"{e['above_since_attempt']}; trend {trend}) while the loss EMA is "
            f"{e['loss_ema']:.4g}, {e['loss_ema'] / e['loss_ema_min']:.2f}x its minimum ({at})"
            + (
                f"; the least mean attention entropy is {e['min_entropy']:.2g} nats, in "
                f"{e['min_entropy_layer']}."
                if e.get("min_entropy") is not None
                else "."
            )
        )
    if mechanism in ("output_logit_divergence", "grad_norm_surge"):
        what = (
            "Output logit divergence: the final logits' log Z rose and "
            if mechanism == "output_logit_divergence"
            else "Gradient norm surge: "
        )
        return (
            f"{what}{e['layer']}'s gradient norm is {e['grad_norm']:.3g}, "
            f"{e['grad_norm'] / e['median']:.1f}x its running median, on 2 of 3 attempts while "
            f"the loss {e['loss']:.4g} is {e['loss'] / e['loss_median']:.2f}x its median ({at})."
        )
    if mechanism == "adam_update_surge":
        cause = (
            f"the lr rose {e['lr_jump']:.3g}x since the last sample"
            if e["lr_jump"] >= UPDATE_SURGE
            else "per unit lr, against the run's median"
        )
        return (
            f"The update the optimizer is about to take is {e['update_ratio']:.3g} of the "
            f"weights' norm, {e['update_ratio'] / e['median_ratio']:.1f}x the run's usual "
            f"({cause}; {at})."
        )
    if mechanism == "adam_second_moment_stale":
        return (
            f"Adam's second moment is stale: the gradient is {e['lag']:.3g}x the RMS it expects "
            f"(median over tensors; {e['lag_max']:.3g}x in {e['layer']}, about 1 in steady "
            "training), so "
            f"this step moves every weight by about the lr along this batch's direction and the "
            f"momentum carries it over the next steps ({at})."
        )
    if mechanism == "first_step_update_large":
        return (
            f"The first update will move a typical weight matrix by {e['update_ratio']:.3g} of "
            f"its norm (the median over matrices) at "
            f"lr {e['lr']:g} (Adam's first step moves every element by the lr): it replaces "
            "the initialisation."
        )
    if mechanism == "loss_spike":
        return (
            f"The loss spiked to {e['loss']:.4g}, {e['loss'] / e['median']:.1f}x its running "
            f"median ({at}; {e['count']} spike(s))."
        )
    return (
        f"The loss EMA rose to {e['loss_ema']:.4g}, {e['loss_ema'] / e['loss_ema_min']:.2f}x "
        f"its minimum ({at})."
    )


def _first_lr(optimizer: torch.optim.Optimizer | None) -> float | None:
    if optimizer is None or not optimizer.param_groups:
        return None
    lr = optimizer.param_groups[0].get("lr")
    return float(lr) if isinstance(lr, (int, float)) else None
