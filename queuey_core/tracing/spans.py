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

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    TraceState,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from queuey_core.backends.base import Delivery
from queuey_core.clock import Clock
from queuey_core.envelope import EncodedEnvelope, Envelope
from queuey_core.trace_context import TRACEPARENT, TRACESTATE, TraceContext
from queuey_core.worker.hooks import HookRunner, WorkerHooks

logger = logging.getLogger(__name__)

#: ``messaging.system``: queuey is the messaging layer, whatever backend moves its jobs.
SYSTEM = "queuey"

_PROPAGATOR = TraceContextTextMapPropagator()


class ProducerTracing:
    """The producer's spans: ``publish <queue>``, PRODUCER, current while it publishes."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    @contextlib.contextmanager
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
        span = contextlib.ExitStack()
        try:
            span.enter_context(
                self._tracer.start_as_current_span(
                    name, kind=SpanKind.PRODUCER, attributes=attributes
                )
            )
            carried = current_context()
        except Exception:
            span.close()
            logger.warning("could not start the enqueue's span; publishing untraced", exc_info=True)
            yield None
            return
        with span:  # an error of the publish is recorded on the span, and raised on
            yield carried


def current_context() -> TraceContext | None:
    """The current span's context as a message carries it; None without a valid span."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return TraceContext.parse(carrier.get(TRACEPARENT), carrier.get(TRACESTATE))


_EMPTY = otel_context.Context()


def context_of(trace_context: TraceContext | None) -> otel_context.Context:
    """The OpenTelemetry context a message's trace context continues (an empty one for
    a message that carries none: its attempt then starts a trace of its own)."""
    if trace_context is None:
        return _EMPTY
    # Built straight from the checked value (TraceContext.parse let through only a
    # well-formed version-00 traceparent): what the propagator's extract() makes, at a
    # third of its cost, with nothing to cache (each job of a busy worker is a trace
    # of its own, so a cache would mostly miss).
    parent = trace_context.traceparent
    span_context = SpanContext(
        trace_id=int(parent[3:35], 16),
        span_id=int(parent[36:52], 16),
        is_remote=True,
        trace_flags=TraceFlags(int(parent[53:55], 16)),
        trace_state=_trace_state(trace_context.tracestate),
    )
    return trace.set_span_in_context(NonRecordingSpan(span_context), _EMPTY)


def _trace_state(tracestate: str) -> TraceState | None:
    # Well-formed already (TraceContext.parse); OpenTelemetry's parser keeps its order.
    return TraceState.from_header([tracestate]) if tracestate else None


class WorkerTracing:
    """The worker's spans: ``process <queue>``, CONSUMER, one per delivery.

    :meth:`around` wraps the dispatcher: it starts the span, makes it current on the
    job's thread while the delivery is dispatched (the checks, the handler, the settle),
    and ends it once settled. The outcome reaches the span through the worker's
    :class:`HookRunner` (:meth:`hook_runner` makes one that tells this first), which
    may be called on another thread (a stuck job's settle), about a wrapper of the
    delivery (the dispatcher's): the span is found by the delivery's envelope, the one
    object every wrapper hands on. (Two deliveries of one message are two envelopes.)

    What a job costs here is what the SDK charges for a span (its attributes, its end,
    its batching) plus as little as can be: a span's name and constant attributes are
    built once per queue and job type, its parent context straight from the message's
    checked ``traceparent``, one context attached, one attribute and no event on
    success (``docs/tracing.md``, "What it costs").
    """

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        # Keyed by the envelope's id(): the entry holds the envelope, so the id is not
        # reused while it is open. Lookups are single dict operations (atomic under the
        # GIL); the lock orders only an attempt's end between the dispatcher's return
        # and the settle, which for an async job come on two threads.
        self._open: dict[int, _Attempt] = {}
        self._lock = threading.Lock()
        self._kinds: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}

    def around(self, dispatch: Callable[[Delivery], None]) -> Callable[[Delivery], None]:
        """``dispatch``, each call under its delivery's span, ended once the delivery is
        settled: when the call returns, or, for a job it handed over to the worker's
        event loop (an ``async def`` handler), when that job is settled."""

        def traced(delivery: Delivery) -> None:
            try:
                span = self._start(delivery)
                token = otel_context.attach(trace.set_span_in_context(span, _EMPTY))
            except Exception:
                self._open.pop(id(delivery.envelope), None)
                logger.warning("could not start the job's span; running it untraced", exc_info=True)
                dispatch(delivery)
                return
            try:
                dispatch(delivery)  # an async job takes a copy of the context along
            finally:
                otel_context.detach(token)
                self._returned(delivery)

        return traced

    def _returned(self, delivery: Delivery) -> None:
        key = id(delivery.envelope)
        with self._lock:
            attempt = self._open.get(key)
            if attempt is None:
                return
            attempt.returned = True
            if attempt.started and not attempt.settled:
                return  # handed over, still running: its settle ends the span
            del self._open[key]
        attempt.span.end()

    def _settled(self, key: int, attempt: _Attempt) -> None:
        with self._lock:
            attempt.settled = True
            if not attempt.returned:
                return  # the dispatcher's return ends it
            self._open.pop(key, None)
        attempt.span.end()

    def started(self, delivery: Delivery) -> None:
        """The handler of ``delivery`` is called (on a job thread, or on the loop): an
        outcome will follow."""
        attempt = self._open.get(id(delivery.envelope))
        if attempt is not None:
            attempt.started = True

    def hook_runner(self, hooks: Iterable[WorkerHooks], clock: Clock, **options: Any) -> HookRunner:
        """The worker's :class:`HookRunner` (``options`` are its own), which tells each
        outcome to its span too."""
        # (options, not the control channel's JobCounts by name: its module imports the
        # worker's, which imports this package.)
        return _TracingHookRunner(self, hooks, clock, **options)

    def _kind(self, queue: str, job_type: str) -> tuple[str, dict[str, Any]]:
        """A span's name and the attributes every attempt of ``job_type`` from ``queue``
        has: made once, copied per job."""
        kind = self._kinds.get((queue, job_type))
        if kind is None:
            kind = self._kinds[queue, job_type] = (
                f"process {queue}",
                {
                    "messaging.system": SYSTEM,
                    "messaging.operation.name": "process",
                    "messaging.destination.name": queue,
                    "queuey.job.type": job_type,
                },
            )
        return kind

    def _start(self, delivery: Delivery) -> Span:
        env = delivery.envelope
        name, constant = self._kind(delivery.queue, env.job_type)
        # Each attribute costs the SDK about half a microsecond a job: the ones that
        # tell attempts apart, and the rest only when they say something.
        attributes = constant.copy()
        attributes["messaging.message.id"] = str(env.job_id)
        attributes["queuey.job.attempt"] = env.attempt
        if env.deferrals:
            attributes["queuey.job.deferrals"] = env.deferrals
        if delivery.redelivered:
            attributes["queuey.job.redelivered"] = True
        span = self._tracer.start_span(
            name, context=context_of(env.trace), kind=SpanKind.CONSUMER, attributes=attributes
        )
        self._open[id(env)] = _Attempt(span, env)
        return span

    def succeeded(self, delivery: Delivery) -> None:
        """The attempt of ``delivery`` succeeded: one attribute (the common case)."""
        key = id(delivery.envelope)
        attempt = self._open.get(key)
        if attempt is not None:
            attempt.span.set_attribute("queuey.job.outcome", "succeeded")
            self._settled(key, attempt)

    def ended(
        self,
        delivery: Delivery,
        outcome: str,
        *,
        error: str = "",
        reason: str = "",
        delay: float | None = None,
    ) -> None:
        """Put how the attempt of ``delivery`` ended on its span; ``error``: the
        handler's (or the timeout's), an exception event and the span failed."""
        key = id(delivery.envelope)
        attempt = self._open.get(key)
        if attempt is None:
            return
        span = attempt.span
        attributes: dict[str, Any] = {"queuey.job.outcome": outcome}
        if reason:
            attributes["queuey.job.reason"] = reason
        if delay is not None:
            attributes["queuey.job.delay_s"] = delay
        span.set_attributes(attributes)  # at once: each call takes the span's lock
        if error:
            span.add_event("exception", {"exception.message": error})
        if outcome in _FAILED:
            span.set_status(Status(StatusCode.ERROR, reason or error))
        self._settled(key, attempt)

    def timed_out(self, delivery: Delivery, error: str) -> None:
        """An event on the span of ``delivery``; its failed or dead-lettered one follows."""
        attempt = self._open.get(id(delivery.envelope))
        if attempt is not None:
            attempt.span.add_event("queuey.job.timed_out", {"queuey.job.error": error})


class _Attempt:
    """An attempt's span, and how far its delivery has gone."""

    __slots__ = ("envelope", "returned", "settled", "span", "started")

    def __init__(self, span: Span, envelope: Envelope) -> None:
        self.span = span
        self.envelope = envelope  # held: its id() is the key
        self.started = False  # the handler was called: an outcome will come
        self.settled = False  # the outcome was told
        self.returned = False  # the dispatcher's call is over


#: The outcomes that mark a span failed (a deferral is no failure).
_FAILED = frozenset({"retried", "dead_lettered"})


class _TracingHookRunner(HookRunner):
    """A :class:`HookRunner` that tells each outcome to its span before the hooks.

    The dispatcher calls it with every settle's reason (the handler's error, the
    backoff, the dead letter's reason), whether or not any hook listens: no
    :class:`JobInfo` is made for the span's sake.
    """

    def __init__(
        self,
        tracing: WorkerTracing,
        hooks: Iterable[WorkerHooks],
        clock: Clock,
        **options: Any,
    ) -> None:
        super().__init__(hooks, clock, **options)
        self._tracing = tracing

    def started(self, delivery: Delivery) -> None:
        self._tracing.started(delivery)
        super().started(delivery)

    def succeeded(self, delivery: Delivery, result: object = None) -> None:
        self._tracing.succeeded(delivery)
        super().succeeded(delivery, result)

    def cancelled(self, delivery: Delivery, reason: str) -> None:
        self._tracing.ended(delivery, "cancelled", reason=reason)
        super().cancelled(delivery, reason)

    def failed(self, delivery: Delivery, error: str, delay: float) -> None:
        self._tracing.ended(delivery, "retried", error=error, delay=delay)
        super().failed(delivery, error, delay)

    def deferred(self, delivery: Delivery, reason: str, delay: float) -> None:
        self._tracing.ended(delivery, "deferred", reason=reason, delay=delay)
        super().deferred(delivery, reason, delay)

    def dead_lettered(self, delivery: Delivery, reason: str, error: str = "") -> None:
        self._tracing.ended(delivery, "dead_lettered", error=error, reason=reason)
        super().dead_lettered(delivery, reason, error)

    def timed_out(self, delivery: Delivery, error: str) -> None:
        self._tracing.timed_out(delivery, error)
        super().timed_out(delivery, error)
