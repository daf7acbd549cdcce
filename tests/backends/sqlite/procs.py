"""The processes of the many-processes test on one SQLite file (test_processes).

``python -m tests.backends.sqlite.procs worker URL LEDGER``: a worker that appends
``<pid> <job_id>`` to LEDGER as each job starts, until SIGTERM.
``python -m tests.backends.sqlite.procs produce URL IDS N``: enqueues N jobs in batches, and
appends each batch's job ids to IDS once the batch is committed.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import ClassVar

from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core.backends.sqlite import SqliteBackend

QUEUES = QueueSet([QueueConfig("procs", prefetch=4)])


class Tick(Job):
    NAME: ClassVar[str] = "procs.tick"
    QUEUE: ClassVar[str] = "procs"
    n: int


def work(url: str, ledger: str) -> None:
    backend = SqliteBackend(url)
    backend.declare(list(QUEUES.values()))
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def run(job: Tick, ctx: JobContext) -> None:
        os.write(fd, f"{os.getpid()} {ctx.job_id}\n".encode())
        time.sleep(0.2)  # long enough that a kill lands mid-job

    worker = Worker(backend, QUEUES, [Handler(Tick, run)], close_backend_on_shutdown=True)
    signal.signal(signal.SIGTERM, lambda *_: worker.handle.shutdown())
    worker.run()


def produce(url: str, ids: str, count: int) -> None:
    backend = SqliteBackend(url)
    backend.declare(list(QUEUES.values()))
    producer = Producer(backend, QUEUES)
    with open(ids, "a") as out:
        for start in range(0, count, 10):
            sent = producer.enqueue_many([Tick(n=n) for n in range(start, min(count, start + 10))])
            out.write("".join(f"{job_id}\n" for job_id in sent))
            out.flush()
            time.sleep(0.005)
    backend.close()


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "worker":
        work(args[0], args[1])
    else:
        produce(args[0], args[1], int(args[2]))
