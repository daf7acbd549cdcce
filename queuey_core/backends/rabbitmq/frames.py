"""AMQP frames marshalled by hand, for the publisher link's hot path.

Owns: the bytes of a publish (method, content header, body frames) as one piece
(:func:`publish_frames`), and the encoded properties of an already-encoded envelope
(:func:`encoded_properties`). pika's ``basic_publish`` marshals every frame through
generic code and writes each of a message's frames apart; these build the same bytes
(tests/backends/rabbitmq/test_publish_frames.py holds them to pika's, byte for byte) for one write.
Must never: produce bytes other than what pika would write for the same message.
"""

from __future__ import annotations

import functools
import struct

from pika import frame, spec
from pika.spec import Basic, BasicProperties

from queuey_core.envelope import EncodedEnvelope

#: A frame's type, channel, size and end octet around its payload.
FRAME_OVERHEAD = spec.FRAME_HEADER_SIZE + spec.FRAME_END_SIZE


_FRAME = struct.Struct(">BHI")
_CONTENT = struct.Struct(">HxxQ")
_END = bytes([spec.FRAME_END])
_TIMESTAMP = struct.Struct(">Q")


def publish_method(number: int, exchange: str, routing_key: str) -> bytes:
    """The marshalled ``Basic.Publish`` (mandatory) method frame on channel ``number``."""
    publish = Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=True)
    marshalled: bytes = frame.Method(number, publish).marshal()
    return marshalled


def publish_frames(
    number: int,
    body_max: int,
    method: bytes,
    body: bytes,
    *,
    props: BasicProperties | None = None,
    header: bytes | None = None,
) -> bytes:
    """The frames of a message on channel ``number`` after its marshalled ``method``.

    Byte for byte what pika's ``Connection._send_message`` writes (a test compares):
    the content header (``header``, properties already encoded, else ``props``'), then
    ``body`` in frames of at most ``body_max`` bytes.
    """
    if header is None:
        header = b"".join((props if props is not None else BasicProperties()).encode())
    size = len(body)
    parts = [
        method,
        _FRAME.pack(spec.FRAME_HEADER, number, len(header) + _CONTENT.size),
        _CONTENT.pack(BasicProperties.INDEX, size),
        header,
        _END,
    ]
    for start in range(0, size, body_max):
        piece = body[start : start + body_max]
        parts += (_FRAME.pack(spec.FRAME_BODY, number, len(piece)), piece, _END)
    return b"".join(parts)


def encoded_properties(envelope: EncodedEnvelope) -> bytes:
    """What :func:`properties` encodes to for ``envelope`` (no headers), built faster.

    ``enqueue_many``'s hot path: a batch shares everything but the message id and the
    timestamp, so those are spliced between parts encoded once per job type and priority.
    """
    before, after = _property_parts(envelope.job_type, envelope.priority)
    return b"".join(
        (
            before,
            envelope.message_id.encode(),
            _TIMESTAMP.pack(envelope.enqueued_at // 1000),
            after,
        )
    )


@functools.lru_cache(maxsize=256)
def _property_parts(job_type: str, priority: int) -> tuple[bytes, bytes]:
    """The encoded properties of a job type and priority around the id and timestamp."""
    flags = 0
    for flag in (
        BasicProperties.FLAG_CONTENT_TYPE,
        BasicProperties.FLAG_DELIVERY_MODE,
        BasicProperties.FLAG_MESSAGE_ID,
        BasicProperties.FLAG_TIMESTAMP,
        BasicProperties.FLAG_TYPE,
    ):
        flags |= flag
    if priority:
        flags |= BasicProperties.FLAG_PRIORITY
    before = struct.pack(">H", flags) + _shortstr("application/json") + bytes([2])
    if priority:
        before += bytes([priority])
    # A message id is a UUID's 36 characters.
    return before + bytes([36]), _shortstr(job_type)


def _shortstr(value: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) > 255:
        raise ValueError(f"a short string is at most 255 bytes: {value[:40]!r}...")
    return bytes([len(data)]) + data
