"""Traces on a real RabbitMQ: the W3C context rides in the ``traceparent`` and
``tracestate`` headers, out with the enqueue, back in with the delivery, on with each
retry and dead letter; a foreign producer's header joins its trace, and a hostile one is
ignored while its job runs.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any
from typing import ClassVar

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pika.spec import BasicProperties

from queuey_core import Backoff
from queuey_core import DeadLetter
from queuey_core import Fatal
from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Retryable
from queuey_core import RetryPolicy
from queuey_core import Worker
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq import topology
from tests.conftest import require_broker
from tests.integration.broker import channel
from tests.integration.broker import delete_queues
from tests.integration.broker import unique
from tests.support import Running
from tests.support import start
from tests.support import wait_for

pytestmark = pytest.mark.integration

QNAME = unique("it.traced")

#: What a Node producer sends (W3C's own example ids).
NODE_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
NODE_SPAN_ID = "00f067aa0ba902b7"
NODE_TRACEPARENT = f"00-{NODE_TRACE_ID}-{NODE_SPAN_ID}-01"


class Work(Job):
    NAME: ClassVar[str] = "it.traced.work"
    QUEUE: ClassVar[str] = QNAME
    n: int


class Runs:
    """Which attempts of which payload ran, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seen: list[tuple[int, int]] = []

    def add(self, n: int, attempt: int) -> int:
        with self._lock:
            self.seen.append((n, attempt))
            return sum(1 for m, _ in self.seen if m == n)

    def of(self, n: int) -> list[int]:
        with self._lock:
            return [a for m, a in self.seen if m == n]


@pytest.fixture
def queues() -> Iterator[QueueSet]:
    require_broker()
    delete_queues(QNAME)
    # A retry comes back after 10 ms: no test waits through a real backoff.
    retry = RetryPolicy(3, Backoff(initial=0.01, max=0.01, jitter=False))
    yield QueueSet([QueueConfig(QNAME, prefetch=4, retry=retry)])
    delete_queues(QNAME)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def processed(exporter: InMemorySpanExporter, n: int | None = None) -> list[ReadableSpan]:
    """The consumer spans (of payload ``n``), by attempt."""
    spans = [s for s in exporter.get_finished_spans() if s.name == f"process {QNAME}"]
    if n is not None:
        spans = [s for s in spans if _payload_of(s) == n]
    return sorted(spans, key=lambda s: _attr(s, "queuey.job.attempt"))


_PAYLOADS: dict[str, int] = {}


def _payload_of(span: ReadableSpan) -> int | None:
    return _PAYLOADS.get(str(_attr(span, "messaging.message.id")))


def _attr(span: ReadableSpan, key: str) -> Any:
    assert span.attributes is not None
    return span.attributes.get(key)


def run_worker(
    rabbit: RabbitMQBackend, queues: QueueSet, provider: TracerProvider, runs: Runs
) -> Running:
    """A traced worker whose handler fails ``n``'s first attempt when ``n`` is odd, and
    dead-letters ``n`` at once when it is negative (its first run only)."""

    def handle(job: Work, ctx: JobContext) -> None:
        count = runs.add(job.n, ctx.attempt)
        if job.n < 0 and count == 1:
            raise Fatal("negative")
        if job.n % 2 and ctx.attempt == 1:
            raise Retryable("odd")

    worker = Worker(rabbit, queues, [Handler(Work, handle)], tracer_provider=provider)
    return start(worker, None)


def raw_publish(body: bytes, headers: dict[str, Any] | None) -> None:
    """Publish as a producer in another language would (docs/protocol.md)."""
    props = BasicProperties(
        content_type="application/json", delivery_mode=2, headers=headers, message_id="x"
    )
    with channel() as ch:
        ch.confirm_delivery()
        ch.basic_publish("", QNAME, body, props, mandatory=True)


def node_body(n: int) -> bytes:
    job_id = str(uuid.uuid4())
    _PAYLOADS[job_id] = n
    envelope = {
        "v": 1,
        "job_id": job_id,
        "job_type": Work.NAME,
        "queue": QNAME,
        "enqueued_at": int(time.time() * 1000),
        "payload": {"n": n},
    }
    return json.dumps(envelope).encode()


def test_the_enqueue_puts_its_context_in_the_headers_and_every_attempt_continues_it(
    rabbit: RabbitMQBackend, queues: QueueSet, provider: TracerProvider, exporter: Any
) -> None:
    producer = Producer(rabbit, queues, tracer_provider=provider)
    job_id = producer.enqueue(Work(n=1))
    _PAYLOADS[str(job_id)] = 1
    (publish,) = [s for s in exporter.get_finished_spans() if s.name == f"publish {QNAME}"]
    context = publish.context
    expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"

    with channel() as ch:
        method, props, _ = ch.basic_get(QNAME, auto_ack=False)
        assert method is not None, "the job is on its queue"
        assert props.headers == {"traceparent": expected}, "the producer span's W3C context"
        ch.basic_nack(method.delivery_tag, requeue=True)

    runs = Runs()
    running = run_worker(rabbit, queues, provider, runs)
    wait_for(lambda: len(processed(exporter, 1)) == 2)
    running.stop()

    first, second = processed(exporter, 1)
    assert runs.of(1) == [1, 2], "retried once, then succeeded"
    for span in (first, second):
        assert span.context.trace_id == publish.context.trace_id, "one trace, end to end"
        assert span.parent is not None
        assert span.parent.span_id == publish.context.span_id, (
            "the retry's message carried the enqueue's context on"
        )
    assert [_attr(s, "queuey.job.outcome") for s in (first, second)] == ["retried", "succeeded"]


def test_a_dead_letter_carries_the_context_and_a_requeue_continues_it(
    rabbit: RabbitMQBackend, queues: QueueSet, provider: TracerProvider, exporter: Any
) -> None:
    producer = Producer(rabbit, queues, tracer_provider=provider)
    job_id = producer.enqueue(Work(n=-2))
    _PAYLOADS[str(job_id)] = -2
    (publish,) = [s for s in exporter.get_finished_spans() if s.name == f"publish {QNAME}"]
    runs = Runs()
    running = run_worker(rabbit, queues, provider, runs)
    wait_for(lambda: rabbit.queue_counts(topology.dead_letter_name(QNAME))[0] == 1)

    with channel() as ch:
        method, props, _ = ch.basic_get(topology.dead_letter_name(QNAME), auto_ack=False)
        assert method is not None
        headers = props.headers
        ch.basic_nack(method.delivery_tag, requeue=True)
    trace_id = f"{publish.context.trace_id:032x}"
    assert headers["traceparent"].split("-")[1] == trace_id, "the dead letter's trace"
    assert headers[topology.REASON_HEADER] == "fatal error: negative", "beside our own"
    (letter,) = rabbit.list_dead_letters(QNAME)
    assert isinstance(letter, DeadLetter)
    assert letter.envelope.trace is not None
    assert letter.envelope.trace.trace_id == trace_id

    assert rabbit.requeue_dead_letters(QNAME) == 1
    wait_for(lambda: len(processed(exporter, -2)) == 2)
    running.stop()
    dead, again = sorted(processed(exporter, -2), key=lambda s: s.start_time or 0)
    assert _attr(dead, "queuey.job.outcome") == "dead_lettered"
    assert _attr(again, "queuey.job.outcome") == "succeeded"
    assert again.context.trace_id == publish.context.trace_id, "requeued into its own trace"


def test_a_node_producers_traceparent_is_continued_through_a_retry(
    rabbit: RabbitMQBackend, queues: QueueSet, provider: TracerProvider, exporter: Any
) -> None:
    runs = Runs()
    running = run_worker(rabbit, queues, provider, runs)
    raw_publish(node_body(3), {"traceparent": NODE_TRACEPARENT, "tracestate": "node=1"})
    wait_for(lambda: len(processed(exporter, 3)) == 2)
    running.stop()

    for span in processed(exporter, 3):
        assert f"{span.context.trace_id:032x}" == NODE_TRACE_ID, "the Node trace, joined"
        assert span.parent is not None
        assert f"{span.parent.span_id:016x}" == NODE_SPAN_ID
        assert span.parent.is_remote
        assert span.context.trace_state.get("node") == "1", "its tracestate carried on"


HOSTILE: list[Any] = [
    "garbage",
    "0" * 10_000,
    f"00-{NODE_TRACE_ID}-{NODE_SPAN_ID}-01" + "x" * 10_000,
    f"ff-{NODE_TRACE_ID}-{NODE_SPAN_ID}-01",
    f"00-{'0' * 32}-{NODE_SPAN_ID}-01",
    f"00-{NODE_TRACE_ID.upper()}-{NODE_SPAN_ID}-01",
    f"00-{NODE_TRACE_ID}-{NODE_SPAN_ID}-01\u00e9",
    "\u2028" * 50,
    b"\xff\xfe" * 40,
    12345,
    {"nested": "table"},
    ["a", "list"],
]


def test_a_hostile_traceparent_is_ignored_and_its_job_runs(
    rabbit: RabbitMQBackend,
    queues: QueueSet,
    provider: TracerProvider,
    exporter: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs = Runs()
    running = run_worker(rabbit, queues, provider, runs)
    for i, value in enumerate(HOSTILE):
        raw_publish(node_body(100 + 2 * i), {"traceparent": value, "tracestate": value})
    wait_for(lambda: all(runs.of(100 + 2 * i) for i in range(len(HOSTILE))))
    running.stop()

    assert rabbit.queue_counts(topology.dead_letter_name(QNAME))[0] == 0, "nothing refused"
    for i, value in enumerate(HOSTILE):
        (span,) = processed(exporter, 100 + 2 * i)
        assert span.parent is None, f"{value!r:.40} is no context: the job starts its own trace"
        assert f"{span.context.trace_id:032x}" != NODE_TRACE_ID
        assert _attr(span, "queuey.job.outcome") == "succeeded"
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")], (
        "a bad header is no error"
    )
