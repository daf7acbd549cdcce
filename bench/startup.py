"""What the command line costs before it does anything: ``--help`` and imports.

    .venv/bin/python bench/startup.py [--runs 5] [--callgrind]

For ``queuey --help``, each command's ``--help`` and ``import queuey_cli.worker`` (what a
worker imports before its first job), the best wall-clock time of ``--runs`` launches
(the best, because load only ever adds to it), and with ``--callgrind`` the instructions
each launch executes (valgrind, immune to load; a few seconds each), beside Python's own
start (``python -c pass``). The targets of issue 25: every ``--help`` under 0.2 s, the
first job within 0.25 s of launch (bench/run.py measures that one). Never run as a test.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import procs

COMMANDS = [
    "worker",
    "enqueue",
    "job",
    "jobs",
    "cancel",
    "queues",
    "handlers",
    "scheduler",
    "schema",
    "dlq",
    "config",
    "schedules",
    "workers",
    "migrate",
    "dashboard",
]


def launches() -> dict[str, list[str]]:
    """Each launch measured: its label and argv."""
    py = sys.executable
    out = {
        "python -c pass": [py, "-c", "pass"],
        "import queuey_cli.worker": [py, "-c", "import queuey_cli.worker"],
        "queuey --help": [py, "-m", "queuey_cli", "--help"],
    }
    for command in COMMANDS:
        out[f"queuey {command} --help"] = [py, "-m", "queuey_cli", command, "--help"]
    return out


def best_time(argv: list[str], runs: int) -> float:
    """The shortest of ``runs`` launches, in seconds."""
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False, env=_env())
        best = min(best, time.perf_counter() - started)
    return best


def instructions(argv: list[str]) -> int:
    """Instructions one launch executes (callgrind's total)."""
    out = Path(tempfile.mkdtemp()) / "callgrind.out"
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
        capture_output=True,
        check=False,
        env=_env(),
    )
    found = re.search(r"^(?:summary|totals):\s+(\d+)", out.read_text(errors="replace"), re.M)
    return int(found.group(1)) if found else 0


def _env() -> dict[str, str]:
    # A terminal's width does not matter here; no colour, as in a pipe.
    return {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--only", default="", help="Only launches whose label has this.")
    args = parser.parse_args()
    procs.compile_sources()
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average {load}")
    extra = " instructions (M) |" * args.callgrind
    print(f"| launch | best of {args.runs} (s) |{extra}")
    print("|---|---|" + "---|" * args.callgrind)
    for label, argv in launches().items():
        if args.only not in label:
            continue
        row = f"| {label} | {best_time(argv, args.runs):.3f} |"
        if args.callgrind:
            row += f" {instructions(argv) / 1e6:,.0f} |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
