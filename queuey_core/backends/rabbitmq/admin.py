"""The admin connection: topology and dead-letter tools, one caller at a time.

Owns: a ``BlockingConnection`` behind a lock (to the first node of a cluster that
answers, see :mod:`.nodes`) for declaring queues and the delay ladder,
counting, and listing, requeueing, deleting and purging dead letters; reading a dead
letter back (:func:`dead_letter_of`), whatever its body and headers hold.
Must never: lose or reorder a dead letter while listing it (everything taken is given
back with one multiple nack), hide one (a body that is not an envelope is listed with a
preview, a header that cannot be read shows as unknown), or be used for the job path
(publishing and consuming have connections of their own).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import BasicProperties

from queuey_core.backends.base import (
    AnyDeadLetter,
    DeadLetter,
    UndecodableDeadLetter,
    message_handle,
    preview,
    printable,
)
from queuey_core.backends.rabbitmq import topology
from queuey_core.backends.rabbitmq.errors import connect_error, describe, refused
from queuey_core.backends.rabbitmq.nodes import Picker
from queuey_core.envelope import Envelope
from queuey_core.errors import BackendError, DecodeError

T = TypeVar("T")


class Admin:
    """A BlockingConnection for topology and dead-letter work, one caller at a time."""

    def __init__(self, nodes: Picker) -> None:
        self._nodes = nodes
        self._where = nodes.where
        self._lock = threading.Lock()
        self._conn: pika.BlockingConnection | None = None
        self.server_version = ""

    def run(self, work: Callable[[BlockingChannel], T]) -> T:
        """Run ``work`` on a fresh channel, reconnecting once if the connection went stale
        (to the next node that answers: the one it was on may be gone)."""
        with self._lock:
            for attempt in (1, 2):
                conn = self._connection()
                try:
                    ch = conn.channel()
                    try:
                        return work(ch)
                    finally:
                        if ch.is_open:
                            ch.close()
                except pika.exceptions.ChannelClosedByBroker as exc:
                    raise refused(exc) from exc
                except (
                    pika.exceptions.AMQPConnectionError,
                    pika.exceptions.ConnectionWrongStateError,
                ) as exc:
                    self._drop()
                    self._nodes.failed()
                    if attempt == 2:
                        raise BackendError(
                            f"lost the connection to RabbitMQ at {self._where}: {describe(exc)}"
                        ) from exc
            raise AssertionError("unreachable")

    def existing(self, queues: Sequence[str]) -> set[str]:
        """Which of ``queues`` exist (a passive declare each, on a channel of its own)."""
        found: set[str] = set()
        for name in queues:

            def probe(ch: BlockingChannel, name: str = name) -> None:
                ch.queue_declare(name, passive=True)

            try:
                self.run(probe)
            except BackendError as exc:
                cause = exc.__cause__
                if not (
                    isinstance(cause, pika.exceptions.ChannelClosedByBroker)
                    and cause.reply_code == 404
                ):
                    raise
                continue
            found.add(name)
        return found

    def _connection(self) -> pika.BlockingConnection:
        if self._conn is None or not self._conn.is_open:
            try:
                self._conn = self._nodes.blocking_connection()
            except (pika.exceptions.AMQPError, OSError) as exc:  # OSError: DNS, for one
                raise connect_error(exc, self._where) from exc
            version = self._conn._impl.server_properties.get("version", b"")
            self.server_version = version.decode() if isinstance(version, bytes) else str(version)
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and conn.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):
                conn.close()

    def close(self) -> None:
        with self._lock:
            self._drop()


def declare_ladder(ch: BlockingChannel) -> None:
    ch.exchange_declare(topology.DELIVER_EXCHANGE, "topic", durable=True)
    for level in range(topology.DELAY_LEVELS):
        name = topology.delay_name(level)
        ch.exchange_declare(name, "topic", durable=True)
        ch.queue_declare(name, durable=True, arguments=topology.delay_queue_arguments(level))
    for level in range(topology.DELAY_LEVELS):
        name = topology.delay_name(level)
        ch.queue_bind(name, name, topology.level_binding(level, "1"))
        ch.exchange_bind(topology.next_hop(level), name, topology.level_binding(level, "0"))


def get_all(
    ch: BlockingChannel, dlq: str, limit: int | None, *, give_back: bool = True
) -> list[tuple[int, AnyDeadLetter]]:
    """Every message of ``dlq`` (up to ``limit``), held unacked; given back unless told not.

    Each comes with its delivery tag, in queue order; a position handle counts from 1.
    """
    got: list[tuple[int, AnyDeadLetter]] = []
    last_tag: int | None = None
    while limit is None or len(got) < limit:
        method, props, body = ch.basic_get(dlq, auto_ack=False)
        if method is None:
            break
        last_tag = method.delivery_tag
        got.append((method.delivery_tag, dead_letter_of(props, body, len(got) + 1)))
    if give_back and last_tag is not None:
        ch.basic_nack(last_tag, multiple=True, requeue=True)
    return got


def dead_letter_of(props: BasicProperties, body: bytes, position: int) -> AnyDeadLetter:
    """What a message of a dead-letter queue is, read without trusting any of it."""
    headers = props.headers if isinstance(props.headers, dict) else {}
    reason = _reason(headers)
    dead_at = _millis(headers.get(topology.DEAD_AT_HEADER))
    try:
        envelope = Envelope.decode(body)
    except Exception as exc:  # DecodeError; anything else would be a bug, and still shown
        error = str(exc) if isinstance(exc, DecodeError) else type(exc).__name__
        handle = message_handle(props.message_id) or f"#{position}"
        return UndecodableDeadLetter(preview(body), error, reason, dead_at, handle)
    return DeadLetter(envelope, reason, dead_at, str(envelope.job_id))


def _reason(headers: dict[str, Any]) -> str:
    """Our reason header; else RabbitMQ's x-death reason; else "unknown"."""
    reason = _text(headers.get(topology.REASON_HEADER))
    if reason is not None:
        return reason
    deaths = headers.get("x-death")
    if isinstance(deaths, list) and deaths and isinstance(deaths[0], dict):
        why = _text(deaths[0].get("reason"))
        if why is not None:
            return f"dead-lettered by RabbitMQ ({why})"
    return "unknown"


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    return printable(value, topology.MAX_REASON)


def _millis(value: object) -> int | None:
    """A time header in ms since the epoch, or None when it is not a plausible one."""
    # pika reads 64-bit integers as its own int subclass: take any int but a bool.
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**53:
        return None
    return int(value)
