"""tl.recipes.triage wall time: the whole triage vs the 200 training steps it contains.

Cases (the triage's own tests use the same models):

* ``mlp 20-64-64-10``: the healthy twin of the bug zoo (tests/recipes/zoo.py), 64 examples of
  20 features, 10 classes, the caller's optimizer Adam lr=3e-4;
* ``gpt2 2-layer``: ``tests.models.tiny_gpt2()`` (n_embd 32, 4 heads, vocab 64), a (4, 16)
  token batch, a next-token loss, AdamW lr=3e-4, ``seq_dim=1`` (causal_dependency included).

Contenders, interleaved round by round: ``200 plain Adam steps`` (zero_grad, forward, loss,
backward, step on a deep copy: the floor of overfit_one_batch, the triage's largest part; the
baseline) and ``triage`` (every default check, ``live=False``). One intra-op thread: tiny
models on a shared 2-core machine run 10-15x slower with two (measured: 10.7 s vs 0.68 s for
one triage of an 8-32-3 MLP at load), which would measure the machine, not the triage.

Measured on the shared 2-core CPU box (2026-12-01): MLP triage 499 ms min / 617 ms median vs
376 / 419 ms for the 200 plain steps (1.33x / 1.47x); GPT-2 2-layer triage 2.72 / 2.83 s vs
2.19 / 2.64 s (1.24x / 1.07x).

Then the bug zoo (tests/recipes/zoo.py): one row per bug with the triage's lead, whether the
cause came first (``cause_right``: the root cause from the bug's catching check), whether its
twin is clean (no warn or fail row) and the wall time, then the totals. Last, GPT-2 small
(124M, random init, a 2 x 64 batch of input_ids/labels, a shifted cross-entropy, AdamW 3e-4):
its wall and CPU time on 2 threads, the load average before -> after, peak RSS (of the
process: run it alone for the triage's own), verdict and the time budget's notes
(``recipes/triage/_budget.py``), then each check's wall time. ``--no-gpt2-small`` skips it;
``--gpt2-small-only`` runs it alone (peak RSS about 5.2 GB; docs/benchmarks.md, "GPT-2 small:
the time budget", has the measured rows).

First of all, the public zoo (``tests/triage_public``, issue 41): bugs other people reported,
each with its accepted fix; the held-out half (frozen before triage was changed for it) and the
development half, one row per case (root cause, cause first, bugs named, fix accused, crash) and
their totals; then the healthy population (the corpus loops' ``triage_setup()`` and
``tests/corpus/triage_setups.py``): status and any warn/fail row per set-up
(``--public-only`` stops there).

Run: ``.venv/bin/python benchmarks/bench_triage.py`` (a few minutes).
"""

from __future__ import annotations

import copy
import os
import resource
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
import _timing  # noqa: E402

import torchlens_nb as tl  # noqa: E402
from tests import models  # noqa: E402
from tests.recipes import zoo  # noqa: E402

ROUNDS, WARMUP = 3, 1
STEPS = 200


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)
    )


def plain_steps(model: nn.Module, inputs: object, targets: torch.Tensor, loss_fn: object) -> None:
    clone = copy.deepcopy(model).train()
    optimizer = torch.optim.Adam(clone.parameters(), lr=3e-3)
    for _ in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        output = clone(**inputs) if isinstance(inputs, dict) else clone(inputs)
        logits = getattr(output, "logits", output)
        loss_fn(logits, targets).backward()  # type: ignore[operator]
        optimizer.step()


def cases() -> list[tuple[str, list[tuple[str, object]]]]:
    mlp, (x, y) = zoo.MLP(), zoo.batch()
    mlp_optimizer = torch.optim.Adam(mlp.parameters(), lr=zoo.HEALTHY_LR)
    ce = nn.CrossEntropyLoss()
    gpt2 = models.tiny_gpt2()
    ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
    return [
        (
            "mlp 20-64-64-10",
            [
                ("200 plain Adam steps", lambda: plain_steps(mlp, x, y, ce)),
                (
                    "triage",
                    lambda: tl.recipes.triage(mlp, (x, y), ce, optimizer=mlp_optimizer, live=False),
                ),
            ],
        ),
        (
            "gpt2 2-layer 4x16",
            [
                (
                    "200 plain Adam steps",
                    lambda: plain_steps(gpt2, {"input_ids": ids}, ids, next_token_loss),
                ),
                (
                    "triage",
                    lambda: tl.recipes.triage(
                        gpt2,
                        ({"input_ids": ids}, ids),
                        next_token_loss,
                        optimizer=torch.optim.AdamW,
                        lr=3e-4,
                        seq_dim=1,
                        num_classes=64,
                        loss_kind="cross_entropy",
                        live=False,
                    ),
                ),
            ],
        ),
    ]


def _bad_rows(report: tl.report.TriageReport) -> list[str]:
    return [r.check for r in report.rows if r.status in ("warn", "fail")]


def zoo_table() -> tuple[list[dict[str, object]], dict[str, object]]:
    """One row per zoo bug: lead, cause right, twin clean, wall time; and the totals."""
    twins: dict[str, tuple[bool, float]] = {}
    for name, twin in zoo.TWINS.items():
        began = time.perf_counter()
        report = tl.recipes.triage(**twin.arguments(), live=False)
        twins[name] = (not _bad_rows(report), time.perf_counter() - began)
    rows: list[dict[str, object]] = []
    walls: list[float] = []
    for bug in zoo.ZOO:
        began = time.perf_counter()
        report = tl.recipes.triage(**bug.call(broken=True), live=False)
        wall = time.perf_counter() - began
        walls.append(wall)
        root = report.root_cause
        rows.append(
            {
                "bug": bug.name,
                "cause_right": root is not None and root.check == bug.catching_check,
                "twin_clean": twins[bug.twin.name][0],
                "wall_s": wall,
                "lead": report.lead[:90],
            }
        )
    totals: dict[str, object] = {
        "bugs": len(rows),
        "cause_first": sum(bool(r["cause_right"]) for r in rows),
        "twins": len(twins),
        "twins_clean": sum(clean for clean, _ in twins.values()),
        "bug_wall_s": sum(walls),
        "twin_wall_s": sum(wall for _, wall in twins.values()),
    }
    return rows, totals


def public_half(name: str) -> tuple[list[dict[str, object]], dict[str, object]]:
    """One row per case of a half of the public zoo (tests/triage_public): the root cause,
    whether it names one of the case's bugs, bugs named / bugs, the fix accused, a crash."""
    from tests.triage_public.development import DEVELOPMENT
    from tests.triage_public.heldout import HELDOUT
    from tests.triage_public.heldout2 import HELDOUT2
    from tests.triage_public.scoring import score_half

    halves = {"held-out": HELDOUT, "held-out 2": HELDOUT2, "development": DEVELOPMENT}
    half = score_half(halves[name])
    rows: list[dict[str, object]] = [
        {
            "case": c.name,
            "root": c.root or "-",
            "cause_first": c.named_first,
            "named": f"{c.named}/{c.bugs}",
            "fix_accused": ",".join(c.fix_accused) or "no",
            "crash": c.crash or "no",
            "wall_s": c.seconds,
        }
        for c in half.cases
    ]
    done, multi = half.multi_all_named
    totals: dict[str, object] = {
        "half": name,
        "cases": len(half.cases),
        "cause_first": f"{half.named_first} ({100 * half.named_first / len(half.cases):.0f}%)",
        "bugs_named": f"{half.named}/{half.bugs}",
        "multi_bug_all_named": f"{done}/{multi}",
        "fixes_accused": len(half.fixes_accused),
        "crashes": len(half.crashes),
    }
    return rows, totals


def healthy_population() -> tuple[list[dict[str, object]], dict[str, object]]:
    """Triage on every healthy set-up (tests/corpus loops' triage_setup() and
    tests/corpus/triage_setups.py): status, warn/fail rows, non-info findings, wall."""
    from tests.triage_public.healthy import population, triage_arguments

    rows: list[dict[str, object]] = []
    for name, build in population().items():
        began = time.perf_counter()
        try:
            setup = build()
            assert setup is not None
            report = tl.recipes.triage(**triage_arguments(setup), live=False)
            bad = _bad_rows(report)
            accusing = [f.code for f in report.findings if f.severity != "info"]
            status, crash = report.status, "no"
        except Exception as error:  # the bench reports a crash as a result
            bad, accusing, status, crash = [], [], "crash", f"{type(error).__name__}: {error}"
        rows.append(
            {
                "setup": name,
                "status": status,
                "warn_or_fail_rows": ",".join(bad) or "none",
                "accusing_findings": ",".join(accusing) or "none",
                "crash": crash,
                "wall_s": time.perf_counter() - began,
            }
        )
    totals: dict[str, object] = {
        "setups": len(rows),
        "accused": sum(r["warn_or_fail_rows"] != "none" for r in rows),
        "crashes": sum(r["crash"] != "no" for r in rows),
    }
    return rows, totals


def gpt2_small() -> tuple[dict[str, object], list[dict[str, object]]]:
    """Triage of GPT-2 small (124M, random init) on a 2 x 64 batch, 2 threads: wall, CPU time,
    peak RSS, the load average around it, the verdict and the budget's notes; and each check's
    wall time (the profile: which checks take the time)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(attn_implementation="eager")).train()
    ids = torch.randint(0, 50257, (2, 64), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(zoo.decay_groups(model, 0.01), lr=3e-4)
    torch.set_num_threads(2)
    load_before = os.getloadavg()[0]
    cpu, began = time.process_time(), time.perf_counter()
    report = tl.recipes.triage(
        model,
        {"input_ids": ids, "labels": ids.clone()},
        next_token_loss,
        optimizer=optimizer,
        loss_kind="cross_entropy",
        num_classes=50257,
        live=False,
    )
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    torch.set_num_threads(1)
    row: dict[str, object] = {
        "case": "gpt2 small 124M, 2x64, AdamW 3e-4",
        "wall_s": wall,
        "cpu_s": cpu,
        "load_1min": f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}",
        "peak_rss_GB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
        "status": report.status,
        "warn_or_fail_rows": ",".join(_bad_rows(report)) or "none",
        "notes": " | ".join(n for n in report.disclosures if n.startswith("shortened")),
    }
    checks = [
        {"check": r.check, "status": r.status, "wall_s": r.elapsed_s, "lead": r.lead[:110]}
        for r in report.rows
    ]
    return row, checks


def main() -> int:
    torch.set_num_threads(1)
    if "--gpt2-small-only" in sys.argv:
        return _print_gpt2_small()
    for half in ("held-out", "held-out 2", "development"):
        cases_rows, totals = public_half(half)
        print(f"\npublic zoo, {half} half (tests/triage_public)\n")
        _timing.print_table(cases_rows)
        print()
        _timing.print_table([totals])
    print("\ntargets (both held-out halves): the cause first on >= 85%, every bug of a")
    print("multi-bug case named, no fix accused, no crash\n")
    healthy_rows, healthy_totals = healthy_population()
    _timing.print_table(healthy_rows)
    print()
    _timing.print_table([healthy_totals])
    print("\ntarget: no warn or fail row and no crash on any healthy set-up\n")
    if "--public-only" in sys.argv:
        return 0
    rows = []
    for case, contenders in cases():
        timings = _timing.interleaved(contenders, rounds=ROUNDS, warmup=WARMUP)  # type: ignore[arg-type]
        rows += _timing.ratio_rows(timings, "200 plain Adam steps", case=case)
    _timing.print_table(rows)
    print("\nno target: the triage's cost is mostly its 200 overfit steps (the baseline)\n")
    bugs, totals = zoo_table()
    _timing.print_table(bugs)
    print()
    _timing.print_table([totals])
    print("\ntargets: every twin clean; the cause first on >= 90% of the bugs\n")
    if "--no-gpt2-small" not in sys.argv:
        return _print_gpt2_small()
    return 0


def _print_gpt2_small() -> int:
    row, checks = gpt2_small()
    _timing.print_table([row])
    print()
    _timing.print_table(checks)
    print("\ntarget: within 60 s on 2 threads of the 2-core machine, status pass, no warn or fail")
    print("row (a healthy model); the CPU time and the load say how shared the machine was")
    return 0


if __name__ == "__main__":
    sys.exit(main())
