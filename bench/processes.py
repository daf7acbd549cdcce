"""``--processes 2`` against 1 on CPU-bound jobs, in CPU terms, and the supervisor's cost.

    QUEUEY_BENCH_URL=amqp://guest:guest@127.0.0.1:5672/q-perf \\
        .venv/bin/python bench/processes.py [--jobs 2000] [--work 20000] [--rounds 3]

Each round fills the bench queue with ``--jobs`` CPU-bound jobs (``--work`` rounds of
pure Python each, which hold the GIL) and drains it with ``queuey worker --processes 1``
then ``--processes 2`` (the order alternates between rounds), timed from launch until
the queue is empty, as bench/run.py times every worker. Besides the wall-clock ratio
(meaningful only on a machine whose two cores are free), it reads the CPU seconds of
each process from /proc: the supervisor's own (its CPU ÷ jobs: the target is under
5 us), and every worker process's. The *CPU scaling* figure is the throughput two
processes would reach with a core each, given what each job costs them:
2 x (CPU per job, one process) / (CPU per job, two processes); a shared machine
moves it far less than it moves wall-clock ratios. Never run as a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).parent))

import procs
from run import THREADS, measure


def drain(processes: int, jobs: int, work: int) -> dict[str, Any]:
    """One drain of ``jobs`` CPU-bound jobs; wall seconds and CPU seconds by process."""
    procs.purge("bench")
    measure("fill_queuey", jobs, f"cpu{work}")
    argv = procs.queuey_argv("bench", THREADS, "--processes", str(processes))
    counter = procs.Counter()
    run = procs.Run(argv, log=f"queuey-processes{processes}")
    children: dict[int, float] = {}

    def done() -> bool:
        # Each worker's CPU is read while it lives (a child's times go when it is reaped).
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(run.proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    times = child.cpu_times()
                    children[child.pid] = times.user + times.system
        return counter.ready("bench") == 0

    try:
        took = run.wait_until(done, timeout=900, every=0.05)
        done()
        own = psutil.Process(run.proc.pid).cpu_times()
        supervisor = own.user + own.system
    finally:
        run.stop()
        counter.close()
    # With one process there is no supervisor: the process launched is the worker.
    supervised = bool(children)
    workers = sum(children.values()) if supervised else supervisor
    return {
        "seconds": took,
        "rate": jobs / took,
        "worker_cpu_us": workers / jobs * 1e6,
        "supervisor_cpu_us": supervisor / jobs * 1e6 if supervised else float("nan"),
        "supervisor_cpu_s": supervisor if supervised else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--work", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    procs.compile_sources()
    print(f"load average before: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(
        "| round | 1 process (jobs/s) | 2 processes (jobs/s) | wall ratio | CPU per job, 1 (us) "
        "| CPU per job, 2 (us) | CPU scaling | supervisor CPU (s) | supervisor per job (us) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    walls, scalings, supervisors = [], [], []
    for n in range(1, args.rounds + 1):
        order = (1, 2) if n % 2 else (2, 1)
        got = {p: drain(p, args.jobs, args.work) for p in order}
        one, two = got[1], got[2]
        wall = two["rate"] / one["rate"]
        scaling = 2 * one["worker_cpu_us"] / two["worker_cpu_us"]
        walls.append(wall)
        scalings.append(scaling)
        supervisors.append(two["supervisor_cpu_us"])
        print(
            f"| {n} | {one['rate']:,.0f} | {two['rate']:,.0f} | {wall:.2f} "
            f"| {one['worker_cpu_us']:,.0f} | {two['worker_cpu_us']:,.0f} | {scaling:.2f} "
            f"| {two['supervisor_cpu_s']:.3f} | {two['supervisor_cpu_us']:.1f} |",
            flush=True,
        )
    print(
        f"medians: wall ratio {statistics.median(walls):.2f}, CPU scaling "
        f"{statistics.median(scalings):.2f}, supervisor {statistics.median(supervisors):.1f} us "
        "a job (launch included)"
    )
    print(f"load average after: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
