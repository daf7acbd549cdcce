"""The trace context a message carries: what the W3C format allows, and nothing else.

Anyone who can publish can write any header, so the parser is tried with what a hostile
or careless publisher sends; whatever it is, it never raises, and only a well-formed
context comes out.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queuey_core.trace_context import MAX_TRACESTATE
from queuey_core.trace_context import TraceContext

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
GOOD = f"00-{TRACE_ID}-{SPAN_ID}-01"


def test_a_well_formed_context_is_kept_as_it_came() -> None:
    context = TraceContext.parse(GOOD, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
    assert context == TraceContext(GOOD, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
    assert (context.trace_id, context.span_id) == (TRACE_ID, SPAN_ID)
    assert context.headers() == {
        "traceparent": GOOD,
        "tracestate": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
    }
    assert TraceContext(GOOD).headers() == {"traceparent": GOOD}, "no empty tracestate"


def test_bytes_and_surrounding_blanks_are_read_as_the_specification_allows() -> None:
    assert TraceContext.parse(GOOD.encode()) == TraceContext(GOOD)
    assert TraceContext.parse(f" \t{GOOD}\t ") == TraceContext(GOOD)


def test_a_later_version_is_read_as_version_00() -> None:
    later = f"cc-{TRACE_ID}-{SPAN_ID}-01-what-the-future-adds"
    assert TraceContext.parse(later) == TraceContext(GOOD)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "garbage",
        "0" * 10_000,
        GOOD + "x" * 10_000,
        f"ff-{TRACE_ID}-{SPAN_ID}-01",  # version ff is invalid for ever
        f"00-{TRACE_ID}-{SPAN_ID}-01-more",  # version 00 has exactly four fields
        f"00-{'0' * 32}-{SPAN_ID}-01",
        f"00-{TRACE_ID}-{'0' * 16}-01",
        f"00-{TRACE_ID.upper()}-{SPAN_ID}-01",
        f"00-{TRACE_ID}-{SPAN_ID}-1",
        f"00-{TRACE_ID}-{SPAN_ID}-01\u00e9",
        f"00-{TRACE_ID}-{SPAN_ID}-01\n",
        "\u2028" * 60,
        b"\xff\xfe" * 30,
        bytearray(b"00-"),
        12345,
        3.5,
        True,
        {"traceparent": GOOD},
        [GOOD],
    ],
)
def test_anything_else_is_no_context(value: Any) -> None:
    assert TraceContext.parse(value, "rojo=1") is None, "and its tracestate goes with it"


@pytest.mark.parametrize(
    "tracestate",
    [
        "Rojo=1",  # keys are lower case
        "rojo=1,rojo=2",  # a key twice
        "rojo=1,congo",  # a member without a value
        "rojo=a=b",
        "rojo=1,=2",  # a member without a key
        ",".join(f"k{i}=v" for i in range(33)),  # more than 32 members
        "k=" + "v" * MAX_TRACESTATE,
        "rojo=\u00e9",
        12,
    ],
)
def test_a_bad_tracestate_is_dropped_alone(tracestate: Any) -> None:
    assert TraceContext.parse(GOOD, tracestate) == TraceContext(GOOD)


def test_empty_tracestate_members_are_left_out() -> None:
    assert TraceContext.parse(GOOD, " rojo=1 ,, congo=2,") == TraceContext(GOOD, "rojo=1,congo=2")


def test_a_context_is_read_from_headers_only_under_its_names() -> None:
    assert TraceContext.from_headers(None) is None
    assert TraceContext.from_headers({}) is None
    assert TraceContext.from_headers({"x-trace": GOOD}) is None
    assert TraceContext.from_headers({"traceparent": GOOD, "tracestate": "a=1"}) == TraceContext(
        GOOD, "a=1"
    )


@given(st.one_of(st.text(), st.binary(), st.integers(), st.none()), st.text() | st.binary())
def test_parsing_never_raises_and_keeps_only_the_w3c_shape(parent: Any, state: Any) -> None:
    context = TraceContext.parse(parent, state)
    if context is not None:
        assert TraceContext.parse(context.traceparent, context.tracestate) == context
        assert len(context.traceparent) == 55
