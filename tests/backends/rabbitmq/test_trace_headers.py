"""The trace context on RabbitMQ: in the ``traceparent`` and ``tracestate`` headers of
what queuey publishes (a job, a dead letter), read back from a dead letter, and never in
the body.
"""

from __future__ import annotations

import uuid

from pika.spec import BasicProperties

from queuey_core import DeadLetter
from queuey_core.backends.rabbitmq import topology
from queuey_core.backends.rabbitmq.dead_letter_reading import dead_letter_of
from queuey_core.backends.rabbitmq.messages import properties
from queuey_core.envelope import Envelope
from queuey_core.trace_context import TraceContext

TRACE = TraceContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "rojo=1")


def envelope() -> Envelope:
    return Envelope(job_id=uuid.uuid4(), job_type="greet", queue="alpha", enqueued_at=1, payload={})


def test_a_traced_job_carries_its_context_in_two_headers_and_not_in_its_body() -> None:
    plain = envelope()
    traced = plain.with_trace(TRACE)
    assert properties(plain).headers is None, "an untraced job has no headers, as before"
    assert properties(traced).headers == {"traceparent": TRACE.traceparent, "tracestate": "rojo=1"}
    assert traced.encode() == plain.encode(), "the body is the same, traced or not"


def test_a_dead_letter_keeps_the_context_beside_its_reason() -> None:
    traced = envelope().with_trace(TRACE)
    reasons = topology.dead_letter_headers("fatal error: x", queue="alpha", dead_at=5, attempt=1)
    headers = properties(traced, reasons).headers
    assert headers == {**reasons, "traceparent": TRACE.traceparent, "tracestate": "rojo=1"}

    letter = dead_letter_of(BasicProperties(headers=headers), traced.encode(), 1)
    assert isinstance(letter, DeadLetter)
    assert letter.envelope.trace == TRACE, "read back, so that a requeue continues the trace"
    assert letter.envelope.fresh().trace == TRACE


def test_a_dead_letter_with_a_hostile_traceparent_is_listed_without_one() -> None:
    body = envelope().encode()
    letter = dead_letter_of(BasicProperties(headers={"traceparent": "x" * 10_000}), body, 1)
    assert isinstance(letter, DeadLetter)
    assert letter.envelope.trace is None
