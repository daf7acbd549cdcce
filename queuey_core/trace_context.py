"""A job's W3C trace context: the ``traceparent`` and ``tracestate`` a message carries.

Owns: the value a backend carries beside an envelope (never inside its JSON body) and
the checks that make it safe to carry: anyone who can publish to a queue can put
anything in a header, so what a backend reads back goes through :meth:`TraceContext.parse`,
which keeps only a well-formed context (W3C Trace Context, level 1) and answers None for
anything else (garbage, 10 KB, version ``ff``, an all-zero id, non-ASCII, not a string).
A job with no (or a refused) context runs as any other: tracing never decides whether a
job runs.

The envelope carries it beside its body, never in it (:class:`TracedModel`, its base):
a backend writes it to message headers or a column of its own and gives it back on
delivery. Nothing here needs OpenTelemetry: the backends carry the context whether or
not the process traces (:mod:`queuey_core.tracing` makes and reads it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self

from pydantic import BaseModel

#: The header names (W3C Trace Context), the same in AMQP headers as in HTTP.
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

#: A traceparent of a later version may be longer than version 00's 55 characters; past
#: this it is refused unread.
MAX_TRACEPARENT = 256
#: W3C: at most 32 list members; 512 characters is what every vendor must pass on.
MAX_TRACESTATE = 512
_MAX_MEMBERS = 32

_TRACEPARENT_RE = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[\x21-\x7e]*)?"
)
# A tracestate list member, as W3C (and OpenTelemetry's TraceState) define it.
_MEMBER_RE = re.compile(
    r"(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)
# What every traced job a queuey (or an OpenTelemetry SDK) sends carries: checked in one
# match, the general path's checks being true of whatever matches it.
_VERSION_00_RE = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


@dataclass(frozen=True, slots=True)
class TraceContext:
    """A W3C trace context: the span a job was enqueued under.

    ``traceparent`` is always version 00 (``00-<trace id>-<span id>-<flags>``, 55
    characters); ``tracestate`` is "" when there is none. Make one with :meth:`parse`
    (from a wire) or from OpenTelemetry's propagator (:mod:`queuey_core.tracing`).
    """

    traceparent: str
    tracestate: str = ""

    @classmethod
    def parse(cls, traceparent: object, tracestate: object = None) -> TraceContext | None:
        """The context of two header values as they came off a wire, or None.

        ``traceparent`` must be a well-formed W3C traceparent (a later version than 00
        is read as 00, as the specification asks); anything else gives None, and the
        ``tracestate`` is then ignored too. A ``tracestate`` that is not well-formed is
        dropped alone. Bytes are read as ASCII. Never raises.
        """
        if (
            type(traceparent) is str
            and _VERSION_00_RE.fullmatch(traceparent) is not None
            and traceparent[3:35] != _ZERO_TRACE
            and traceparent[36:52] != _ZERO_SPAN
        ):
            return cls(traceparent, "" if tracestate is None else _tracestate(tracestate))
        parent = _ascii(traceparent, MAX_TRACEPARENT)
        if parent is None:
            return None
        match = _TRACEPARENT_RE.fullmatch(parent.strip(" \t"))
        if match is None:
            return None
        version, trace_id, span_id, flags, rest = match.groups()
        if version == "ff" or (version == "00" and rest):
            return None
        if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
            return None
        return cls(f"00-{trace_id}-{span_id}-{flags}", _tracestate(tracestate))

    @classmethod
    def from_headers(cls, headers: Mapping[str, object] | None) -> TraceContext | None:
        """The context in a message's headers (``traceparent``, ``tracestate``), or None."""
        if not headers:
            return None
        parent = headers.get(TRACEPARENT)
        if parent is None:
            return None
        return cls.parse(parent, headers.get(TRACESTATE))

    def headers(self) -> dict[str, str]:
        """The headers that carry this context (``tracestate`` only when there is one)."""
        if self.tracestate:
            return {TRACEPARENT: self.traceparent, TRACESTATE: self.tracestate}
        return {TRACEPARENT: self.traceparent}

    @property
    def trace_id(self) -> str:
        """The trace id, 32 lowercase hex digits."""
        return self.traceparent[3:35]

    @property
    def span_id(self) -> str:
        """The id of the span the job was enqueued under, 16 lowercase hex digits."""
        return self.traceparent[36:52]


class TracedModel(BaseModel):
    """A model that carries a :class:`TraceContext` beside its fields (the envelope's base).

    The context is no field: it is never read from nor written to JSON, and the body of
    an envelope is the same traced or not. Every copy keeps it (``model_copy``, so the
    envelope's ``next_attempt()``, ``deferred()`` and ``fresh()``): every attempt of a
    job, and its dead letter, belong to the trace that enqueued it.
    """

    @property
    def trace(self) -> TraceContext | None:
        """The W3C trace context the job was enqueued under, if it was traced."""
        private = self.__pydantic_private__
        return None if private is None else private.get("trace")

    def with_trace(self, trace: TraceContext | None) -> Self:
        """A copy carrying ``trace`` (None: no trace)."""
        copy = self.model_copy()
        # Kept in pydantic's slot for private values, which model_copy() copies; not a
        # declared PrivateAttr, which would cost every decode a dict (1.1 us, a third
        # more, measured), traced or not.
        private = None if trace is None else {"trace": trace}
        object.__setattr__(copy, "__pydantic_private__", private)
        return copy

    def carrying(self, trace: TraceContext | None) -> Self:
        """This model, carrying ``trace`` from now on: for a model nobody else holds
        yet (one a backend just decoded), where :meth:`with_trace`'s copy is waste."""
        object.__setattr__(
            self, "__pydantic_private__", None if trace is None else {"trace": trace}
        )
        return self


def _ascii(value: object, limit: int) -> str | None:
    """``value`` as printable ASCII (tabs allowed: W3C's optional blanks) of at most
    ``limit`` characters, else None."""
    if isinstance(value, (bytes, bytearray)):
        if len(value) > limit or not value.isascii():
            return None
        value = value.decode("ascii")
    if not isinstance(value, str) or len(value) > limit:
        return None
    if not (value.isascii() and value.replace("\t", " ").isprintable()):
        return None
    return value


def _tracestate(value: object) -> str:
    """A well-formed tracestate, or "" (a bad one is dropped whole, as W3C asks)."""
    if value is None:
        return ""
    text = _ascii(value, MAX_TRACESTATE)
    if text is None:
        return ""
    members = [m.strip(" \t") for m in text.split(",")]
    members = [m for m in members if m]
    if len(members) > _MAX_MEMBERS:
        return ""
    keys = set()
    for member in members:
        if _MEMBER_RE.fullmatch(member) is None:
            return ""
        key = member.split("=", 1)[0]
        if key in keys:  # a key twice: W3C calls the whole header invalid
            return ""
        keys.add(key)
    return ",".join(members)
