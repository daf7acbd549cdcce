"""Traces across the queue, in memory on the manual clock, recorded by the SDK's
in-memory exporter: a producer span per enqueue, a consumer span per attempt, all in
the trace that enqueued the job, and nothing at all without a tracer provider.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider
from opentelemetry.trace import Span
from opentelemetry.trace import SpanKind
from opentelemetry.trace import StatusCode
from opentelemetry.trace import Tracer
from opentelemetry.trace import TracerProvider as OtelTracerProvider

from queuey_core import Backend
from queuey_core import DeadLetter
from queuey_core import Deferred
from queuey_core import Fatal
from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core import Retryable
from queuey_core import Worker
from queuey_core.backends.capabilities import DeadLetterTools
from queuey_core.logs import JsonFormatter
from queuey_core.tracing import TraceLogFields
from queuey_core.tracing import producer_tracing
from queuey_core.tracing import worker_tracing
from tests.support import ALPHA
from tests.support import Greet
from tests.support import Orphan
from tests.support import start
from tests.support import stuck_on_first_attempt
from tests.support import wait_for


@dataclass
class Traced:
    """A tracer provider whose spans end up in ``exporter``, as they end."""

    provider: TracerProvider
    exporter: InMemorySpanExporter

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """The finished spans (those called ``name``), in the order they ended."""
        done = self.exporter.get_finished_spans()
        return [s for s in done if name is None or s.name == name]

    def processed(self) -> list[ReadableSpan]:
        """The consumer spans, by attempt and deferrals (their order)."""
        spans = self.spans(f"process {ALPHA}")
        return sorted(spans, key=lambda s: (_attr(s, "queuey.job.attempt"), _deferrals(s)))


def _attr(span: ReadableSpan, key: str) -> object:
    assert span.attributes is not None
    return span.attributes.get(key)


def _deferrals(span: ReadableSpan) -> int:
    value = _attr(span, "queuey.job.deferrals")
    assert value is None or isinstance(value, int)
    return value or 0  # left out when 0


def _parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


@pytest.fixture
def traced() -> Iterator[Traced]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Traced(provider, exporter)
    provider.shutdown()


def run_until(worker: Worker, clock: ManualClock, done: Callable[[], bool]) -> None:
    running = start(worker, clock)
    wait_for(done, clock)
    running.stop()


def test_one_trace_runs_from_the_enqueue_through_a_retry_to_success(
    traced: Traced, backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    tracer = traced.provider.get_tracer("the app")

    def greet(job: Greet, ctx: JobContext) -> None:
        with tracer.start_as_current_span("the handler's own work"):
            if ctx.attempt == 1:
                raise Retryable("flaky failure")

    producer = Producer(backend, queues, clock=clock, tracer_provider=traced.provider)
    worker = Worker(
        backend, queues, [Handler(Greet, greet)], clock=clock, tracer_provider=traced.provider
    )
    with tracer.start_as_current_span("POST /orders"):
        job_id = producer.enqueue(Greet(name="ada"))

    run_until(worker, clock, lambda: len(traced.processed()) == 2)

    (request,) = traced.spans("POST /orders")
    (publish,) = traced.spans(f"publish {ALPHA}")
    first, second = traced.processed()
    own = traced.spans("the handler's own work")
    trace_id = request.context.trace_id
    assert {s.context.trace_id for s in [publish, first, second, *own]} == {trace_id}, (
        "enqueue, both attempts and the handler's spans are one trace"
    )
    assert publish.kind is SpanKind.PRODUCER
    assert _parent_id(publish) == request.context.span_id, "the enqueue is the caller's child"
    for attempt, span in enumerate([first, second], start=1):
        assert span.kind is SpanKind.CONSUMER
        assert _parent_id(span) == publish.context.span_id, (
            f"attempt {attempt} continues the context its message carried: the enqueue's"
        )
        assert _attr(span, "messaging.message.id") == str(job_id)
        assert _attr(span, "messaging.destination.name") == ALPHA
        assert _attr(span, "queuey.job.type") == Greet.NAME
        assert _attr(span, "queuey.job.attempt") == attempt
    assert {_parent_id(s) for s in own} == {first.context.span_id, second.context.span_id}, (
        "a span the handler starts nests under its attempt's span"
    )
    assert _attr(publish, "messaging.system") == "queuey"
    assert _attr(publish, "messaging.operation.type") == "send"

    assert _attr(first, "queuey.job.outcome") == "retried"
    assert _attr(first, "queuey.job.delay_s") == 1.0, "the retry's backoff"
    assert first.status.status_code is StatusCode.ERROR
    (event,) = [e for e in first.events if e.name == "exception"]
    assert event.attributes is not None
    assert event.attributes["exception.message"] == "flaky failure"
    assert _attr(second, "queuey.job.outcome") == "succeeded"
    assert second.status.status_code is StatusCode.UNSET
    assert not second.events


def fatal_once(
    traced: Traced, backend: Backend, queues: QueueSet, clock: ManualClock
) -> Callable[[], Worker]:
    """Makes traced workers whose greet handler fails fatally the first time only."""
    runs: list[int] = []

    def greet(job: Greet, ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        if len(runs) == 1:
            raise Fatal("cannot ever work")

    def worker() -> Worker:
        return Worker(
            backend, queues, [Handler(Greet, greet)], clock=clock, tracer_provider=traced.provider
        )

    return worker


def test_a_dead_letter_keeps_its_trace_and_a_requeue_joins_it_again(
    traced: Traced, backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    worker = fatal_once(traced, backend, queues, clock)

    producer = Producer(backend, queues, clock=clock, tracer_provider=traced.provider)
    producer.enqueue(Greet(name="doomed"))
    run_until(worker(), clock, lambda: len(backend.dead_letters(ALPHA)) == 1)

    (publish,) = traced.spans(f"publish {ALPHA}")
    (dead,) = traced.processed()
    assert dead.context.trace_id == publish.context.trace_id
    assert _attr(dead, "queuey.job.outcome") == "dead_lettered"
    assert _attr(dead, "queuey.job.reason") == "fatal error: cannot ever work"
    assert dead.status.status_code is StatusCode.ERROR
    assert [e.name for e in dead.events] == ["exception"]
    (letter,) = backend.dead_letters(ALPHA)
    letter_and_requeue_stay_in_the_trace(traced, backend, letter, worker, clock)


def letter_and_requeue_stay_in_the_trace(
    traced: Traced,
    tools: DeadLetterTools,
    letter: DeadLetter,
    worker: Callable[[], Worker],
    clock: ManualClock,
) -> None:
    """``letter`` (the only dead letter of ALPHA) carries its enqueue's trace, and its
    requeue runs in that trace again, under the enqueue's span."""
    (publish,) = traced.spans(f"publish {ALPHA}")
    assert letter.envelope.trace is not None, "the dead letter carries the job's context"
    assert letter.envelope.trace.trace_id == f"{publish.context.trace_id:032x}"

    assert tools.requeue_dead_letters(ALPHA) == 1
    run_until(worker(), clock, lambda: len(traced.processed()) == 2)
    again = traced.processed()[-1]
    assert again.context.trace_id == publish.context.trace_id, "the requeued job's trace"
    assert _parent_id(again) == publish.context.span_id


def test_a_deferral_is_no_error_and_its_next_run_stays_in_the_trace(
    traced: Traced, backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    def greet(job: Greet, ctx: JobContext) -> None:
        if ctx.deferrals == 0:
            raise Deferred(30, "rate limited")

    producer = Producer(backend, queues, clock=clock, tracer_provider=traced.provider)
    worker = Worker(
        backend, queues, [Handler(Greet, greet)], clock=clock, tracer_provider=traced.provider
    )
    producer.enqueue(Greet(name="snooze"))
    run_until(worker, clock, lambda: len(traced.processed()) == 2)

    (publish,) = traced.spans(f"publish {ALPHA}")
    deferred, ran = traced.processed()
    assert {deferred.context.trace_id, ran.context.trace_id} == {publish.context.trace_id}
    assert _attr(deferred, "queuey.job.outcome") == "deferred"
    assert _attr(deferred, "queuey.job.reason") == "rate limited"
    assert _attr(deferred, "queuey.job.delay_s") == 30
    assert deferred.status.status_code is StatusCode.UNSET, "a deferral is not a failure"
    assert (_attr(ran, "queuey.job.deferrals"), _attr(ran, "queuey.job.outcome")) == (
        1,
        "succeeded",
    )


def traced_pair(
    traced: Traced,
    backend: MemoryBackend,
    queues: QueueSet,
    clock: ManualClock,
    greet: Callable[[Greet, JobContext], None],
) -> tuple[Producer, Worker]:
    """A producer, and a worker of ``greet``, that both trace to ``traced``."""
    producer = Producer(backend, queues, clock=clock, tracer_provider=traced.provider)
    worker = Worker(
        backend, queues, [Handler(Greet, greet)], clock=clock, tracer_provider=traced.provider
    )
    return producer, worker


def test_a_message_no_handler_takes_is_a_dead_lettered_span(
    traced: Traced, backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    producer, worker = traced_pair(traced, backend, queues, clock, lambda _j, _c: None)
    producer.enqueue(Orphan(id=1))
    run_until(worker, clock, lambda: len(traced.processed()) == 1)

    (span,) = traced.processed()
    assert _attr(span, "queuey.job.outcome") == "dead_lettered"
    assert _attr(span, "queuey.job.reason") == f"no handler for job type {Orphan.NAME!r}"
    assert span.status.status_code is StatusCode.ERROR
    assert not span.events, "no handler ran: there is no exception to show"


def test_a_batch_is_one_span_and_every_job_of_it_continues_it(
    traced: Traced, backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    producer, worker = traced_pair(traced, backend, queues, clock, lambda _j, _c: None)
    ids = producer.enqueue_many([Greet(name=str(i)) for i in range(5)])
    run_until(worker, clock, lambda: len(traced.processed()) == 5)

    (publish,) = traced.spans(f"publish {ALPHA}")
    assert _attr(publish, "messaging.batch.message_count") == 5
    runs = traced.processed()
    assert {_parent_id(s) for s in runs} == {publish.context.span_id}
    assert {_attr(s, "messaging.message.id") for s in runs} == {str(i) for i in ids}


def test_a_failed_enqueue_is_a_failed_producer_span(
    traced: Traced, backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    producer = Producer(backend, queues, clock=clock, tracer_provider=traced.provider)
    backend.close()
    with pytest.raises(Exception, match="closed"):
        producer.enqueue(Greet(name="ada"))

    (publish,) = traced.spans(f"publish {ALPHA}")
    assert publish.status.status_code is StatusCode.ERROR
    assert [e.name for e in publish.events] == ["exception"]


def test_without_a_tracer_provider_nothing_is_traced(
    backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock
) -> None:
    assert producer_tracing() is None, "the API's proxy provider: nobody to send spans to"
    assert worker_tracing() is None
    assert producer_tracing(NoOpTracerProvider()) is None
    assert worker_tracing(NoOpTracerProvider()) is None

    worker = Worker(backend, queues, [Handler(Greet, lambda _j, _c: None)], clock=clock)
    producer.enqueue(Greet(name="ada"))
    run_until(worker, clock, lambda: len(backend.acked(ALPHA)) == 1)
    (env,) = backend.acked(ALPHA)
    assert env.trace is None, "no trace context is made, and none is carried"


def _loaded(code: str) -> bool:
    """Whether running ``code`` in a fresh interpreter loads OpenTelemetry's API."""
    probe = f"{code}\nimport sys\nprint('opentelemetry.trace' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return done.stdout.split()[-1] == "True"


def test_a_process_that_does_not_trace_never_imports_opentelemetry() -> None:
    code = (
        "from queuey_core import MemoryBackend, Producer, Worker\n"
        "from tests.support import seed_queues\n"
        "queues = seed_queues(); backend = MemoryBackend()\n"
        "Producer(backend, queues); Worker(backend, queues, [])\n"
        "from queuey_cli.output import LogFormat, setup_logging\n"
        "setup_logging(LogFormat.JSON, 'info')\n"
        "import logging; logging.getLogger('x').info('a line')"
    )
    assert not _loaded(code), "no provider was set: importing the API would be start-up time"


def test_a_global_provider_set_before_the_producer_is_used() -> None:
    code = (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "from queuey_core.tracing import producer_tracing, worker_tracing\n"
        "assert producer_tracing() is not None and worker_tracing() is not None"
    )
    assert _loaded(code)


def test_log_records_made_under_a_span_carry_its_ids(traced: Traced) -> None:
    tracer = traced.provider.get_tracer("the app")
    fields = TraceLogFields()
    formatter = JsonFormatter()

    def line(message: str) -> dict[str, object]:
        record = logging.LogRecord("app", logging.INFO, __file__, 1, message, (), None)
        assert fields.filter(record), "a record is never dropped"
        parsed: dict[str, object] = json.loads(formatter.format(record))
        return parsed

    with tracer.start_as_current_span("work") as span:
        inside = line("inside")
    outside = line("outside")

    context = span.get_span_context()
    assert inside["trace_id"] == f"{context.trace_id:032x}"
    assert inside["span_id"] == f"{context.span_id:016x}"
    assert "trace_id" not in outside
    assert "span_id" not in outside


class _BrokenTracer(Tracer):
    """A tracer whose every span fails to start (a broken SDK or exporter setup)."""

    def start_span(self, *args: Any, **kwargs: Any) -> Span:
        raise RuntimeError("the SDK broke")

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the SDK broke")


class _BrokenProvider(OtelTracerProvider):
    def get_tracer(self, *args: Any, **kwargs: Any) -> Tracer:
        return _BrokenTracer()


def test_a_tracer_that_fails_never_fails_a_job_or_an_enqueue(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    broken = _BrokenProvider()
    producer = Producer(backend, queues, clock=clock, tracer_provider=broken)
    worker = Worker(
        backend, queues, [Handler(Greet, lambda _j, _c: None)], clock=clock, tracer_provider=broken
    )
    producer.enqueue(Greet(name="ada"))
    producer.enqueue_many([Greet(name="bob"), Greet(name="cy")])
    run_until(worker, clock, lambda: len(backend.acked(ALPHA)) == 3)
    assert all(env.trace is None for env in backend.acked(ALPHA)), "published untraced"


def test_a_timed_out_attempt_shows_the_timeout_then_its_retry(
    traced: Traced, backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    greet = stuck_on_first_attempt(clock)

    producer = Producer(backend, queues, clock=clock, tracer_provider=traced.provider)
    worker = Worker(
        backend,
        queues,
        [Handler(Greet, greet)],
        job_timeout=5,
        clock=clock,
        tracer_provider=traced.provider,
    )
    producer.enqueue(Greet(name="slow"))
    run_until(worker, clock, lambda: len(traced.processed()) == 2)

    slow, ran = traced.processed()
    assert [e.name for e in slow.events] == ["queuey.job.timed_out", "exception"]
    assert _attr(slow, "queuey.job.outcome") == "retried"
    assert slow.status.status_code is StatusCode.ERROR
    assert _attr(ran, "queuey.job.outcome") == "succeeded"
