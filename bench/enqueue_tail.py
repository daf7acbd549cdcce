"""How long each enqueue on the embedded backend takes: the slow ones, not the mean.

    .venv/bin/python bench/enqueue_tail.py [--jobs 20000] [--rounds 2] [--dir /var/tmp]
                                           [--worker]

One process enqueues ``--jobs`` no-op jobs one call at a time (each committed before
the call returns) into a fresh SQLite file under ``--dir`` (a real disk: on tmpfs an
``fsync`` costs nothing), and prints the calls' p50, p99, p99.9 and longest, and how
many took over 5 ms: the calls that paid for a checkpoint (see docs/embedded.md). With
``--worker``, a ``queuey worker`` (8 threads, the benchmark's handlers) runs them as
they come, so that the enqueues meet its claims' and acks' commits. To compare two
commits, run it from each one's checkout. Never run as a test.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import latency
import procs
from queuey_bench_handlers import Noop

from queuey_core import Producer, QueueConfig, QueueSet
from queuey_core.backends.sqlite import SqliteBackend

Q = QueueConfig("bench", prefetch=16)


def one_round(where: Path, jobs: int, *, worker: bool) -> list[float]:
    """Seconds each of ``jobs`` enqueues took, in a fresh file under ``where`` (with a
    worker running them meanwhile if ``worker``)."""
    config = latency.config("sqlite")
    db = Path(tempfile.mkdtemp(prefix="queuey-enqueue-tail-", dir=where)) / "queuey.db"
    text = config.read_text().replace(str(config.parent / "queuey.db"), str(db))
    config.write_text(text)
    backend = SqliteBackend(f"sqlite:///{db}")
    run = None
    try:
        backend.declare([Q])
        if worker:
            run = latency.worker(config)
            run.wait_until(lambda: procs.file_counts(db, Q.name) == (0, 0), timeout=60)
        producer = Producer(backend, QueueSet([Q]))
        took = []
        for _ in range(jobs):
            started = time.perf_counter()
            producer.enqueue(Noop())
            took.append(time.perf_counter() - started)
        return took
    finally:
        if run is not None:
            run.stop()
        backend.close()
        shutil.rmtree(db.parent, ignore_errors=True)
        shutil.rmtree(config.parent, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp"))
    parser.add_argument("--worker", action="store_true")
    args = parser.parse_args()
    procs.compile_sources()
    print("| round | p50 (ms) | p99 (ms) | p99.9 (ms) | longest (ms) | over 5 ms | all (s) |")
    print("|---|---|---|---|---|---|---|")
    for r in range(args.rounds):
        took = sorted(one_round(args.dir, args.jobs, worker=args.worker))

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
