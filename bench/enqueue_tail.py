"""How long each enqueue on the embedded backend takes: the slow ones, not the mean.

    .venv/bin/python bench/enqueue_tail.py [--jobs 20000] [--rounds 2] [--dir /var/tmp]

One process enqueues ``--jobs`` jobs one call at a time (each committed before the call
returns) into a fresh SQLite file under ``--dir`` (a real disk: on tmpfs an ``fsync``
costs nothing), with nothing else using the file, and prints the calls' p50, p99,
p99.9 and longest, and how many took over 5 ms: the calls that paid for a checkpoint
(see docs/embedded.md). To compare two commits, run it from each one's checkout. Never
run as a test.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import ClassVar

from queuey_core import Job, Producer, QueueConfig, QueueSet
from queuey_core.backends.sqlite import SqliteBackend

Q = QueueConfig("tail", prefetch=8)


class Tail(Job):
    NAME: ClassVar[str] = "bench.tail"
    QUEUE: ClassVar[str] = "tail"
    i: int


def one_round(where: Path, jobs: int) -> list[float]:
    """Seconds each of ``jobs`` enqueues took, in a fresh file under ``where``."""
    folder = Path(tempfile.mkdtemp(prefix="queuey-enqueue-tail-", dir=where))
    backend = SqliteBackend(f"sqlite:///{folder / 'queuey.db'}")
    try:
        backend.declare([Q])
        producer = Producer(backend, QueueSet([Q]))
        took = []
        for i in range(jobs):
            started = time.perf_counter()
            producer.enqueue(Tail(i=i))
            took.append(time.perf_counter() - started)
        return took
    finally:
        backend.close()
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp"))
    args = parser.parse_args()
    print("| round | p50 (ms) | p99 (ms) | p99.9 (ms) | longest (ms) | over 5 ms | all (s) |")
    print("|---|---|---|---|---|---|---|")
    for r in range(args.rounds):
        took = sorted(one_round(args.dir, args.jobs))

        def at(q: float, took: list[float] = took) -> float:
            return took[int(q * (len(took) - 1))] * 1000

        slow = sum(t > 0.005 for t in took)
        print(
            f"| {r + 1} | {at(0.5):.3f} | {at(0.99):.3f} | {at(0.999):.2f} | "
            f"{took[-1] * 1000:.1f} | {slow} | {sum(took):.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
