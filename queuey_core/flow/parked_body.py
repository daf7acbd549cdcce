"""What a parked job's row keeps: its envelope and the trace context it rides with.

A job parked behind a concurrency limit is acked and published again from its row when
a slot frees. Its W3C trace context travels beside the envelope's body, never in it
(:mod:`queuey_core.trace_context`), so the row must keep it too, or the job's later
attempts would start a trace of their own. A traced row is the ``traceparent`` line,
the ``tracestate`` line (empty when there is none), then the envelope's JSON; an
untraced row is the JSON alone, as rows parked before this format were, and a JSON body
always starts with ``{``, which no traceparent does.

Owns: that format. Must never: trust a stored context (it is read back through
:meth:`~queuey_core.trace_context.TraceContext.parse`, as any header is).
"""

from __future__ import annotations

from queuey_core.envelope import Envelope
from queuey_core.trace_context import TraceContext


def parked_body(envelope: Envelope) -> bytes:
    """The bytes a parked row keeps of ``envelope``: its body, and its trace if traced."""
    body = envelope.encode()
    trace = envelope.trace
    if trace is None:
        return body
    return b"%s\n%s\n%s" % (trace.traceparent.encode(), trace.tracestate.encode(), body)


def parked_envelope(data: bytes) -> Envelope:
    """The envelope of a parked row (:func:`parked_body`), carrying its trace again.

    Raises:
        DecodeError: the envelope is not one.
    """
    if data[:1] == b"{":
        return Envelope.decode(data)
    parent, state, body = data.split(b"\n", 2) if data.count(b"\n") >= 2 else (b"", b"", data)
    trace = TraceContext.parse(parent.decode("ascii", "replace"), state.decode("ascii", "replace"))
    return Envelope.decode(body).carrying(trace)
