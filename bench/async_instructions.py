"""Instructions an ``async def`` no-op job costs the worker, beside a plain one, counted
by callgrind (load-immune).

    .venv/bin/python bench/async_instructions.py [--backends memory,sqlite,rabbitmq]
        [--jobs 6000] [--small 2000]

CPU time moves with the machine's load; instruction counts do not. For each backend and
each side (``async``: ``async def`` no-op jobs, async cap 100; ``thread``: plain no-op
jobs), this runs bench/async_handlers.py's ``run`` (8 job threads, prefetch 100) in one
process under ``valgrind --tool=callgrind --instr-atstart=no``, with instrumentation
switched on (``callgrind_control -i on``) only from the worker's start until every job
is settled: enqueueing is not counted. Twice, with ``--small`` and ``--jobs`` jobs: the
difference over the difference in jobs is one job's cost. Under valgrind threads run one
at a time, so this counts the work, not the waits (nor the kernel's share of a thread
switch). ``rabbitmq`` counts the worker process only, on ``$QUEUEY_TEST_AMQP_URL``.
The ratio printed is the thread job's instructions over the async job's: 1.00 means an
async no-op job costs what a thread one does; the target is >= 0.90 (within 10%).
Never run as a test.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import procs  # noqa: E402 - bench/procs.py, beside this file


def one(kind: str, side: str, jobs: int) -> None:
    """Run ``jobs`` no-op jobs of ``side`` on ``kind`` in this process (what is counted)."""
    sys.path.insert(0, str(HERE))
    import async_handlers as bench  # noqa: PLC0415 - beside this file

    def instrument(on: bool) -> None:
        flag = "on" if on else "off"
        control = ["callgrind_control", "-i", flag, str(os.getpid())]
        subprocess.run(control, check=False, capture_output=True)

    fn = bench.noop_async if side == "async" else bench.noop_thread
    cap = bench.NOOP_PREFETCH if side == "async" else None
    done = bench.run(
        kind,
        fn,
        jobs,
        prefetch=bench.NOOP_PREFETCH,
        concurrency=bench.NOOP_THREADS,
        cap=cap,
        around=instrument,
        poll=0.05,  # the looks are counted too: few, whatever the run's length
    )
    print(f"{side} {kind} {jobs}: {done.wall:.1f}s", file=sys.stderr)


def count(kind: str, side: str, jobs: int) -> int:
    """Instructions (Ir) of the worker phase of one process running ``jobs`` jobs."""
    out = Path(tempfile.mkdtemp()) / "callgrind.out"
    argv = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}",
        sys.executable,  # the venv's (a symlink valgrind follows), not its target
        __file__,
        "--one",
        f"{kind}:{side}:{jobs}",
    ]
    subprocess.run(argv, check=True, capture_output=True)
    return procs.callgrind_total(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="memory,sqlite")
    parser.add_argument("--jobs", type=int, default=6000)
    parser.add_argument("--small", type=int, default=2000)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        kind, side, jobs = args.one.split(":")
        one(kind, side, int(jobs))
        return
    span = args.jobs - args.small
    for kind in args.backends.split(","):
        per_job = {}
        for side in ("async", "thread"):
            per_job[side] = (count(kind, side, args.jobs) - count(kind, side, args.small)) / span
        load = "/".join(f"{x:.1f}" for x in os.getloadavg())
        ratio = per_job["thread"] / per_job["async"]
        print(
            f"{kind}: async {per_job['async'] / 1e3:,.0f} k instructions/job, thread "
            f"{per_job['thread'] / 1e3:,.0f} k; thread / async {ratio:.2f} "
            f"(load average {load})",
            flush=True,
        )


if __name__ == "__main__":
    main()
