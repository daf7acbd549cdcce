"""The trace context on RabbitMQ: in the ``traceparent`` and ``tracestate`` headers of
what queuey publishes (a job, its batch's fast path, a dead letter), read back from a
dead letter, and never in the body.
"""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st
from pika.spec import BasicProperties

from queuey_core import DeadLetter
from queuey_core.backends.rabbitmq import topology
from queuey_core.backends.rabbitmq.admin import dead_letter_of
from queuey_core.backends.rabbitmq.publisher import encoded_properties
from queuey_core.backends.rabbitmq.publisher import properties
from queuey_core.envelope import EncodedEnvelope
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


traces = st.builds(
    lambda trace, span, flags, state: TraceContext(
        f"00-{trace:032x}-{span:016x}-{flags:02x}", state
    ),
    st.integers(1, 2**128 - 1),
    st.integers(1, 2**64 - 1),
    st.integers(0, 255),
    st.sampled_from(["", "rojo=00f067aa0ba902b7", "a=1,b=2"]),
)


@given(
    trace=st.none() | traces,
    priority=st.integers(0, 255),
    job_type=st.from_regex(r"[a-z][a-z0-9._-]{0,40}", fullmatch=True),
)
def test_the_batch_fast_path_writes_what_pika_writes_with_the_trace(
    trace: TraceContext | None, priority: int, job_type: str
) -> None:
    env = Envelope(
        job_id=uuid.uuid4(),
        job_type=job_type,
        queue="alpha",
        priority=priority,
        enqueued_at=1796022752879,
        payload={},
    )
    encoded = EncodedEnvelope(
        env.job_id, job_type, "alpha", priority, env.enqueued_at, env.encode(), trace=trace
    )
    assert encoded_properties(encoded) == b"".join(properties(encoded).encode())
    assert encoded.envelope().trace == trace, "a backend that keeps models keeps the trace"
