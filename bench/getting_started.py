"""Times docs/getting-started.md's "from nothing" commands in a fresh virtual environment.

    .venv/bin/python bench/getting_started.py [--rounds 3]

Set-up, not timed: a new virtual environment with queuey (this checkout) and pytest
installed, as `pip install queuey pytest` leaves one. Then, timed one by one, in a new
directory: `queuey init hello`, `pip install -e hello`, `pytest` inside it, `queuey
enqueue hello.hello '{"name": "ada"}'` and `queuey worker --burst` (the job runs on
hello/queuey.db). Prints each step's median over the rounds and their total. pip
builds the scaffold as a user's pip does (build isolation: it fetches hatchling from
the configured index). Never run as a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = [
    ("queuey init hello", ["{bin}/queuey", "init", "hello"], "."),
    ("pip install -e hello", ["{bin}/pip", "install", "-q", "-e", "hello"], "."),
    ("pytest", ["{bin}/pytest", "-q", "-p", "no:cacheprovider"], "hello"),
    (
        "queuey enqueue hello.hello ...",
        ["{bin}/queuey", "enqueue", "hello.hello", '{"name": "ada"}'],
        "hello",
    ),
    ("queuey worker --burst", ["{bin}/queuey", "worker", "--burst"], "hello"),
]


def run(args: list[str], cwd: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEY_")}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")


def one_round(work: Path) -> list[float]:
    venv = work / "venv"
    run([sys.executable, "-m", "venv", str(venv)], work)
    run([str(venv / "bin" / "pip"), "install", "-q", str(REPO), "pytest"], work)
    times = []
    for _, args, where in STEPS:
        start = time.perf_counter()
        run([a.replace("{bin}", str(venv / "bin")) for a in args], work / where)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    results = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="queuey-getting-started-") as work:
            results.append(one_round(Path(work)))
    for i, (name, _, _) in enumerate(STEPS):
        print(f"{statistics.median(r[i] for r in results):6.2f} s  {name}")
    print(f"{statistics.median(sum(r) for r in results):6.2f} s  in all (median of {rounds})")


if __name__ == "__main__":
    main()
