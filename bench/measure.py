"""The measurements: raw pika references and queuey's own figures, one function each.

Every queue here is durable and every message persistent. Each function returns a
number (messages per second, or seconds); run.py repeats them and computes same-round
ratios, since this machine is shared and noisy.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pika
from pika.adapters.select_connection import SelectConnection
from queuey_example_handlers import Greet

from queuey_core import Handler, Job, JobContext, Producer, QueueConfig, QueueSet, Worker
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.envelope import Envelope

URL = os.environ.get("QUEUEY_BENCH_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
QUEUE = "bench.jobs"
PERSISTENT = pika.BasicProperties(delivery_mode=2, content_type="application/json")


class Noop(Job):
    NAME: ClassVar[str] = "bench.noop"
    QUEUE: ClassVar[str] = QUEUE
    n: int


class Stamped(Job):
    NAME: ClassVar[str] = "bench.stamped"
    QUEUE: ClassVar[str] = QUEUE
    sent: float  # time.time() when enqueued


def queues(prefetch: int = 100) -> QueueSet:
    return QueueSet([QueueConfig(QUEUE, prefetch=prefetch)])


def _channel() -> tuple[pika.BlockingConnection, Any]:
    conn = pika.BlockingConnection(pika.URLParameters(URL))
    return conn, conn.channel()


def reset() -> None:
    """An empty durable bench queue, declared as queuey declares it."""
    conn, ch = _channel()
    ch.queue_delete(QUEUE)
    ch.queue_delete(f"{QUEUE}.dlq")
    conn.close()
    backend = RabbitMQBackend(URL)
    backend.declare(list(queues().values()))
    backend.close()


def ready() -> int:
    conn, ch = _channel()
    count = int(ch.queue_declare(QUEUE, passive=True).method.message_count)
    conn.close()
    return count


def fill(n: int) -> None:
    """``n`` queuey envelopes of Noop jobs on the bench queue (fast, confirmed)."""
    backend = RabbitMQBackend(URL)
    producer = Producer(backend, queues())
    for start in range(0, n, 1000):
        producer.enqueue_many([Noop(n=i) for i in range(start, min(n, start + 1000))])
    backend.close()
    deadline = time.monotonic() + 30
    while ready() < n and time.monotonic() < deadline:
        time.sleep(0.05)


# -- consuming ----------------------------------------------------------------------


def raw_consumer(n: int) -> float:
    """pika BlockingConnection, prefetch 100, one basic_ack per message: msg/s."""
    fill(n)
    conn, ch = _channel()
    ch.basic_qos(prefetch_count=100)
    seen = 0

    def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
        nonlocal seen
        ch.basic_ack(method.delivery_tag)
        seen += 1
        if seen == n:
            ch.stop_consuming()

    ch.basic_consume(QUEUE, on_message)
    started = time.perf_counter()
    ch.start_consuming()
    took = time.perf_counter() - started
    conn.close()
    return n / took


def queuey_worker(n: int, concurrency: int | None = None) -> float:
    """queuey's Worker with a no-op handler, acking after it returns: msg/s."""
    fill(n)
    backend = RabbitMQBackend(URL)
    done = threading.Event()
    count = [0]
    lock = threading.Lock()

    def handle(job: Noop, ctx: JobContext) -> None:
        with lock:
            count[0] += 1
            if count[0] == n:
                done.set()

    worker = Worker(backend, queues(), [Handler(Noop, handle)], concurrency=concurrency)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=run)
    started = time.perf_counter()
    thread.start()
    while not done.wait(0.5):
        if failed or not thread.is_alive():
            raise RuntimeError(f"the worker stopped before finishing: {failed}")
    while worker.handle.in_flight():  # the last acks are on their way
        time.sleep(0.0005)
    took = time.perf_counter() - started
    worker.handle.shutdown()
    thread.join()
    backend.close()
    assert ready() == 0, "the queue must be empty"
    return n / took


# -- publishing ---------------------------------------------------------------------


def raw_publish_confirmed(n: int) -> float:
    """pika BlockingChannel with confirm_delivery: one confirm per publish: msg/s."""
    body = Envelope.for_job(Noop(n=0), enqueued_at=0).encode()
    conn, ch = _channel()
    ch.confirm_delivery()
    started = time.perf_counter()
    for _ in range(n):
        ch.basic_publish("", QUEUE, body, PERSISTENT, mandatory=True)
    took = time.perf_counter() - started
    conn.close()
    return n / took


def queuey_enqueue(n: int) -> float:
    """Producer.enqueue, one at a time, each confirmed: msg/s."""
    backend = RabbitMQBackend(URL)
    producer = Producer(backend, queues())
    producer.enqueue(Noop(n=-1))  # connect the publisher before the clock starts
    started = time.perf_counter()
    for i in range(n):
        producer.enqueue(Noop(n=i))
    took = time.perf_counter() - started
    backend.close()
    return n / took


def raw_publish_windowed(n: int, window: int = 1000) -> float:
    """pika SelectConnection keeping ``window`` confirms outstanding: msg/s."""
    body = Envelope.for_job(Noop(n=0), enqueued_at=0).encode()
    state = {"sent": 0, "confirmed": 0, "started": 0.0, "took": 0.0}

    def publish_more(ch: Any) -> None:
        while state["sent"] < n and state["sent"] - state["confirmed"] < window:
            ch.basic_publish("", QUEUE, body, PERSISTENT, mandatory=True)
            state["sent"] += 1

    def on_confirm(frame: Any) -> None:
        method = frame.method
        state["confirmed"] = method.delivery_tag if method.multiple else state["confirmed"] + 1
        if state["confirmed"] >= n:
            state["took"] = time.perf_counter() - state["started"]
            conn.close()
        else:
            publish_more(channel[0])

    channel: list[Any] = []

    def on_channel(ch: Any) -> None:
        channel.append(ch)
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
    return n / state["took"]


def queuey_enqueue_many(n: int, batch: int = 20_000) -> float:
    """Producer.enqueue_many in batches, every message confirmed: msg/s."""
    backend = RabbitMQBackend(URL)
    producer = Producer(backend, queues())
    producer.enqueue(Noop(n=-1))
    jobs = [Noop(n=i) for i in range(n)]
    started = time.perf_counter()
    for start in range(0, n, batch):
        producer.enqueue_many(jobs[start : start + batch])
    took = time.perf_counter() - started
    backend.close()
    return n / took


# -- latency, memory, start-up --------------------------------------------------------


def latency(rate: float, seconds: float) -> dict[str, float]:
    """Enqueue-to-handler-start at ``rate`` jobs/s: p50 / p99 / max in ms."""
    backend = RabbitMQBackend(URL)
    waits: list[float] = []
    lock = threading.Lock()

    def handle(job: Stamped, ctx: JobContext) -> None:
        arrived = time.time()
        with lock:
            waits.append((arrived - job.sent) * 1000)

    worker = Worker(backend, queues(), [Handler(Stamped, handle)], concurrency=8)
    thread = threading.Thread(target=worker.run)
    thread.start()
    producer = Producer(RabbitMQBackend(URL), queues())
    total = int(rate * seconds)
    batch = max(1, int(rate / 200))  # at most 200 publishes a second, batched above that
    interval = batch / rate
    next_at = time.perf_counter()
    sent = 0
    while sent < total:
        now = time.perf_counter()
        if now < next_at:
            time.sleep(next_at - now)
        k = min(batch, total - sent)
        if k == 1:
            producer.enqueue(Stamped(sent=time.time()))
        else:
            producer.enqueue_many([Stamped(sent=time.time()) for _ in range(k)])
        sent += k
        next_at += interval
    deadline = time.monotonic() + 60
    while len(waits) < total and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.handle.shutdown()
    thread.join()
    backend.close()
    ordered = sorted(waits)
    return {
        "p50": statistics.median(ordered),
        "p99": ordered[int(len(ordered) * 0.99) - 1],
        "max": ordered[-1],
        "rate": rate,
    }


def _cli(*args: str) -> list[str]:
    script = Path(sys.executable).parent / "queuey"
    return [str(script), "--config", str(_config()), *args]


def _config() -> Path:
    path = Path(tempfile.gettempdir()) / "queuey-bench.toml"
    path.write_text(
        f'[broker]\nurl = "{URL}"\n[worker]\njob_timeout = "5m"\n'
        "[queues.alpha]\nprefetch = 100\nmax_priority = 10\n[queues.beta]\n"
    )
    return path


def cli_worker_rss_and_first_job(n: int) -> dict[str, float]:
    """``queuey worker --burst`` as a process: peak RSS (MB) over ``n`` greet jobs, and
    seconds from launch to its first job consumed (a job already waiting)."""
    conn, ch = _channel()
    ch.queue_delete("alpha")
    conn.close()
    backend = RabbitMQBackend(URL)
    settings_queues = QueueSet([QueueConfig("alpha", prefetch=100, max_priority=10)])
    backend.declare(list(settings_queues.values()))

    producer = Producer(backend, settings_queues)
    producer.enqueue(Greet(name="first"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    launched = time.perf_counter()
    proc = subprocess.Popen(
        _cli("--log-format", "json", "worker", "--queues", "alpha"),
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    first = float("nan")
    for line in proc.stderr:
        if '"job succeeded"' in line:
            first = time.perf_counter() - launched
            break
    # Now the bulk, while the same process runs, watching its peak RSS.
    for start in range(0, n, 1000):
        producer.enqueue_many([Greet(name=f"g{i}") for i in range(start, min(n, start + 1000))])
    drain = threading.Thread(target=lambda: [None for _ in proc.stderr or []], daemon=True)
    drain.start()
    peak_kb = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        peak_kb = max(peak_kb, int(status.split("VmHWM:")[1].split()[0]))
        if backend.queue_counts("alpha")[0] == 0:
            break
        time.sleep(0.1)
    time.sleep(0.5)
    status = Path(f"/proc/{proc.pid}/status").read_text()
    peak_kb = max(peak_kb, int(status.split("VmHWM:")[1].split()[0]))
    proc.terminate()
    proc.wait(30)
    backend.close()
    return {"rss_mb": peak_kb / 1024, "first_job_s": first}
