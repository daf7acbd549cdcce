"""The asyncio benchmark: ``async def`` jobs on the worker's event loop beside the same
jobs on threads, in one run.

    .venv/bin/python bench/async_handlers.py [--backend memory|sqlite|rabbitmq] [--rounds 3]

Each round measures, in one process and alternating the order of the two sides:

* I/O-bound: 10,000 jobs that each wait 20 ms (``await asyncio.sleep(0.02)``) with an
  async cap of 1,000, as a fraction of the ideal (10,000 x 20 ms / 1,000 = 0.2 s), and
  against the same jobs on 64 threads (``time.sleep(0.02)``);
* asyncio alone: the same 10,000 waits as bare tasks, 1,000 at a time, no queuey: the
  CPU a job costs asyncio itself (a task, a timer, a wake-up), the floor under the
  I/O-bound figure;
* no-op: 20,000 async jobs that return at once against 20,000 plain ones (8 job threads,
  prefetch 100 for both): the cost of the loop's hand-over per job;
* CPU time of the process for each (``time.process_time()``, every thread), and the
  share of it the cyclic garbage collector took (``gc.callbacks``): CPU per job moves
  less with the machine's load than wall-clock rates do.

A run is timed from the worker's start until every job is settled (jobs are enqueued
before); the machine's load (``uptime``) is printed beside. ``--backend sqlite`` runs on
a fresh embedded file, ``--backend rabbitmq`` on the broker of
``$QUEUEY_TEST_AMQP_URL`` (its own queue ``bench.asyncio``, deleted after), where the
broker's rate bounds both sides. Instructions per no-op job, which do not move with the
load at all: bench/async_instructions.py. Never run as a test.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run from the repository root, never with this folder first on the path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import gc  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any, ClassVar  # noqa: E402

from queuey_core import (  # noqa: E402
    Backend,
    Handler,
    Job,
    JobContext,
    MemoryBackend,
    Producer,
    QueueConfig,
    QueueSet,
    Worker,
)

QUEUE = "bench.asyncio"
IO_JOBS = 10_000
IO_WAIT = 0.02
ASYNC_CAP = 1_000
THREADS_IO = 64
NOOP_JOBS = 20_000
NOOP_THREADS = 8
NOOP_PREFETCH = 100


class Wait(Job):
    NAME: ClassVar[str] = "bench.wait"
    QUEUE: ClassVar[str] = QUEUE
    n: int


async def wait_async(job: Wait, ctx: JobContext) -> None:
    await asyncio.sleep(IO_WAIT)


def wait_thread(job: Wait, ctx: JobContext) -> None:
    time.sleep(IO_WAIT)


async def noop_async(job: Wait, ctx: JobContext) -> None:
    return None


def noop_thread(job: Wait, ctx: JobContext) -> None:
    return None


@dataclass
class Run:
    wall: float
    cpu: float
    jobs: int
    #: CPU seconds the cyclic garbage collector took meanwhile (any thread).
    gc: float = 0.0

    @property
    def rate(self) -> float:
        return self.jobs / self.wall


def make_backend(kind: str) -> Backend:
    if kind == "memory":
        return MemoryBackend()
    if kind == "sqlite":
        from queuey_core.backends.sqlite import SqliteBackend  # noqa: PLC0415

        folder = tempfile.mkdtemp(prefix="queuey-bench-async-")
        return SqliteBackend(f"sqlite:///{folder}/queuey.db")
    from queuey_core.backends.rabbitmq import RabbitMQBackend  # noqa: PLC0415

    url = os.environ.get("QUEUEY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
    return RabbitMQBackend(url, publish_timeout=30)


def settled(backend: Backend, worker: Worker) -> bool:
    counts = backend.inspect([QUEUE])  # type: ignore[attr-defined]
    found = counts.queues[QUEUE]
    return found is not None and found.ready == 0 and worker.handle.in_flight() == 0


def run(
    kind: str,
    fn: Callable[..., Any],
    jobs: int,
    *,
    prefetch: int,
    around: Callable[[bool], None] | None = None,
    poll: float = 0.002,
    **options: Any,
) -> Run:
    """Enqueue ``jobs``, run a worker of ``fn`` until all are settled; time it.

    ``around(True)`` is called as the worker starts, ``around(False)`` once every job is
    settled (bench/async_instructions.py counts instructions in between); ``poll``:
    seconds between two looks at whether all are settled."""
    config = QueueConfig(QUEUE, prefetch=prefetch, async_concurrency=options.pop("cap", None))
    queues = QueueSet([config])
    backend = make_backend(kind)
    try:
        Producer(backend, queues).enqueue_many([Wait(n=i) for i in range(jobs)])
        worker = Worker(backend, queues, [Handler(Wait, fn)], job_timeout=60, **options)
        thread = threading.Thread(target=worker.run)
        if around is not None:
            around(True)
        with GcMeter() as collector:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            thread.start()
            while not settled(backend, worker):
                time.sleep(poll)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        if around is not None:
            around(False)
        worker.handle.shutdown()
        thread.join()
        return Run(wall, cpu, jobs, collector.spent)
    finally:
        if kind == "rabbitmq":
            from queuey_core.backends.capabilities import DeadLetterTools, require  # noqa: PLC0415

            require(backend, DeadLetterTools, "the bench").purge_dead_letters(QUEUE)
        backend.close()


class GcMeter:
    """CPU seconds spent in the cyclic garbage collector while in a ``with`` block."""

    def __init__(self) -> None:
        self.spent = 0.0
        self._start = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.thread_time()
        else:
            self.spent += time.thread_time() - self._start

    def __enter__(self) -> GcMeter:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


def asyncio_floor() -> Run:
    """The I/O-bound jobs with no queuey at all: ``IO_JOBS`` tasks that each await
    ``IO_WAIT``, ``ASYNC_CAP`` at a time (each one ending starts the next), on a fresh
    loop. Its CPU per job is asyncio's own floor: a task, a timer, a wake-up."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        todo = iter(range(IO_JOBS))
        done = loop.create_future()
        left = IO_JOBS

        def start() -> None:
            for n in todo:
                loop.create_task(wait_async(Wait(n=n), None)).add_done_callback(finished)  # type: ignore[arg-type]
                return

        def finished(_: asyncio.Task[None]) -> None:
            nonlocal left
            left -= 1
            if not left:
                done.set_result(None)
            start()

        for _ in range(ASYNC_CAP):
            start()
        await done

    with GcMeter() as collector:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        asyncio.run(main())
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return Run(wall, cpu, IO_JOBS, collector.spent)


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["memory", "sqlite", "rabbitmq"], default="memory")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    kind = args.backend
    ideal = IO_JOBS * IO_WAIT / ASYNC_CAP
    rows: dict[str, list[float]] = {}

    def note(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)

    print(f"backend {kind}; {load()}", flush=True)
    for round_ in range(args.rounds):
        order = [0, 1] if round_ % 2 == 0 else [1, 0]
        io: dict[int, Run] = {}
        for side in order:
            if side == 0:
                io[0] = run(
                    kind, wait_async, IO_JOBS, prefetch=ASYNC_CAP, cap=ASYNC_CAP, concurrency=4
                )
            else:
                io[1] = run(kind, wait_thread, IO_JOBS, prefetch=THREADS_IO, concurrency=THREADS_IO)
        floor = asyncio_floor()
        noop: dict[int, Run] = {}
        for side in order:
            fn = noop_async if side == 0 else noop_thread
            noop[side] = run(
                kind,
                fn,
                NOOP_JOBS,
                prefetch=NOOP_PREFETCH,
                concurrency=NOOP_THREADS,
                cap=NOOP_PREFETCH if side == 0 else None,
            )
        note("io async: wall (s)", io[0].wall)
        note("io async: fraction of ideal", ideal / io[0].wall)
        note("io 64 threads: wall (s)", io[1].wall)
        note("io async / 64 threads (speed)", io[1].wall / io[0].wall)
        note("io async: CPU us/job", io[0].cpu / IO_JOBS * 1e6)
        note("io 64 threads: CPU us/job", io[1].cpu / IO_JOBS * 1e6)
        note("io async: of which GC us/job", io[0].gc / IO_JOBS * 1e6)
        note("io, asyncio alone: CPU us/job", floor.cpu / IO_JOBS * 1e6)
        note("io, asyncio alone: wall (s)", floor.wall)
        note("no-op async: jobs/s", noop[0].rate)
        note("no-op threads: jobs/s", noop[1].rate)
        note("no-op async / threads (rate)", noop[0].rate / noop[1].rate)
        note("no-op threads / async (CPU a job)", noop[1].cpu / noop[0].cpu)
        note("no-op async: CPU us/job", noop[0].cpu / NOOP_JOBS * 1e6)
        note("no-op threads: CPU us/job", noop[1].cpu / NOOP_JOBS * 1e6)
        note("no-op async: of which GC us/job", noop[0].gc / NOOP_JOBS * 1e6)
        note("no-op threads: of which GC us/job", noop[1].gc / NOOP_JOBS * 1e6)
        print(
            f"round {round_ + 1}: io async {io[0].wall:.2f}s ({ideal / io[0].wall:.0%} of ideal), "
            f"64 threads {io[1].wall:.2f}s; no-op async {noop[0].rate:.0f}/s, "
            f"threads {noop[1].rate:.0f}/s (CPU {noop[0].cpu / noop[1].cpu:.2f}x); {load()}",
            flush=True,
        )
    print(f"\nmedians over {args.rounds} rounds ({kind}):")
    for name, values in rows.items():
        print(f"  {name:32} {statistics.median(values):10.3f}")


if __name__ == "__main__":
    main()
