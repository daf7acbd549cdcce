"""The consumer link's delivery reader hands consumers what pika would, however the
bytes come.

Two pika connections with no socket are brought to the same state (channel 1 open,
consuming as ``ctag``); one reads alone, the other through a :class:`DeliveryReader`.
The same stream of frames (deliveries with any properties and bodies in frames of any
size, heartbeats, deliveries to a consumer nobody registered), cut into reads at any
points, must give the same calls in the same order and the same frame and byte counts.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from typing import Any

import pika
import pika.connection
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from pika import frame
from pika import spec
from pika.channel import Channel
from pika.spec import Basic
from pika.spec import BasicProperties

from queuey_core.backends.rabbitmq.delivery_frames import DeliveryReader

Seen = tuple[int, bool, object, object, bytes]


class _Conn(pika.connection.Connection):  # type: ignore[misc]
    """A pika connection with no socket: what it writes is kept, what it reads is fed."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        super().__init__(pika.ConnectionParameters(), internal_connection_workflow=False)

    def _adapter_call_later(self, delay: float, callback: Callable[[], None]) -> object:
        return object()

    def _adapter_remove_timeout(self, timeout_id: object) -> None:
        pass

    def _adapter_add_callback_threadsafe(self, callback: Callable[..., None]) -> None:
        callback()

    def _adapter_connect_stream(self) -> None:
        pass

    def _adapter_disconnect_stream(self) -> None:
        pass

    def _adapter_emit_data(self, data: bytes) -> None:
        self.written.append(data)

    def _adapter_get_write_buffer_size(self) -> int:
        return 0

    def feed(self, data: bytes) -> None:
        """Bytes from the socket, as the transport hands them over."""
        self._on_data_available(data)


def _consuming(seen: list[Seen]) -> tuple[_Conn, Channel]:
    """A connection whose channel 1 consumes as ``ctag`` and channel 2 as ``c2``,
    every delivery pika reads noted in ``seen`` (channel 2's with a negative tag)."""
    conn = _Conn()
    conn._set_connection_state(conn.CONNECTION_OPEN)
    opened: list[Channel] = []
    for number, tag in ((1, "ctag"), (2, "c2")):
        conn.channel(channel_number=number, on_open_callback=opened.append)
        conn.feed(frame.Method(number, spec.Channel.OpenOk()).marshal())
        sign = 1 if number == 1 else -1

        def delivered(
            _ch: Channel, method: Any, props: BasicProperties, body: bytes, sign: int = sign
        ) -> None:
            seen.append(
                (
                    sign * method.delivery_tag,
                    method.redelivered,
                    props.message_id,
                    props.headers,
                    body,
                )
            )

        opened[-1].basic_consume("q", delivered, consumer_tag=tag)
        conn.feed(frame.Method(number, Basic.ConsumeOk(consumer_tag=tag)).marshal())
    return conn, opened[0]


def _message(
    tag: int,
    redelivered: bool,
    props: BasicProperties,
    body: bytes,
    piece: int,
    ctag: str,
    channel: int = 1,
) -> bytes:
    deliver = Basic.Deliver(
        consumer_tag=ctag, delivery_tag=tag, redelivered=redelivered, exchange="", routing_key="q"
    )
    frames = [frame.Method(channel, deliver), frame.Header(channel, len(body), props)]
    frames += [frame.Body(channel, body[i : i + piece]) for i in range(0, len(body), piece)]
    return b"".join(f.marshal() for f in frames)


_short = st.text(max_size=20)
_header_values = st.one_of(
    st.integers(-(2**31), 2**31 - 1), st.text(max_size=30), st.booleans(), st.none()
)
_props = st.builds(
    BasicProperties,
    content_type=st.none() | _short,
    content_encoding=st.none() | _short,
    headers=st.none()
    | st.dictionaries(st.text(min_size=1, max_size=10), _header_values, max_size=4),
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 9),
    correlation_id=st.none() | _short,
    reply_to=st.none() | _short,
    expiration=st.none() | st.integers(0, 10**6).map(str),
    message_id=st.none() | st.text(max_size=40) | st.binary(max_size=40),
    timestamp=st.none() | st.integers(0, 2**40),
    type=st.none() | _short,
    user_id=st.none() | _short,
    app_id=st.none() | _short,
)
# A delivery, a heartbeat, a delivery to a consumer tag nobody registered, or to the
# consumer of another channel (pika's).
_events = st.one_of(
    st.tuples(
        st.just("deliver"), st.booleans(), _props, st.binary(max_size=200), st.integers(1, 64)
    ),
    st.tuples(st.just("heartbeat")),
    st.tuples(st.just("stranger"), st.binary(max_size=20)),
    st.tuples(st.just("channel 2"), st.binary(max_size=20)),
)


def _stream(events: list[tuple[Any, ...]]) -> bytes:
    tags = itertools.count(1)
    out = []
    for event in events:
        if event[0] == "deliver":
            _, redelivered, props, body, piece = event
            out.append(_message(next(tags), redelivered, props, body, piece, "ctag"))
        elif event[0] == "heartbeat":
            out.append(frame.Heartbeat().marshal())
        elif event[0] == "stranger":
            out.append(_message(next(tags), False, BasicProperties(), event[1], 64, "other"))
        else:
            out.append(_message(next(tags), True, BasicProperties(), event[1], 7, "c2", channel=2))
    return b"".join(out)


def _reads(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


@settings(max_examples=300, deadline=None)
@given(st.lists(_events, max_size=12), st.lists(st.integers(0, 10**6), max_size=8))
def test_the_reader_hands_over_what_pika_would_however_the_reads_are_cut(
    events: list[tuple[Any, ...]], cuts: list[int]
) -> None:
    data = _stream(events)
    by_pika: list[Seen] = []
    alone, _ = _consuming(by_pika)
    by_reader: list[Seen] = []
    conn, ch = _consuming(by_reader)
    reader = DeliveryReader(conn)
    reader.register(
        ch,
        "ctag",
        lambda _ch, *seen: by_reader.append(seen),
    )
    for read in _reads(data, cuts):
        alone.feed(read)
        conn.feed(read)
    assert by_reader == by_pika
    assert (conn.frames_received, conn.bytes_received) == (
        alone.frames_received,
        alone.bytes_received,
    )
    assert conn._frame_buffer == alone._frame_buffer == b""


def test_a_delivery_cut_short_waits_in_pikas_buffer_for_the_rest() -> None:
    seen: list[Seen] = []
    conn, ch = _consuming(seen)
    DeliveryReader(conn).register(ch, "ctag", lambda _ch, *s: seen.append(s))
    before = conn.bytes_received
    data = _message(1, False, BasicProperties(message_id="m"), b"x" * 100, 30, "ctag")
    conn.feed(data[:-10])
    assert seen == []
    assert conn.bytes_received == before
    conn.feed(data[-10:])
    assert seen == [(1, False, "m", None, b"x" * 100)]
    assert conn.bytes_received == before + len(data)


def test_a_forgotten_consumers_deliveries_go_to_pika_which_rejects_after_a_cancel() -> None:
    seen: list[Seen] = []
    conn, ch = _consuming(seen)
    reader = DeliveryReader(conn)
    fast: list[Seen] = []
    reader.register(ch, "ctag", lambda _ch, *s: fast.append(s))
    conn.feed(_message(1, False, BasicProperties(), b"{}", 64, "ctag"))
    assert fast == [(1, False, None, None, b"{}")]
    assert seen == []
    reader.forget(ch)
    ch.basic_cancel("ctag")
    conn.written.clear()
    conn.feed(_message(2, False, BasicProperties(), b"{}", 64, "ctag"))
    assert fast == [(1, False, None, None, b"{}")]
    assert seen == []
    rejects = [
        f for f in conn.written if f.startswith(frame.Method(1, Basic.Reject(2)).marshal()[:7])
    ]
    assert rejects, "pika rejects a delivery that comes after its consumer's cancel"


def test_a_consumer_that_raises_leaves_the_rest_of_the_read_in_the_buffer() -> None:
    seen: list[Seen] = []
    conn, ch = _consuming(seen)
    calls: list[int] = []

    def explode(_ch: Channel, tag: int, *rest: object) -> None:
        calls.append(tag)
        if tag == 1:
            raise RuntimeError("boom")

    DeliveryReader(conn).register(ch, "ctag", explode)
    data = b"".join(_message(t, False, BasicProperties(), b"{}", 64, "ctag") for t in (1, 2))
    with contextlib.suppress(RuntimeError):
        conn.feed(data)
    assert calls == [1]
    conn.feed(b"")
    assert calls == [1, 2]
