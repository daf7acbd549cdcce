"""What the testing kit costs a test: a job run through it beside a plain worker's.

    .venv/bin/python bench/testing_kit.py [--jobs 2000] [--rounds 3]

Times, on the in-memory backend: starting and closing a kit (what the ``queuey``
fixture adds to a test), ``kit.run(job)`` one job at a time, ``kit.drain()`` of jobs
enqueued beforehand, and a plain ``Worker`` with one job thread draining the same jobs
(the floor: the same dispatch without the gate). Prints medians over the rounds and the
kit's cost a job as a ratio to the worker's. Never run as a test.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import ClassVar

from queuey_core import (
    Job,
    JobContext,
    MemoryBackend,
    Producer,
    QueueConfig,
    QueueSet,
    Worker,
    handler,
)
from queuey_core.testing import QueueyKit

QUEUES = QueueSet([QueueConfig("bench")])


class Noop(Job):
    NAME: ClassVar[str] = "bench.noop"
    QUEUE: ClassVar[str] = "bench"
    n: int


@handler
def noop(job: Noop, ctx: JobContext) -> None:
    pass


def kit_start_close() -> float:
    start = time.perf_counter()
    QueueyKit([noop], queues=QUEUES).close()
    return time.perf_counter() - start


def kit_run(jobs: int) -> float:
    with QueueyKit([noop], queues=QUEUES) as kit:
        start = time.perf_counter()
        for i in range(jobs):
            kit.run(Noop(n=i))
        return time.perf_counter() - start


def kit_drain(jobs: int) -> float:
    with QueueyKit([noop], queues=QUEUES) as kit:
        for i in range(jobs):
            kit.enqueue(Noop(n=i))
        start = time.perf_counter()
        assert len(kit.drain(max_jobs=jobs)) == jobs
        return time.perf_counter() - start


def plain_worker(jobs: int) -> float:
    backend = MemoryBackend()
    producer = Producer(backend, QUEUES)
    worker = Worker(backend, QUEUES, [noop], concurrency=1, control=False)
    for i in range(jobs):
        producer.enqueue(Noop(n=i))
    start = time.perf_counter()
    thread = threading.Thread(target=worker.run)
    thread.start()
    while len(backend.acked("bench")) < jobs:
        time.sleep(0.001)
    elapsed = time.perf_counter() - start
    worker.handle.shutdown()
    thread.join()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.jobs
    rows = {"start and close a kit": [], "kit.run, a job": [], "kit.drain, a job": []}
    floor = []
    for _ in range(args.rounds):
        rows["start and close a kit"].append(
            statistics.median(kit_start_close() for _ in range(20))
        )
        rows["kit.run, a job"].append(kit_run(n) / n)
        rows["kit.drain, a job"].append(kit_drain(n) / n)
        floor.append(plain_worker(n) / n)
    worker = statistics.median(floor)
    print(f"{worker * 1e6:8.0f} us  a plain Worker (one job thread), a job")
    for name, times in rows.items():
        median = statistics.median(times)
        ratio = "" if name.startswith("start") else f"  ({median / worker:.1f}x the worker's)"
        print(f"{median * 1e6:8.0f} us  {name}{ratio}")


if __name__ == "__main__":
    main()
