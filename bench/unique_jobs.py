"""What unique jobs cost the producer, and what they cost jobs without a key.

Run by hand, on an idle machine if you can, from the tree to measure (twice: on this
branch and on the commit before it, with PYTHONPATH pointing at each tree):

    PYTHONPATH=. .venv/bin/python bench/unique_jobs.py

Prints jobs per second (best of ``ROUNDS``) for: a batch of plain jobs on the in-memory
backend and on a SQLite file, the same with caller-chosen job ids (on the file: a key a
job, claimed), with a unique job type (where the branch has one), and the envelope's
encode + decode. docs/flow-control.md gives the ratios.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, ClassVar

from queuey_core import MemoryBackend, Producer, QueueConfig, QueueSet
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.envelope import Envelope
from queuey_core.jobs import Job

JOBS = 20_000
BATCH = 2_000
ROUNDS = 5
QUEUE = "bench"


class Plain(Job):
    NAME: ClassVar[str] = "bench.plain"
    QUEUE: ClassVar[str] = QUEUE
    n: int


def unique_type() -> type[Job] | None:
    """A unique job type, on a tree that has unique jobs."""
    try:
        from queuey_core.flow.unique import Unique  # noqa: PLC0415
    except ImportError:
        return None

    class Keyed(Job):
        NAME: ClassVar[str] = "bench.keyed"
        QUEUE: ClassVar[str] = QUEUE
        UNIQUE: ClassVar[Any] = Unique(key=("n",))
        n: int

    return Keyed


def best(run: Callable[[], None]) -> float:
    """Jobs per second of the best of ROUNDS runs of ``run`` (JOBS jobs each)."""
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return JOBS / min(times)


def enqueue(make: Callable[[], Any], job: type[Job], ids: bool) -> Callable[[], None]:
    def run() -> None:
        backend = make()
        producer = Producer(backend, QueueSet([QueueConfig(QUEUE)]))
        for start in range(0, JOBS, BATCH):
            jobs = [job(n=n) for n in range(start, start + BATCH)]  # type: ignore[call-arg]
            keys = [f"k{n}" for n in range(start, start + BATCH)] if ids else None
            producer.enqueue_many(jobs, job_ids=keys)
        backend.close()

    return run


def file_backend() -> SqliteBackend:
    return SqliteBackend(f"sqlite:///{tempfile.mkdtemp()}/bench.db")


def envelopes() -> None:
    env = Envelope.for_job(Plain(n=1), enqueued_at=1)
    for _ in range(JOBS):
        Envelope.decode(env.encode())


def main() -> None:
    rows = [
        ("memory, plain", enqueue(MemoryBackend, Plain, False)),
        ("memory, chosen ids", enqueue(MemoryBackend, Plain, True)),
        ("file, plain", enqueue(file_backend, Plain, False)),
        ("file, chosen ids", enqueue(file_backend, Plain, True)),
        ("envelope encode+decode", envelopes),
    ]
    keyed = unique_type()
    if keyed is not None:
        rows.insert(2, ("memory, unique type", enqueue(MemoryBackend, keyed, False)))
        rows.insert(5, ("file, unique type", enqueue(file_backend, keyed, False)))
    for name, run in rows:
        print(f"{name:28} {best(run):>10,.0f} jobs/s", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
