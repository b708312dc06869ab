"""Side-by-side timing for the benchmarks: interleaved runs, min and median, one table.

Ratios are measured in one process with the contenders interleaved round by round, so a load
change on the machine hits every contender alike. Report min (the least disturbed run), median
and the paired ratio (the median over rounds of each round's contender / baseline, the two
timed seconds apart: a load that drifts over minutes cancels in each pair); targets are checked
on the min ratio unless a benchmark judges on the paired one.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    name: str
    seconds: tuple[float, ...]

    @property
    def min_s(self) -> float:
        return min(self.seconds)

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)


def interleaved(
    contenders: Sequence[tuple[str, Callable[[], object]]],
    *,
    rounds: int = 7,
    warmup: int = 2,
    repeats: int = 1,
) -> list[Timing]:
    """Time each contender ``rounds`` times, interleaved, after ``warmup`` untimed rounds; with
    ``repeats`` > 1 a sample is the least of that many back-to-back calls (a preemption, or a
    cost the previous contender left behind, lands in a dropped call)."""
    for _ in range(warmup):
        for _, fn in contenders:
            fn()
    samples: dict[str, list[float]] = {name: [] for name, _ in contenders}
    for _ in range(rounds):
        for name, fn in contenders:
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - start)
            samples[name].append(best)
    return [Timing(name, tuple(samples[name])) for name, _ in contenders]


def lock_memory(*, future: bool = True) -> None:
    """``mlockall``: this VM's kernel pages out cold pages (DAMON ``pageout``: 308k refaults of
    libtorch's and python's code pages in two hours), and a refault lands in some timed call at
    random. Locked, one checks session's paused GPT-2 steps at 1x128 spread 1.83-2.15 s against
    1.87-2.45 s. With ``future`` every later mapping is locked too, so each fresh ``mmap`` is
    faulted in whole when it is made (run with glibc keeping freed memory, as bench_checks
    does); without it only what is mapped now (the libraries' code) is locked. Needs root or a
    large ``RLIMIT_MEMLOCK``; without it the run goes on and says so."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mlockall(1 | (2 if future else 0)) != 0:  # MCL_CURRENT | MCL_FUTURE
        print(f"mlockall failed (errno {ctypes.get_errno()}): pages stay swappable-out")


def per_round_ratios(timing: Timing, base: Timing) -> list[float]:
    """Each round's ``timing`` / ``base`` (empty when the two were not timed in the same
    rounds)."""
    if len(timing.seconds) != len(base.seconds):
        return []
    return [t / b for t, b in zip(timing.seconds, base.seconds)]


def paired_ratio(timing: Timing, base: Timing) -> float:
    """The median of :func:`per_round_ratios` (NaN when there are none)."""
    ratios = per_round_ratios(timing, base)
    return statistics.median(ratios) if ratios else float("nan")


def paired_interval(
    timing: Timing, base: Timing, *, level: float = 0.9, resamples: int = 2000
) -> tuple[float, float]:
    """A bootstrap ``level`` interval of :func:`paired_ratio` (:func:`median_interval` of the
    per-round ratios); (NaN, NaN) when there are no paired rounds."""
    return median_interval(per_round_ratios(timing, base), level=level, resamples=resamples)


def median_interval(
    values: Sequence[float], *, level: float = 0.9, resamples: int = 2000
) -> tuple[float, float]:
    """A bootstrap ``level`` interval of the median of ``values`` (percentile method over
    ``resamples`` resamples, seeded, so a run's table is reproducible from its timings);
    (NaN, NaN) for no values."""
    if not values:
        return float("nan"), float("nan")
    draw = random.Random(0)
    medians = sorted(
        statistics.median(draw.choices(values, k=len(values))) for _ in range(resamples)
    )
    tail = (1 - level) / 2
    return medians[int(tail * resamples)], medians[min(resamples - 1, int((1 - tail) * resamples))]


def interval_verdict(interval: tuple[float, float], target: float) -> str:
    """ "yes" when the whole interval is within ``target``, "NO" when it is all above it, else
    "noisy": the run cannot tell (a ratio or a difference alike)."""
    low, high = interval
    return "yes" if high <= target else ("NO" if low > target else "noisy")


def ratio_rows(
    timings: Sequence[Timing],
    baseline: str,
    *,
    case: str,
    targets: dict[str, float] | None = None,
    judge: str = "min_ratio",
) -> list[dict[str, object]]:
    """Rows of a ratio table: each contender against ``baseline`` (min, median and paired
    ratios). A contender with a target is judged on the ``judge`` column; judged on
    ``"paired_ratio"``, the rows carry the ratio's 90% interval (:func:`paired_interval`) and
    the verdict is :func:`interval_verdict`'s."""
    base = next(t for t in timings if t.name == baseline)
    rows = []
    for timing in timings:
        target = (targets or {}).get(timing.name)
        ratios = {
            "min_ratio": timing.min_s / base.min_s,
            "median_ratio": timing.median_s / base.median_s,
            "paired_ratio": paired_ratio(timing, base),
        }
        row: dict[str, object] = {
            "case": case,
            "contender": timing.name,
            "min_ms": timing.min_s * 1e3,
            "median_ms": timing.median_s * 1e3,
            **ratios,
        }
        verdict = "" if target is None else ("yes" if ratios[judge] <= target else "NO")
        if judge == "paired_ratio":
            interval = paired_interval(timing, base)
            row["paired_90pct"] = f"{interval[0]:.3f}-{interval[1]:.3f}"
            verdict = "" if target is None else interval_verdict(interval, target)
        row["target"] = f"<= {target:.2f}x" if target else ""
        row["ok"] = verdict
        rows.append(row)
    return rows


def derived_row(
    case: str,
    contender: str,
    ratio: float,
    min_ms: float = float("nan"),
    *,
    column: str = "min_ratio",
    target: float | None = None,
) -> dict[str, object]:
    """A row computed from measured ones (an amortised or a self-timed ratio), in the columns
    of :func:`ratio_rows`: ``ratio`` stands in ``column`` (the ratio it was computed from), the
    other ratios are NaN; with a ``target`` the row is judged on it."""
    row: dict[str, object] = {
        "case": case,
        "contender": contender,
        "min_ms": min_ms,
        "median_ms": float("nan"),
        "min_ratio": float("nan"),
        "median_ratio": float("nan"),
        "paired_ratio": float("nan"),
        "target": "" if target is None else f"<= {target:.2f}x",
        "ok": "" if target is None else ("yes" if ratio <= target else "NO"),
    }
    row[column] = ratio
    return row


def status_mb(key: str) -> float:
    """A ``/proc/self/status`` memory figure in MB (``VmRSS:``, ``VmHWM:``; Linux only)."""
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(key):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"{key} not in /proc/self/status (this measurement needs Linux)")


def reset_peak_rss() -> float:
    """Reset the peak-RSS mark (``VmHWM``) to the current RSS and return that RSS in MB."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")
    return status_mb("VmRSS:")


def with_memory(rows: list[dict[str, object]], script: str) -> list[dict[str, object]]:
    """Add each row's memory figures: ``script --memory <contender>`` runs in a fresh process
    (``MALLOC_MMAP_THRESHOLD_=65536``, so freed activations go back to the OS and the resident
    set follows live memory) and prints a JSON dict as its last line."""
    for row in rows:
        out = subprocess.run(
            [sys.executable, script, "--memory", str(row["contender"])],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"},
        )
        row.update(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


def entry_point(main: Callable[[], None], measure_memory: Callable[[str], object]) -> None:
    """``bench_x.py`` runs ``main()``; ``bench_x.py --memory NAME`` (the fresh process of
    :func:`with_memory`) prints ``measure_memory(NAME)`` as its JSON last line."""
    if len(sys.argv) == 3 and sys.argv[1] == "--memory":
        print(json.dumps(measure_memory(sys.argv[2])))
    else:
        main()


def print_table(rows: Sequence[dict[str, object]]) -> None:
    """Print rows as a fixed-width table (floats with 2-3 significant decimals)."""
    if not rows:
        return
    columns = list(rows[0])
    cells = [[_fmt(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    return str(value)


def rss_growth_mb(run: Callable[[], object]) -> dict[str, float]:
    """Peak and retained resident-set growth of one call of ``run`` (after one warm-up call).

    Meant for a fresh process started with ``MALLOC_MMAP_THRESHOLD_=65536``, so glibc returns
    freed activations to the OS and the resident set follows live memory. The peak mark
    (``VmHWM``) is reset through ``/proc/self/clear_refs`` before the measured call;
    ``peak_MB`` is its growth during the call, ``held_MB`` what remains while the result is
    alive. tracemalloc would not see torch's C++ allocations, and torch has no CPU allocator
    statistics.
    """
    run()  # warm-up: lazy imports, caches
    gc.collect()
    before = reset_peak_rss()
    result = run()
    gc.collect()
    peak, after = status_mb("VmHWM:"), status_mb("VmRSS:")
    del result
    return {"peak_MB": peak - before, "held_MB": after - before}
