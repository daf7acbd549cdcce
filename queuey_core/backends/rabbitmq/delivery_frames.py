"""Deliveries read off the consumer link's socket by hand, for the worker's hot path.

pika turns every frame it reads into objects through generic code: a delivery's three
frames (``Basic.Deliver``, the content header, the body) cost about 120 Python calls
before a consumer sees it, the better part of what a raw pika consumer spends a
message. The :class:`DeliveryReader` takes the bytes the consumer link's connection
reads first: a run of whole deliveries to consumers registered with it is read with a
few ``struct`` calls each and handed to their callbacks; anything else (a heartbeat, any
other method, a frame of another channel, a delivery to a consumer not registered or
cancelled, a property layout it does not read, a malformed frame) and everything after
it in the same read goes to pika, as it would have without the reader. A delivery not
yet read whole stays in pika's buffer for the next read. Frames and bytes are counted
as pika counts them (its heartbeat checker watches the byte count).
tests/backends/rabbitmq/test_delivery_frames.py holds the reader to pika: the same
callbacks with the same values, however the bytes are cut.

Owns: reading ``Basic.Deliver`` content for registered consumers. Must never: hand a
consumer anything pika would not (it decodes the headers with pika's own table decoder),
reorder frames, or read a frame pika would refuse.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from pika.channel import Channel
from pika.connection import Connection

from queuey_core.backends.rabbitmq import pika_compat

#: What a registered consumer is called with: its channel, the delivery tag, the
#: ``redelivered`` flag, the ``message_id`` and ``headers`` properties, the body.
OnDelivery = Callable[
    [Channel, int, bool, "str | bytes | None", "dict[str, Any] | None", bytes], None
]

_FRAME = struct.Struct(">BHI")  # type, channel, payload size
_DELIVER = struct.Struct(">HHB")  # class, method, the consumer tag's length
_TAG = struct.Struct(">QB")  # delivery tag, the bits (redelivered)
_CONTENT = struct.Struct(">HHQH")  # class, weight, body size, property flags
_METHOD, _HEADER, _BODY = 1, 2, 3
_FRAME_END = 0xCE
_BASIC = 60
_DELIVER_ID = 60

# BasicProperties' flags, in the order the properties follow them.
_CONTENT_TYPE = 1 << 15
_CONTENT_ENCODING = 1 << 14
_HEADERS = 1 << 13
_DELIVERY_MODE = 1 << 12
_PRIORITY = 1 << 11
_CORRELATION_ID = 1 << 10
_REPLY_TO = 1 << 9
_EXPIRATION = 1 << 8
_MESSAGE_ID = 1 << 7
_MORE_FLAGS = 1


class _Incomplete(Exception):
    """The read ended inside a delivery: wait for the rest."""


class _NotOurs(Exception):
    """A frame the reader leaves to pika."""


class DeliveryReader:
    """Reads deliveries to registered consumers off ``conn`` (see the module)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._consumers: dict[int, tuple[Channel, bytes, OnDelivery]] = {}
        self._pika = pika_compat.read_with(conn, self.read)

    def register(self, ch: Channel, consumer_tag: str, on_delivery: OnDelivery) -> None:
        """Read the deliveries to ``consumer_tag`` on ``ch`` (the link's thread)."""
        self._consumers[ch.channel_number] = (ch, consumer_tag.encode(), on_delivery)

    def forget(self, ch: Channel) -> None:
        """Leave ``ch``'s frames to pika from now on (a cancel or a close on the way)."""
        entry = self._consumers.get(ch.channel_number)
        if entry is not None and entry[0] is ch:
            del self._consumers[ch.channel_number]

    def read(self, data: bytes) -> None:
        """Take one read of the socket (pika's transport calls this)."""
        conn = self._conn
        held = pika_compat.take_buffer(conn)
        buf = held + data if held else data
        size = len(buf)
        pos = 0
        frames = 0
        try:
            while pos < size:
                try:
                    after, count, on_delivery, args = self._delivery(buf, pos, size)
                except _Incomplete:
                    pika_compat.keep_buffer(conn, buf[pos:])
                    return
                except Exception:
                    break
                pos = after
                frames += count
                try:
                    on_delivery(*args)
                except BaseException:
                    pika_compat.keep_buffer(conn, buf[pos:])  # as pika would leave it
                    raise
        finally:
            if frames:
                pika_compat.count_read(conn, frames, pos)
        if pos < size:
            self._pika(buf[pos:] if pos else buf)

    def _delivery(
        self, buf: bytes, pos: int, size: int
    ) -> tuple[int, int, OnDelivery, tuple[Any, ...]]:
        """The delivery at ``pos``: the position after it, its frame count, and whom to
        call with what."""
        if size - pos < 7:
            raise _Incomplete
        kind, number, length = _FRAME.unpack_from(buf, pos)
        if kind != _METHOD:
            raise _NotOurs
        start = pos + 7
        end = start + length
        if end >= size:
            raise _Incomplete
        if buf[end] != _FRAME_END or length < 5:
            raise _NotOurs
        cls, method, tag_size = _DELIVER.unpack_from(buf, start)
        entry = self._consumers.get(number)
        if cls != _BASIC or method != _DELIVER_ID or entry is None:
            raise _NotOurs
        ch, consumer_tag, on_delivery = entry
        at = start + 5
        if (
            buf[at : at + tag_size] != consumer_tag
            or at + tag_size + 9 > end
            or pika_compat.assembling(ch)
        ):
            raise _NotOurs
        tag, bits = _TAG.unpack_from(buf, at + tag_size)
        start, end = _frame(buf, end + 1, size, _HEADER, number)  # the content header
        if end - start < _CONTENT.size:
            raise _NotOurs
        cls, _weight, body_size, flags = _CONTENT.unpack_from(buf, start)
        if cls != _BASIC or flags & _MORE_FLAGS:
            raise _NotOurs
        message_id, headers = _properties(buf, start + _CONTENT.size, end, flags)
        # The body, in as many frames as it takes.
        pos = end + 1
        frames = 2
        if body_size == 0:
            body = b""
        else:
            parts: list[bytes] = []
            got = 0
            while got < body_size:
                start, end = _frame(buf, pos, size, _BODY, number)
                parts.append(buf[start:end])
                got += end - start
                pos = end + 1
                frames += 1
            if got != body_size:
                raise _NotOurs  # too long: pika's error to raise
            body = parts[0] if frames == 3 else b"".join(parts)
        return pos, frames, on_delivery, (ch, tag, bool(bits & 1), message_id, headers, body)


def _frame(buf: bytes, pos: int, size: int, kind: int, number: int) -> tuple[int, int]:
    """Where the payload of the frame at ``pos`` starts and ends, if it is a ``kind``
    frame of channel ``number``, whole in ``buf``."""
    if size - pos < 7:
        raise _Incomplete
    found, on, length = _FRAME.unpack_from(buf, pos)
    if found != kind or on != number:
        raise _NotOurs
    start = pos + 7
    end = start + length
    if end >= size:
        raise _Incomplete
    if buf[end] != _FRAME_END:
        raise _NotOurs
    return start, end


def _properties(
    buf: bytes, at: int, end: int, flags: int
) -> tuple[str | bytes | None, dict[str, Any] | None]:
    """The ``message_id`` and ``headers`` of the properties from ``at`` (to ``end``)."""
    headers = None
    if flags & _CONTENT_TYPE:
        at += 1 + buf[at]
    if flags & _CONTENT_ENCODING:
        at += 1 + buf[at]
    if flags & _HEADERS:
        headers, at = pika_compat.decode_table(buf, at)
    if flags & _DELIVERY_MODE:
        at += 1
    if flags & _PRIORITY:
        at += 1
    if flags & _CORRELATION_ID:
        at += 1 + buf[at]
    if flags & _REPLY_TO:
        at += 1 + buf[at]
    if flags & _EXPIRATION:
        at += 1 + buf[at]
    message_id: str | bytes | None = None
    if flags & _MESSAGE_ID:
        raw = buf[at + 1 : at + 1 + buf[at]]
        try:
            message_id = raw.decode()
        except UnicodeDecodeError:
            message_id = raw  # as pika leaves it
        at += 1 + buf[at]
    if at > end:
        raise _NotOurs
    return message_id, headers
