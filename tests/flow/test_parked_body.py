"""A parked job's row: its envelope and its trace context, read back as they went in."""

from __future__ import annotations

from queuey_core.envelope import Envelope
from queuey_core.flow.parked_body import parked_body
from queuey_core.flow.parked_body import parked_envelope
from queuey_core.trace_context import TraceContext
from tests.support import Greet

TRACE = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "a=1,b=two words")


def _envelope() -> Envelope:
    return Envelope.for_job(Greet(name="ada\nlovelace"), enqueued_at=1_700_000_000_000, priority=0)


def test_a_traced_envelope_comes_back_with_its_trace_and_body() -> None:
    env = _envelope().with_trace(TRACE)
    back = parked_envelope(parked_body(env))
    assert back == env, "the envelope's fields are kept"
    assert back.trace == TRACE, "and the trace context beside them"


def test_an_untraced_row_is_the_envelope_alone_as_rows_parked_before_were() -> None:
    env = _envelope()
    assert parked_body(env) == env.encode(), "an untraced row is the plain body"
    back = parked_envelope(env.encode())
    assert back == env
    assert back.trace is None, "and no trace is made up"


def test_a_stored_trace_that_is_not_well_formed_is_dropped_and_the_job_kept() -> None:
    env = _envelope()
    row = b"not-a-traceparent\n\n" + env.encode()
    back = parked_envelope(row)
    assert back == env, "the job is published again all the same"
    assert back.trace is None, "a bad context is ignored, as in a header"
