"""Every use of a pika name pika does not document, each behind one small function.

queuey relies on a few of pika's internals where the public API cannot do the job
(the reasons are on each function). They are here, and only here, so that a pika
release that changes one breaks one known place: test_pika_compat.py (under
tests/backends/rabbitmq/; on a real broker, its twin under tests/integration/backends/rabbitmq/)
fails with a message saying which behaviour changed. pika is pinned to the minor version the
suite ran on (pyproject.toml); check this module before moving the pin.
Must never: grow a use of pika's internals outside this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pika
import pika.data
from pika.adapters.blocking_connection import BlockingChannel
from pika.adapters.utils.connection_workflow import (
    AMQPConnectorException,
    AMQPConnectorStackTimeout,
)
from pika.channel import Channel
from pika.connection import Connection


def _impl(conn: pika.BlockingConnection) -> Connection:
    """The asynchronous connection under a ``BlockingConnection`` (pika's ``_impl``)."""
    impl: Connection = conn._impl
    return impl


def server_properties(conn: pika.BlockingConnection) -> dict[str, Any]:
    """What the broker announced when ``conn`` opened (its version, for one).

    ``BlockingConnection`` does not expose the ``Connection.Start`` properties.
    """
    found: dict[str, Any] = _impl(conn).server_properties
    return found


def connected_params(conn: pika.BlockingConnection) -> pika.ConnectionParameters:
    """The parameters ``conn`` connected with: which node of a list answered.

    ``BlockingConnection`` tries a sequence of parameters and does not say which one won.
    """
    params: pika.ConnectionParameters = _impl(conn).params
    return params


def call_later(conn: pika.BlockingConnection, delay: float, callback: Callable[[], None]) -> Any:
    """A timer on ``conn``'s own I/O loop that fires even while a blocking call waits
    (``BlockingConnection.call_later`` fires only between calls); returns its handle,
    for :func:`remove_timeout`."""
    return _impl(conn).ioloop.call_later(delay, callback)


def remove_timeout(conn: pika.BlockingConnection, handle: Any) -> None:
    """Cancel a timer of :func:`call_later`."""
    _impl(conn).ioloop.remove_timeout(handle)


def terminate_stream(conn: pika.BlockingConnection, error: BaseException) -> None:
    """Tear ``conn``'s socket down at once, as a lost connection: the blocking call in
    progress raises ``error``.

    pika has no public way to end a ``BasicPublish`` that waits for a confirm with no
    time limit; a direct publish's deadline needs one.
    """
    _impl(conn)._terminate_stream(error)


def on_blocked_now(
    conn: pika.BlockingConnection,
    blocked: Callable[[Any, Any], None],
    unblocked: Callable[[Any, Any], None],
) -> None:
    """Hear ``Connection.Blocked`` / ``Unblocked`` as soon as the frame arrives, even in
    the middle of a publish (``BlockingConnection``'s own callbacks wait until the
    blocking call returns, which a blocked publish never does)."""
    impl = _impl(conn)
    impl.add_on_connection_blocked_callback(blocked)
    impl.add_on_connection_unblocked_callback(unblocked)


def nowait_channel(ch: BlockingChannel) -> Channel:
    """The asynchronous channel under ``ch``: a call on it without a callback is sent
    ``nowait`` and written out with the next blocking call's request (many declares in
    one round trip). pika's ``BlockingChannel`` waits for every reply."""
    impl: Channel = ch._impl
    return impl


def write_frames(conn: Connection, data: bytes) -> None:
    """Write marshalled frames (:mod:`.frames`) on ``conn`` in one write, counted by
    pika's heartbeat checker as its own writes are (``Connection._output_marshaled_frames``).

    ``basic_publish`` marshals every frame through generic code and writes a message's
    frames apart: the publisher link's batches are marshalled by hand and written here.
    """
    conn._output_marshaled_frames([data])


def open_blocking(params: pika.ConnectionParameters | list[pika.ConnectionParameters]) -> Any:
    """``pika.BlockingConnection(params)``, whose failures are all ``AMQPConnectionError``.

    pika documents that, but on a handshake that times out (a broker too busy to answer)
    it raises its connection workflow's own ``AMQPConnectorStackTimeout``, which is no
    ``AMQPError``: every ``except AMQPError`` around a connect would let it through as
    an unexpected failure instead of "cannot reach RabbitMQ".
    """
    try:
        return pika.BlockingConnection(params)
    except AMQPConnectorException as exc:
        raise pika.exceptions.AMQPConnectionError(exc) from exc


def abort_opening(conn: Connection) -> bool:
    """End ``conn`` if it is in its AMQP handshake (its socket connected, pika's
    connection workflow not done), as a stream lost then; whether it was.

    ``close()`` there ends the stream with ``ConnectionOpenAborted``, which pika 1.4's
    connection workflow reports as the *class* ``AMQPConnectionWorkflowAborted``
    instead of an instance, and ``BaseConnection._on_connection_workflow_done``
    asserts on it (the workflow's own ``abort()`` asserts earlier): the exception
    escapes the I/O loop and ends its thread with a traceback. Any other error takes
    the path of a broker lost mid-handshake: the open-error callback, once.
    """
    if getattr(conn, "_connection_workflow", None) is None or conn._transport is None:
        return False
    conn._terminate_stream(
        pika.exceptions.StreamLostError("closed by queuey during the AMQP handshake")
    )
    return True


def is_handshake_timeout(error: BaseException) -> bool:
    """Whether ``error`` is pika's connection workflow giving up on a handshake the
    other end never answered (its text is only the repr of an address record)."""
    return isinstance(error, AMQPConnectorStackTimeout)


def write_on(ch: BlockingChannel, data: bytes) -> None:
    """Write marshalled frames for ``ch`` on its connection; they go out ahead of the
    next blocking call's request (a requeue's ``tx.commit``): a batch of publishes in
    one write instead of three writes each (:func:`write_frames`)."""
    write_frames(_impl(ch.connection), data)


def read_with(conn: Connection, reader: Callable[[bytes], None]) -> Callable[[bytes], None]:
    """Have ``reader`` take every chunk of bytes ``conn`` reads from its socket (pika's
    ``Connection._on_data_available``, which its transport calls with each read); returns
    pika's own, for what the reader leaves to pika.

    pika decodes every frame into objects through generic code (about 120 Python calls a
    delivery): the consumer link reads its deliveries' frames itself (:mod:`.delivery_frames`).
    """
    own: Callable[[bytes], None] = conn._on_data_available
    conn._on_data_available = reader
    return own


def take_buffer(conn: Connection) -> bytes:
    """The bytes ``conn`` read but has not decoded yet (part of a frame), now emptied."""
    held: bytes = conn._frame_buffer
    conn._frame_buffer = b""
    return held


def keep_buffer(conn: Connection, data: bytes) -> None:
    """Leave ``data`` (the start of a frame not read whole yet) for ``conn``'s next read."""
    conn._frame_buffer = data


def count_read(conn: Connection, frames: int, size: int) -> None:
    """Count frames read outside pika as pika counts its own: its heartbeat checker
    takes a connection whose byte count does not move for a death."""
    conn.frames_received += frames
    conn.bytes_received += size


def assembling(ch: Channel) -> bool:
    """Whether ``ch`` holds part of a message pika is putting together (its content
    assembler has a method frame): the next frames of ``ch`` belong to pika."""
    return ch._content_assembler._method_frame is not None


def decode_table(data: bytes, offset: int) -> tuple[dict[str, Any], int]:
    """An AMQP field table at ``offset`` of ``data``, as pika decodes a message's
    headers; and the offset after it."""
    table, end = pika.data.decode_table(data, offset)
    return table, end
