"""``--processes 2`` against 1 on CPU-bound jobs, in CPU terms, and the supervisor's cost.

    QUEUEY_BENCH_URL=amqp://guest:guest@127.0.0.1:5672/q-perf \\
        .venv/bin/python bench/processes.py [--jobs 2000] [--work 20000] [--rounds 3]

Each round fills the bench queue with ``--jobs`` CPU-bound jobs (``--work`` rounds of
pure Python each, which hold the GIL) and drains it with ``queuey worker --processes 1``
then ``--processes 2`` (the order alternates between rounds), timed from launch until
the queue is empty, as bench/run.py times every worker; rates and CPU are taken from
the first delivery on (the queue's ready count falling below the batch's; launch left
out: each process pays its own imports once). Besides
the wall-clock ratio (meaningful only on a machine whose two cores are free), it reads
the CPU seconds of each process from /proc: the supervisor's own (its CPU ÷ jobs: the
target is under 5 us), and every worker process's. The *CPU scaling* figure is the
throughput two processes would reach with a core each, given what each job costs them:
2 x (CPU per job, one process) / (CPU per job, two processes); a shared machine moves
it far less than it moves wall-clock ratios. Never run as a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).parent))

import procs
from run import THREADS, measure


def _cpu_ns(pid: int) -> int:
    """CPU time of every live thread of ``pid``, in ns (``/proc/.../schedstat``): the
    supervisor uses a few clock ticks in all, below what ``cpu_times()`` resolves."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


def drain(processes: int, jobs: int, work: int) -> dict[str, Any]:
    """One drain of ``jobs`` CPU-bound jobs; wall seconds and CPU seconds by process,
    from launch and from the first job on (launch left out)."""
    procs.purge("bench")
    measure("fill_queuey", jobs, f"cpu{work}")
    argv = procs.queuey_argv("bench", THREADS, "--processes", str(processes))
    counter = procs.Counter()
    run = procs.Run(argv, log=f"queuey-processes{processes}")
    children: dict[int, float] = {}
    at_first: dict[str, float] = {}

    def cpu() -> tuple[float, float]:
        # Each worker's CPU is read while it lives (a child's times go when it is reaped).
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(run.proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    times = child.cpu_times()
                    children[child.pid] = times.user + times.system
        if not children:  # one process: the worker itself, exited threads included
            own = psutil.Process(run.proc.pid).cpu_times()
            return own.user + own.system, 0.0
        return _cpu_ns(run.proc.pid) / 1e9, sum(children.values())

    def done() -> bool:
        ready = counter.ready("bench")
        # The first delivery: a worker process's job is not reported through the pipe
        # (the supervisor's children do not inherit it), the queue's count is.
        if not at_first and ready < jobs:
            at_first["supervisor"], at_first["children"] = cpu()
            at_first["time"] = time.perf_counter() - run.launched
        return ready == 0

    try:
        took = run.wait_until(done, timeout=900, every=0.02)
        supervisor, workers = cpu()
    finally:
        run.stop()
        counter.close()
    first = at_first["time"]
    # With one process there is no supervisor: the process launched is the worker.
    if not children:
        supervisor, workers = float("nan"), supervisor
        at_first["children"] = at_first["supervisor"]
        at_first["supervisor"] = float("nan")
    return {
        "seconds": took,
        "rate": jobs / took,
        "running_rate": (jobs - 1) / (took - first),
        "worker_cpu_us": workers / jobs * 1e6,
        "worker_running_cpu_us": (workers - at_first["children"]) / jobs * 1e6,
        "supervisor_cpu_s": supervisor,
        "supervisor_running_us": (supervisor - at_first["supervisor"]) / jobs * 1e6,
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
        "| round | jobs/s running, 1 / 2 processes | wall ratio | workers' CPU per job, "
        "1 / 2 (us) | CPU scaling | supervisor CPU, launch included (s) "
        "| supervisor per job, running (us) |"
    )
    print("|---|---|---|---|---|---|---|")
    walls, scalings, supervisors = [], [], []
    for n in range(1, args.rounds + 1):
        order = (1, 2) if n % 2 else (2, 1)
        got = {p: drain(p, args.jobs, args.work) for p in order}
        one, two = got[1], got[2]
        wall = two["running_rate"] / one["running_rate"]
        scaling = 2 * one["worker_running_cpu_us"] / two["worker_running_cpu_us"]
        walls.append(wall)
        scalings.append(scaling)
        supervisors.append(two["supervisor_running_us"])
        print(
            f"| {n} | {one['running_rate']:,.0f} / {two['running_rate']:,.0f} | {wall:.2f} "
            f"| {one['worker_running_cpu_us']:,.0f} / {two['worker_running_cpu_us']:,.0f} "
            f"| {scaling:.2f} | {two['supervisor_cpu_s']:.3f} "
            f"| {two['supervisor_running_us']:.1f} |",
            flush=True,
        )
    print(
        f"medians: wall ratio {statistics.median(walls):.2f}, CPU scaling "
        f"{statistics.median(scalings):.2f}, supervisor {statistics.median(supervisors):.1f} us "
        "a job once running"
    )
    print(f"load average after: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
