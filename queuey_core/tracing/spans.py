"""The spans: one PRODUCER span per enqueue call, one CONSUMER span per attempt.

Imported only once :mod:`queuey_core.tracing` found a tracer provider that records
(it imports OpenTelemetry at the top).

The trace of a job, as a collector shows it (``docs/tracing.md``)::

    POST /orders                        (the caller's own span)
    └── publish alpha          PRODUCER  the enqueue; its context rides in the message
        ├── process alpha      CONSUMER  attempt 1: retried, the error as an event
        │   └── (spans the handler starts)
        └── process alpha      CONSUMER  attempt 2: succeeded

Every attempt is a child of the span that enqueued the job: a retry's or a deferral's
envelope carries the original context (:attr:`Envelope.trace`, kept by
``next_attempt()``), and so does a dead letter, and a dead letter requeued. The order of
the attempts is their ``queuey.job.attempt`` and ``queuey.job.deferrals`` and their times.

Attribute names are OpenTelemetry's messaging semantic conventions where they have one
(``messaging.*``), ``queuey.job.*`` otherwise.

Owns: the spans' names, kinds, attributes and events, and turning the current span into
the :class:`TraceContext` a message carries and back. Must never: let tracing fail a
job or an enqueue (a span that cannot be made is logged and the work goes on untraced),
nor run a job under a context a message did not carry.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from queuey_core.backends.base import Delivery
from queuey_core.envelope import EncodedEnvelope, Envelope
from queuey_core.trace_context import TRACEPARENT, TRACESTATE, TraceContext
from queuey_core.worker.hooks import JobInfo, WorkerHooks

logger = logging.getLogger(__name__)

#: ``messaging.system``: queuey is the messaging layer, whatever backend moves its jobs.
SYSTEM = "queuey"

_PROPAGATOR = TraceContextTextMapPropagator()


class ProducerTracing:
    """The producer's spans: ``publish <queue>``, PRODUCER, current while it publishes."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    @contextmanager
    def publishing(
        self, envelopes: Sequence[Envelope | EncodedEnvelope]
    ) -> Iterator[TraceContext | None]:
        """A PRODUCER span around publishing ``envelopes`` (one call: one span, a batch
        too); yields the context each of them must carry. An error raised inside is
        recorded on the span (and the span marked as failed) and raised on."""
        queues = {env.queue for env in envelopes}
        queue = next(iter(queues)) if len(queues) == 1 else None
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.name": "publish",
            "messaging.operation.type": "send",
        }
        if queue is not None:
            attributes["messaging.destination.name"] = queue
        if len(envelopes) == 1:
            first = envelopes[0]
            attributes["messaging.message.id"] = str(first.job_id)
            attributes["queuey.job.type"] = first.job_type
        else:
            attributes["messaging.batch.message_count"] = len(envelopes)
        name = f"publish {queue}" if queue is not None else "publish"
        with self._tracer.start_as_current_span(
            name, kind=SpanKind.PRODUCER, attributes=attributes
        ):
            yield current_context()


def current_context() -> TraceContext | None:
    """The current span's context as a message carries it; None without a valid span."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return TraceContext.parse(carrier.get(TRACEPARENT), carrier.get(TRACESTATE))


def context_of(trace_context: TraceContext | None) -> otel_context.Context:
    """The OpenTelemetry context a message's trace context continues (an empty one for
    a message that carries none: its attempt then starts a trace of its own)."""
    if trace_context is None:
        return otel_context.Context()
    return _PROPAGATOR.extract(trace_context.headers(), context=otel_context.Context())


#: What an attempt's span is found by from a hook's JobInfo.
_Key = tuple[uuid.UUID, int, int]


class WorkerTracing(WorkerHooks):
    """The worker's spans: ``process <queue>``, CONSUMER, one per delivery.

    :meth:`around` wraps the dispatcher: it starts the span, makes it current on the
    job's thread while the delivery is dispatched (the checks, the handler, the settle),
    and ends it once settled. The outcome reaches the span through the worker's hooks
    (this is one, the last), which may run on another thread (a stuck job's settle): the
    span is found by the job's id, attempt and deferrals.
    """

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        self._lock = threading.Lock()
        self._open: dict[_Key, list[Span]] = {}

    def around(self, dispatch: Callable[[Delivery], None]) -> Callable[[Delivery], None]:
        """``dispatch``, each call under its delivery's span."""

        def traced(delivery: Delivery) -> None:
            try:
                span, key = self._start(delivery)
            except Exception:
                logger.warning("could not start the job's span; running it untraced", exc_info=True)
                dispatch(delivery)
                return
            token = otel_context.attach(trace.set_span_in_context(span))
            try:
                dispatch(delivery)
            finally:
                otel_context.detach(token)
                self._close(key, span)

        return traced

    def _start(self, delivery: Delivery) -> tuple[Span, _Key]:
        env = delivery.envelope
        queue = delivery.queue
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.destination.name": queue,
            "messaging.message.id": str(env.job_id),
            "queuey.job.type": env.job_type,
            "queuey.job.attempt": env.attempt,
            "queuey.job.deferrals": env.deferrals,
        }
        if delivery.redelivered:
            attributes["queuey.job.redelivered"] = True
        span = self._tracer.start_span(
            f"process {queue}",
            context=context_of(env.trace),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
        )
        key = (env.job_id, env.attempt, env.deferrals)
        with self._lock:
            self._open.setdefault(key, []).append(span)
        return span, key

    def _close(self, key: _Key, span: Span) -> None:
        with self._lock:
            spans = self._open.get(key)
            if spans is not None:
                spans.remove(span)
                if not spans:
                    del self._open[key]
        span.end()

    def _span(self, job: JobInfo) -> Span | None:
        with self._lock:
            spans = self._open.get((job.job_id, job.attempt, job.deferrals))
            return spans[-1] if spans else None

    # -- the outcome, as the hooks tell it -----------------------------------------------

    def on_job_succeeded(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        span = self._span(job)
        if span is not None:
            span.set_attribute("queuey.job.outcome", "succeeded")

    def on_job_failed(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`: retried after ``job.delay``."""
        span = self._span(job)
        if span is not None:
            span.set_attribute("queuey.job.outcome", "retried")
            if job.delay is not None:
                span.set_attribute("queuey.job.delay_s", job.delay)
            _failed(span, job.error, job.error)

    def on_job_deferred(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`: nothing failed, so the span is no error."""
        span = self._span(job)
        if span is not None:
            span.set_attribute("queuey.job.outcome", "deferred")
            span.set_attribute("queuey.job.reason", job.reason)
            if job.delay is not None:
                span.set_attribute("queuey.job.delay_s", job.delay)

    def on_job_dead_lettered(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        span = self._span(job)
        if span is not None:
            span.set_attribute("queuey.job.outcome", "dead_lettered")
            span.set_attribute("queuey.job.reason", job.reason)
            _failed(span, job.error, job.reason)

    def on_job_timed_out(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`: an event; its failed or dead-lettered one follows."""
        span = self._span(job)
        if span is not None:
            span.add_event("queuey.job.timed_out", {"queuey.job.error": job.error})


def _failed(span: Span, error: str, status: str) -> None:
    """Mark ``span`` failed with ``status``; ``error`` (the handler's, if it raised) as
    the exception event, whose message is the text logs and dead letters show."""
    if error:
        span.add_event("exception", {"exception.message": error})
    span.set_status(Status(StatusCode.ERROR, status))
