"""How soon a worker stops starting a paused queue's jobs, and starts again on resume.

    .venv/bin/python bench/pause_reaction.py [--backend memory|sqlite|rabbitmq] [--rounds 10]

A worker (one process, 4 job threads, prefetch 4) drains a queue of 10 ms jobs that a
feeder thread keeps full. Each round pauses the queue, from a second backend where the
backend reaches other processes (as ``queuey queues pause`` would), and records:

* **told**: with the notice to live workers over the control channel
  (``pause_queue``): the time from the call until the last job of the queue started;
* **untold**: with the state written alone (``set_paused``, no notice): the same, which
  the worker's own look bounds (``pause_poll()``: 0.05 s memory, 0.5 s file, 2 s
  RabbitMQ);
* **resume**: from ``resume_queue`` until the first job started again.

A job that started after the pause call had been pulled from the broker before the
worker cancelled its consumer (or was in flight then); the figures are the worst of each
kind over the rounds, and the median. ``--backend rabbitmq`` uses the broker of
``$QUEUEY_TEST_AMQP_URL`` (its own queue ``bench.pause``, deleted after). Never a test.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run from the repository root, never with this folder first on the path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import argparse  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any, ClassVar  # noqa: E402

from queuey_core import Handler, Job, JobContext, Producer, QueueConfig, QueueSet, Worker  # noqa: E402
from queuey_core.backends.memory import MemoryBackend  # noqa: E402
from queuey_core.flow.pause import pause_queue, resume_queue  # noqa: E402

QUEUE = "bench.pause"


class Tick(Job):
    NAME: ClassVar[str] = "bench.pause.tick"
    QUEUE: ClassVar[str] = QUEUE
    n: int


def backends(kind: str) -> tuple[Any, Callable[[], Any], Callable[[], None]]:
    """The worker's backend, a maker of the operator's, and a clean-up."""
    if kind == "memory":
        shared = MemoryBackend()
        return shared, lambda: shared, lambda: None
    if kind == "sqlite":
        from queuey_core.backends.sqlite import SqliteBackend  # noqa: PLC0415

        folder = tempfile.mkdtemp(prefix="queuey-bench-pause-")
        url = f"sqlite:///{folder}/bench.db"
        return SqliteBackend(url), lambda: SqliteBackend(url), lambda: None
    from queuey_core.backends.rabbitmq import RabbitMQBackend  # noqa: PLC0415

    url = os.environ.get("QUEUEY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")

    def clean() -> None:
        import pika  # noqa: PLC0415

        conn = pika.BlockingConnection(pika.URLParameters(url))
        ch = conn.channel()
        for name in (QUEUE, f"{QUEUE}.dlq", f"queuey.paused.{QUEUE}"):
            ch.queue_delete(name)
        conn.close()

    return RabbitMQBackend(url), lambda: RabbitMQBackend(url), clean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["memory", "sqlite", "rabbitmq"], default="memory")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()

    worker_backend, operator_of, clean = backends(args.backend)
    operator = operator_of()
    queues = QueueSet([QueueConfig(QUEUE, prefetch=4)])
    starts: list[float] = []
    lock = threading.Lock()

    def tick(job: Tick, ctx: JobContext) -> None:
        with lock:
            starts.append(time.monotonic())
        time.sleep(0.01)

    worker = Worker(worker_backend, queues, [Handler(Tick, tick)], concurrency=4)
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    producer = Producer(operator, queues)
    stop = threading.Event()

    def feed() -> None:
        n = 0
        while not stop.is_set():
            if worker_backend.inspect([QUEUE]).queues[QUEUE] is None or (
                worker_backend.inspect([QUEUE]).queues[QUEUE].ready < 50
            ):
                producer.enqueue_many([Tick(n=n + i) for i in range(50)])
                n += 50
            time.sleep(0.02)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()

    def last_start_after(at: float, settle: float) -> float:
        time.sleep(settle)  # long past any start the pause could still let through
        with lock:
            after = [s for s in starts if s >= at]
        return (max(after) - at) if after else 0.0

    def first_start_after(at: float) -> float:
        while True:
            with lock:
                after = [s for s in starts if s >= at]
            if after:
                return min(after) - at
            time.sleep(0.001)

    told: list[float] = []
    untold: list[float] = []
    resumed: list[float] = []
    poll = worker_backend.pause_poll()
    try:
        time.sleep(1.0)
        for _ in range(args.rounds):
            at = time.monotonic()
            pause_queue(operator, QUEUE)
            told.append(last_start_after(at, 1.0 + poll))
            at = time.monotonic()
            resume_queue(operator, QUEUE)
            resumed.append(first_start_after(at))
            time.sleep(0.3)
            at = time.monotonic()
            operator.set_paused(QUEUE, True)
            untold.append(last_start_after(at, 1.0 + 2 * poll))
            operator.set_paused(QUEUE, False)
            resume_queue(operator, QUEUE)
            time.sleep(0.3)
    finally:
        stop.set()
        feeder.join()
        worker.handle.shutdown()
        runner.join(30)
        if operator is not worker_backend:
            operator.close()
        worker_backend.close()
        clean()

    def show(name: str, values: list[float]) -> str:
        return (
            f"{name}: worst {max(values) * 1000:.0f} ms, "
            f"median {statistics.median(values) * 1000:.0f} ms"
        )

    load = os.getloadavg()[0]
    print(f"{args.backend}, {args.rounds} rounds, pause_poll {poll:g} s, load {load:.1f}")
    print("  last job started after the pause, " + show("told", told))
    print("  last job started after the pause, " + show("untold", untold))
    print("  first job started after the resume, " + show("resume", resumed))


if __name__ == "__main__":
    main()
