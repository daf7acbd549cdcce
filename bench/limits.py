"""What limits cost: nothing for job types without one, and little for a held backlog.

    .venv/bin/python bench/limits.py free [--jobs 20000] [--rounds 5] [--backends memory,sqlite]
    .venv/bin/python bench/limits.py backlog [--jobs 10000] [--seconds 60] [--backend sqlite]

``free``: a worker drains ``--jobs`` no-op jobs of a type without limits, with no limits
declared and with limits declared for another type (a rate and a concurrency limit per
key, their state opened), rounds alternating; the median of each and their ratio.

(``--backends rabbitmq`` too, on ``--amqp``.)

``backlog``: ``--jobs`` jobs of a type limited to 1/s wait in the queue; a worker runs for
``--seconds``. Reported: how long the first pass over the backlog took (each job is
deferred once, to its own time), then over the rest of the window the jobs started, the
messages the worker moved a second (deliveries, deferrals, acks) and the worker's CPU
time a second. RabbitMQ: ``--amqp URL`` (default ``$QUEUEY_TEST_AMQP_URL``) with its
state in a SQLite file. In process, one worker; never run as a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from typing import Any, ClassVar

import pika

from queuey_core import (
    Handler,
    Job,
    JobContext,
    MemoryBackend,
    Producer,
    QueueConfig,
    QueueSet,
    Worker,
)
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.clock import SystemClock
from queuey_core.flow.limit_gate import LimitGate
from queuey_core.flow.limit_setup import limit_state_for
from queuey_core.flow.limit_spec import LimitBook, spec_from_table

QUEUE = "bench.limits"
QUEUES = QueueSet([QueueConfig(QUEUE, prefetch=50)])


class Free(Job):
    NAME: ClassVar[str] = "bench.free"
    QUEUE: ClassVar[str] = QUEUE


class Held(Job):
    NAME: ClassVar[str] = "bench.held"
    QUEUE: ClassVar[str] = QUEUE
    tenant: str = "t"


class Counting:
    """Jobs run, and an event when ``target`` were."""

    def __init__(self, target: int) -> None:
        self.n = 0
        self.target = target
        self.lock = threading.Lock()
        self.done = threading.Event()

    def __call__(self, job: Job, ctx: JobContext) -> None:
        with self.lock:
            self.n += 1
            if self.n >= self.target:
                self.done.set()


class Place:
    """A backend and where its limits' state lives, made fresh for each round."""

    def __init__(self, name: str, amqp: str) -> None:
        self.name = name
        self.amqp = amqp
        self.folder = tempfile.mkdtemp(prefix="queuey-bench-limits-")

    def backend(self) -> Any:
        if self.name == "memory":
            return MemoryBackend()
        if self.name == "sqlite":
            return SqliteBackend(self.file_url())
        conn = pika.BlockingConnection(pika.URLParameters(self.amqp))
        conn.channel().queue_delete(QUEUE)  # what a round before left
        conn.close()
        return RabbitMQBackend(self.amqp)

    def file_url(self) -> str:
        return f"sqlite:///{self.folder}/queuey.db"

    def state_url(self) -> str:
        if self.name == "memory":
            return "memory:"
        if self.name == "sqlite":
            return self.file_url()
        return f"sqlite:///{self.folder}/state.db"

    def fresh(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        os.makedirs(self.folder)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def gate_for(place: Place, tables: dict[str, dict[str, Any]]) -> LimitGate:
    book = LimitBook(spec_from_table(name, table) for name, table in tables.items())
    return LimitGate(book, limit_state_for(place.state_url(), book), clock=SystemClock())


OTHER_LIMITS = {
    "api": {"rate": "50/s", "burst": 5, "jobs": [Held.NAME]},
    "tenant": {"concurrency": 3, "key": "tenant", "jobs": [Held.NAME]},
}


def drain(place: Place, jobs: int, limited: bool) -> tuple[float, float]:
    """Jobs a second for ``jobs`` no-op jobs of a type without limits, and the process's
    CPU microseconds a job (every thread: the gate's heartbeat counts), which other work
    on a shared machine disturbs far less than the wall clock."""
    place.fresh()
    backend = place.backend()
    gate = gate_for(place, OTHER_LIMITS) if limited else None
    try:
        producer = Producer(backend, QUEUES)
        for start in range(0, jobs, 1000):
            producer.enqueue_many([Free() for _ in range(min(1000, jobs - start))])
        counting = Counting(jobs)
        worker = Worker(
            backend,
            QUEUES,
            [Handler(Free, counting), Handler(Held, counting)],
            concurrency=8,
            limits=gate,
        )
        thread = threading.Thread(target=worker.run, daemon=True)
        began, cpu0 = time.perf_counter(), time.process_time()
        thread.start()
        counting.done.wait(600)
        took, cpu = time.perf_counter() - began, time.process_time() - cpu0
        worker.handle.shutdown()
        thread.join(60)
        return jobs / took, cpu / jobs * 1e6
    finally:
        if gate is not None:
            gate.close()
        backend.close()


def free(args: argparse.Namespace) -> None:
    for name in args.backends.split(","):
        place = Place(name, args.amqp)
        plain: list[tuple[float, float]] = []
        declared: list[tuple[float, float]] = []
        for r in range(args.rounds):
            order = [False, True] if r % 2 == 0 else [True, False]
            for limited in order:
                (declared if limited else plain).append(drain(place, args.jobs, limited))
        place.close()
        a = statistics.median(rate for rate, _ in plain)
        b = statistics.median(rate for rate, _ in declared)
        ca = statistics.median(cpu for _, cpu in plain)
        cb = statistics.median(cpu for _, cpu in declared)
        print(
            f"{name}: no limits {a:,.0f} jobs/s, limits on another type {b:,.0f} jobs/s, "
            f"ratio {b / a:.3f} (rounds {[round(x) for x, _ in plain]} / "
            f"{[round(x) for x, _ in declared]}); CPU a job {ca:.1f} / {cb:.1f} us, "
            f"ratio {cb / ca:.3f}"
        )


def backlog(args: argparse.Namespace) -> None:
    place = Place(args.backend, args.amqp)
    place.fresh()
    backend = place.backend()
    gate = gate_for(place, {"api": {"rate": "1/s", "jobs": [Held.NAME]}})
    moved = {"deliveries": 0}
    try:
        producer = Producer(backend, QUEUES)
        for start in range(0, args.jobs, 1000):
            producer.enqueue_many([Held() for _ in range(min(1000, args.jobs - start))])
        ran = Counting(args.jobs)
        worker = Worker(backend, QUEUES, [Handler(Held, ran)], concurrency=8, limits=gate)
        thread = threading.Thread(target=worker.run, daemon=True)
        began, cpu0 = time.perf_counter(), time.process_time()
        thread.start()
        # The first pass: every job delivered once, admitted or given its time.
        while gate.counts.waited + gate.counts.admitted < args.jobs:
            time.sleep(0.05)
        first_pass = time.perf_counter() - began
        counts0 = (gate.counts.waited, gate.counts.admitted, ran.n)
        t1, cpu1 = time.perf_counter(), time.process_time()
        time.sleep(max(1.0, args.seconds - first_pass))
        t2, cpu2 = time.perf_counter(), time.process_time()
        waited = gate.counts.waited - counts0[0]
        admitted = gate.counts.admitted - counts0[1]
        started = ran.n - counts0[2]
        window = t2 - t1
        # A waiting job that comes back is delivered, deferred (a publish) and acked;
        # an admitted one is delivered and acked.
        moved["deliveries"] = waited + admitted
        per_second = (3 * waited + 2 * admitted) / window
        print(
            f"{args.backend}: {args.jobs} jobs at 1/s; first pass {first_pass:.1f}s "
            f"(CPU {cpu1 - cpu0:.1f}s); then over {window:.0f}s: {started} started, "
            f"{moved['deliveries']} deliveries, {per_second:.2f} messages/s moved, "
            f"worker CPU {100 * (cpu2 - cpu1) / window:.2f}% of a core"
        )
        worker.handle.shutdown()
        thread.join(60)
    finally:
        gate.close()
        backend.close()
        place.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["free", "backlog"])
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--backends", default="memory,sqlite")
    parser.add_argument("--backend", default="sqlite")
    parser.add_argument("--amqp", default=os.environ.get("QUEUEY_TEST_AMQP_URL", ""))
    args = parser.parse_args()
    if args.what == "free":
        args.jobs = args.jobs or 20_000
        free(args)
    else:
        args.jobs = args.jobs or 10_000
        backlog(args)


if __name__ == "__main__":
    main()
