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
import functools
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
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


@functools.lru_cache(maxsize=1024)
def _extracted(trace_context: TraceContext) -> otel_context.Context:
    # Contexts are immutable: one per trace context serves every job of a batch (they
    # share their enqueue's) and every attempt of a job.
    return _PROPAGATOR.extract(trace_context.headers(), context=_EMPTY)


def context_of(trace_context: TraceContext | None) -> otel_context.Context:
    """The OpenTelemetry context a message's trace context continues (an empty one for
    a message that carries none: its attempt then starts a trace of its own)."""
    return _EMPTY if trace_context is None else _extracted(trace_context)


#: What an attempt's span is found by: the job's id, attempt and deferrals.
_Key = tuple[uuid.UUID, int, int]


def _key(env: Envelope) -> _Key:
    return (env.job_id, env.attempt, env.deferrals)


class WorkerTracing:
    """The worker's spans: ``process <queue>``, CONSUMER, one per delivery.

    :meth:`around` wraps the dispatcher: it starts the span, makes it current on the
    job's thread while the delivery is dispatched (the checks, the handler, the settle),
    and ends it once settled. The outcome reaches the span through the worker's
    :class:`HookRunner` (:meth:`hook_runner` makes one that tells this first), which
    may be called on another thread (a stuck job's settle): the span is found by the
    job's id, attempt and deferrals. (Two deliveries of one attempt at once, a
    duplicate, share the entry: the outcome may land on either.)
    """

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        # Single dict operations, atomic under the GIL: no lock on the per-job path.
        self._open: dict[_Key, Span] = {}

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

    def hook_runner(self, hooks: Iterable[WorkerHooks], clock: Clock, **options: Any) -> HookRunner:
        """The worker's :class:`HookRunner` (``options`` are its own), which tells each
        outcome to its span too."""
        # (options, not the control channel's JobCounts by name: its module imports the
        # worker's, which imports this package.)
        return _TracingHookRunner(self, hooks, clock, **options)

    def _start(self, delivery: Delivery) -> tuple[Span, _Key]:
        env = delivery.envelope
        queue = delivery.queue
        # Each attribute costs the SDK a few microseconds a job: the ones that tell
        # attempts apart, and the rest only when they say something.
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.name": "process",
            "messaging.destination.name": queue,
            "messaging.message.id": str(env.job_id),
            "queuey.job.type": env.job_type,
            "queuey.job.attempt": env.attempt,
        }
        if env.deferrals:
            attributes["queuey.job.deferrals"] = env.deferrals
        if delivery.redelivered:
            attributes["queuey.job.redelivered"] = True
        span = self._tracer.start_span(
            f"process {queue}",
            context=context_of(env.trace),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
        )
        key = _key(env)
        self._open[key] = span
        return span, key

    def _close(self, key: _Key, span: Span) -> None:
        if self._open.get(key) is span:
            self._open.pop(key, None)
        span.end()

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
        span = self._open.get(_key(delivery.envelope))
        if span is None:
            return
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

    def timed_out(self, delivery: Delivery, error: str) -> None:
        """An event on the span of ``delivery``; its failed or dead-lettered one follows."""
        span = self._open.get(_key(delivery.envelope))
        if span is not None:
            span.add_event("queuey.job.timed_out", {"queuey.job.error": error})


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

    def succeeded(self, delivery: Delivery, result: object = None) -> None:
        self._tracing.ended(delivery, "succeeded")
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
