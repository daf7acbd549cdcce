"""The in-process measurements: filling queues, raw pika references, publish figures.

``python bench/measure.py NAME N`` runs one measurement in a fresh process and prints
its result as JSON (run.py calls it so that no measurement inherits another's threads
or connections). Every queue is durable and every message persistent.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import pika
from pika.adapters.select_connection import SelectConnection

sys.path.insert(0, str(Path(__file__).parent))

from procs import URL, Counter
from queuey_bench_handlers import Cpu, Noop, Stamped, Wait

from queuey_core import Job, Producer, QueueConfig, QueueSet
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.envelope import Envelope
from queuey_core.queues import QueueKind
from queuey_core.trace_context import TraceContext

PERSISTENT = pika.BasicProperties(delivery_mode=2, content_type="application/json")
RAW_QUEUE = "bench_raw"


def queues() -> QueueSet:
    """The benchmark's queues, as procs.config_file() configures them."""
    return QueueSet(
        [
            QueueConfig("alpha", prefetch=8, max_priority=10),
            QueueConfig("beta", prefetch=1, kind=QueueKind.QUORUM),
            QueueConfig("bench", prefetch=16),
            QueueConfig("bench_io", prefetch=128),
        ]
    )


def _wait_ready(queue: str, n: int) -> None:
    """Until the broker shows ``n`` ready messages in ``queue`` (publishes landed)."""
    counter = Counter()
    deadline = time.monotonic() + 120
    while counter.ready(queue) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{queue}: {counter.ready(queue)} of {n} messages after 120s")
        time.sleep(0.02)
    counter.close()


def _producer() -> tuple[RabbitMQBackend, Producer]:
    backend = RabbitMQBackend(URL)
    return backend, Producer(backend, queues())


# -- filling the queues the workers drain ----------------------------------------------


def fill_queuey(n: int, kind: str = "noop") -> dict[str, Any]:
    """``n`` queuey jobs on their queue, the first one marked (it reports its start).

    ``kind``: ``noop``, ``io`` or ``cpuN`` (N rounds of :func:`spin`); ``traced-`` before
    it: each job carries a trace context of its own, as jobs enqueued by a traced
    producer, one request (one trace) each, do."""
    traced = kind.startswith("traced")
    kind = kind.removeprefix("traced").removeprefix("-") or "noop"
    backend, producer = _producer()

    def make(i: int) -> Job:
        if kind == "io":
            return Wait(mark=i == 0)
        if kind.startswith("cpu"):
            return Cpu(rounds=int(kind[3:]), mark=i == 0)
        return Noop(mark=i == 0)

    for start in range(0, n, 2000):
        jobs = [make(i) for i in range(start, min(n, start + 2000))]
        if traced:
            envs = [producer.envelope(job).with_trace(_own_trace()) for job in jobs]
            backend.publish_many([(env, None) for env in envs])
        else:
            producer.enqueue_many(jobs)
    backend.close()
    _wait_ready(make(0).QUEUE, n)
    return {"filled": n}


def fill_queuey_file(n: int, path: str) -> dict[str, Any]:
    """``n`` no-op queuey jobs on the bench queue of the embedded backend's file ``path``,
    the first one marked, as :func:`fill_queuey` fills RabbitMQ's."""
    from queuey_core.backends.sqlite import SqliteBackend  # noqa: PLC0415

    backend = SqliteBackend(f"sqlite:///{path}")
    producer = Producer(backend, QueueSet([QueueConfig("bench", prefetch=16)]))
    for start in range(0, n, 2000):
        producer.enqueue_many([Noop(mark=i == 0) for i in range(start, min(n, start + 2000))])
    backend.close()
    return {"filled": n}


def _own_trace() -> TraceContext:
    """A context of a trace of its own, as a request's publish span makes it."""
    return TraceContext(f"00-{random.getrandbits(128):032x}-{random.getrandbits(64):016x}-01")


def fill_dramatiq(n: int, kind: str = "noop") -> dict[str, Any]:
    """``n`` Dramatiq messages for the same job, sent as Dramatiq sends them."""
    import peer_dramatiq  # noqa: PLC0415 - the peers are an optional extra

    actor = peer_dramatiq.wait if kind == "io" else peer_dramatiq.noop
    for i in range(n):
        actor.send(mark=i == 0)
    peer_dramatiq.broker.close()
    _wait_ready(actor.queue_name, n)
    return {"filled": n}


def fill_celery(n: int, kind: str = "noop") -> dict[str, Any]:
    """``n`` Celery messages for the same job, sent as Celery sends them."""
    import peer_celery  # noqa: PLC0415 - the peers are an optional extra

    for i in range(n):
        peer_celery.noop.apply_async(kwargs={"mark": i == 0})
    _wait_ready("bench_celery", n)
    return {"filled": n}


# -- consuming: the raw pika reference --------------------------------------------------


def raw_consumer(n: int) -> dict[str, Any]:
    """pika BlockingConnection, prefetch 100, one basic_ack per message: msg/s."""
    body = Envelope.for_job(Noop(), enqueued_at=0).encode()
    conn = pika.BlockingConnection(pika.URLParameters(URL))
    ch = conn.channel()
    ch.queue_delete(RAW_QUEUE)
    ch.queue_declare(RAW_QUEUE, durable=True)
    for _ in range(n):
        ch.basic_publish("", RAW_QUEUE, body, PERSISTENT)
    conn.process_data_events(0)
    _wait_ready(RAW_QUEUE, n)
    ch.basic_qos(prefetch_count=100)
    seen = 0

    def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
        nonlocal seen
        ch.basic_ack(method.delivery_tag)
        seen += 1
        if seen == n:
            ch.stop_consuming()

    ch.basic_consume(RAW_QUEUE, on_message)
    started, cpu = time.perf_counter(), time.process_time()
    ch.start_consuming()
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    conn.close()
    return {"rate": n / took, "running_rate": n / took, "cpu_us": cpu / n * 1e6}


# -- publishing ---------------------------------------------------------------------------


def raw_publish(n: int) -> dict[str, Any]:
    """pika BlockingChannel, no confirms (as Dramatiq's send() by default): msg/s."""
    body = Envelope.for_job(Noop(), enqueued_at=0).encode()
    conn = pika.BlockingConnection(pika.URLParameters(URL))
    ch = conn.channel()
    ch.queue_delete(RAW_QUEUE)
    ch.queue_declare(RAW_QUEUE, durable=True)
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        ch.basic_publish("", RAW_QUEUE, body, PERSISTENT)
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    conn.close()
    return {"rate": n / took, "cpu_us": cpu / n * 1e6}


def raw_publish_windowed(n: int, window: int = 1000) -> dict[str, Any]:
    """pika SelectConnection keeping ``window`` confirms outstanding: msg/s (into an
    empty queue, as every publisher measured beside it)."""
    body = Envelope.for_job(Noop(), enqueued_at=0).encode()
    conn = pika.BlockingConnection(pika.URLParameters(URL))
    conn.channel().queue_delete(RAW_QUEUE)
    conn.close()
    state = {"sent": 0, "confirmed": 0, "started": 0.0, "took": 0.0}
    channel: list[Any] = []

    def publish_more(ch: Any) -> None:
        while state["sent"] < n and state["sent"] - state["confirmed"] < window:
            ch.basic_publish("", RAW_QUEUE, body, PERSISTENT, mandatory=True)
            state["sent"] += 1

    def on_confirm(frame: Any) -> None:
        method = frame.method
        state["confirmed"] = method.delivery_tag if method.multiple else state["confirmed"] + 1
        if state["confirmed"] >= n:
            state["took"] = time.perf_counter() - state["started"]
            conn.close()
        else:
            publish_more(channel[0])

    def on_channel(ch: Any) -> None:
        channel.append(ch)
        ch.queue_declare(RAW_QUEUE, durable=True, callback=lambda _f: confirm(ch))

    def confirm(ch: Any) -> None:
        ch.confirm_delivery(on_confirm, callback=lambda _f: start(ch))

    def start(ch: Any) -> None:
        state["started"] = time.perf_counter()
        publish_more(ch)

    conn = SelectConnection(
        pika.URLParameters(URL),
        on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_close_callback=lambda c, r: c.ioloop.stop(),
    )
    conn.ioloop.start()
    return {"rate": n / state["took"]}


def queuey_enqueue_many(n: int) -> dict[str, Any]:
    """Producer.enqueue_many of ``n`` jobs in one call, every message confirmed: msg/s."""
    backend, producer = _producer()
    # Connect the publisher link before the clock starts (a lone enqueue may go through
    # the direct connection instead).
    producer.enqueue_many([Noop(), Noop()])
    jobs = [Noop() for _ in range(n)]
    started, cpu = time.perf_counter(), time.process_time()
    producer.enqueue_many(jobs)
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    backend.close()
    return {"rate": n / took, "cpu_us": cpu / n * 1e6}


def queuey_enqueue(n: int) -> dict[str, Any]:
    """Producer.enqueue one at a time, each confirmed: msg/s."""
    backend, producer = _producer()
    producer.enqueue(Noop())
    started = time.perf_counter()
    for _ in range(n):
        producer.enqueue(Noop())
    took = time.perf_counter() - started
    backend.close()
    return {"rate": n / took}


def dramatiq_send(n: int) -> dict[str, Any]:
    """Dramatiq's ``send()`` (unconfirmed, its default), ``n`` times: msg/s."""
    import peer_dramatiq  # noqa: PLC0415 - the peers are an optional extra

    peer_dramatiq.noop.send()  # connect and declare before the clock starts
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        peer_dramatiq.noop.send()
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    peer_dramatiq.broker.close()
    return {"rate": n / took, "cpu_us": cpu / n * 1e6}


# -- latency -------------------------------------------------------------------------------


def publish_stamped(rate: float, seconds: float) -> dict[str, Any]:
    """Enqueue Stamped jobs at ``rate`` a second for ``seconds`` (a worker reports waits)."""
    backend, producer = _producer()
    producer.enqueue(Stamped(sent=time.time()))
    # At most 200 publishes a second, batched above that.
    sent = 1 + paced(producer, rate, total=int(rate * seconds) - 1, per_second=200)
    backend.close()
    return {"sent": sent}


def paced(producer: Producer, rate: float, *, total: int, per_second: int) -> int:
    """``total`` Stamped jobs at ``rate`` a second, in at most ``per_second`` publishes a
    second (batches above that), each stamped when built; how many were sent."""
    batch = max(1, math.ceil(rate / per_second))
    interval = batch / rate
    next_at = time.perf_counter()
    sent = 0
    while sent < total:
        now = time.perf_counter()
        if now < next_at:
            time.sleep(next_at - now)
        k = min(batch, total - sent)
        producer.enqueue_many([Stamped(sent=time.time()) for _ in range(k)])
        sent += k
        next_at += interval
    return sent


MEASURES = {
    name: fn
    for name, fn in globals().items()
    if callable(fn)
    and name.split("_")[0] in {"fill", "raw", "queuey", "dramatiq", "publish"}
    and fn.__module__ == __name__
}


def main() -> None:
    name, *args = sys.argv[1:]
    fn = MEASURES[name]
    converted = [
        a if "/" in a else float(a) if "." in a else int(a) if a.isdigit() else a for a in args
    ]
    print(json.dumps(fn(*converted)))


if __name__ == "__main__":
    main()
