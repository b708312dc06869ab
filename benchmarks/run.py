"""Run every benchmark in this folder, one process each, and print their tables in order.

Usage: ``.venv/bin/python benchmarks/run.py [name ...]`` (names like ``capture`` select
``bench_capture.py``). Each benchmark measures its contenders side by side in one process; see
its docstring for the models, the targets and what the columns mean.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(selected: list[str]) -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    if selected:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in selected]
    failures = 0
    for script in scripts:
        print(f"\n== {script.stem} ==", flush=True)
        start = time.perf_counter()
        result = subprocess.run([sys.executable, str(script)], check=False)
        print(f"({time.perf_counter() - start:.0f} s)", flush=True)
        failures += result.returncode != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
