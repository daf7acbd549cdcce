"""Instructions a ``queuey worker`` spends per no-op job, counted by callgrind.

    .venv/bin/python bench/instructions.py [--jobs 3000] [--small 500]

CPU time moves with the machine's load; instructions do not. This runs ``queuey
worker`` (8 job threads, as bench/run.py does) under ``valgrind --tool=callgrind``
twice, on a queue holding ``--small`` and then ``--jobs`` no-op jobs, each run from
launch until the queue is empty and the worker is stopped with SIGTERM. The difference
divided by the difference in jobs is the instructions one job costs (launch, connect and
shutdown cancel out); the small run alone is roughly the cost of launch. Under valgrind
threads run one at a time, so this counts the work, not the waits. Never run as a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import procs
from run import THREADS, measure


def count(n: int, *extra: str) -> int:
    """Instructions (Ir) of one worker process draining ``n`` no-op jobs."""
    procs.purge("bench")
    measure("fill_queuey", n)
    out = Path(tempfile.mkdtemp()) / "callgrind.out"
    argv = procs.queuey_argv("bench", THREADS, *extra)
    # ``python -m queuey_cli`` rather than the console script, so valgrind runs Python.
    argv = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        "-m",
        "queuey_cli",
        *argv[1:],
    ]
    counter = procs.Counter()
    run = procs.Run(argv, log=f"callgrind-{n}")
    try:
        run.wait_until(lambda: counter.ready("bench") == 0, timeout=1200, every=0.05)
    finally:
        run.stop()
        counter.close()
    return procs.callgrind_total(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--small", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    procs.compile_sources()
    for _ in range(args.rounds):
        small = count(args.small)
        large = count(args.jobs)
        per_job = (large - small) / (args.jobs - args.small)
        load = "/".join(f"{x:.1f}" for x in os.getloadavg())
        print(
            f"instructions per job: {per_job / 1e3:,.0f} k; a {args.small}-job run "
            f"(launch to stop): {small / 1e6:,.0f} M (load average {load})",
            flush=True,
        )


if __name__ == "__main__":
    main()
