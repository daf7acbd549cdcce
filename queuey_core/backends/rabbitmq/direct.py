"""The direct publisher: one confirmed publish on the caller's own thread.

Owns: a ``BlockingConnection`` that a single ``enqueue()`` uses when nobody else holds
it, so a lone caller pays no thread hand-off (see :class:`DirectPublisher`).
Must never: retry or reconnect on its own account beyond one fresh connection; any
trouble hands the message to the pipelined publisher, which owns recovery.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel

from queuey_core.backends.rabbitmq.publisher import Pub
from queuey_core.errors import BackendError, UnroutableError


class DirectPublisher:
    """Publishes one message in the caller's own thread, for a caller who waits anyway.

    A single ``enqueue()`` that hops to the publisher link's thread and back pays two
    thread switches per confirm (about 1.4x raw pika's confirmed publish, measured).
    Here the caller publishes on a BlockingConnection itself, as raw pika would; it
    takes that connection only when nobody else holds it, so concurrent publishers
    still pipeline through the link, and any connection trouble also falls back to the
    link, which owns reconnecting and republishing.
    """

    def __init__(self, params: pika.ConnectionParameters, heartbeat: int) -> None:
        self._params = params
        # An idle BlockingConnection sends no heartbeats: reconnect rather than trust one
        # idle for more than half the interval the broker allows.
        self._max_idle = heartbeat / 2 if heartbeat else float("inf")
        self._lock = threading.Lock()
        self._conn: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        self._last_used = 0.0

    def try_publish(self, pub: Pub) -> bool:
        """Publish and wait for the confirm; False if the link should do it instead.

        Raises:
            UnroutableError: the broker could not route it.
            BackendError: the broker refused it (nack).
        """
        if not self._lock.acquire(blocking=False):
            return False
        try:
            channel = self._ready_channel()
            if channel is None:
                return False
            try:
                channel.basic_publish(
                    pub.exchange, pub.routing_key, pub.body, pub.props, mandatory=True
                )
            except pika.exceptions.UnroutableError as exc:
                raise UnroutableError(
                    f"RabbitMQ could not route the message to {pub.routing_key!r} "
                    f"on exchange {pub.exchange!r}"
                ) from exc
            except pika.exceptions.NackError as exc:
                raise BackendError("RabbitMQ refused the message (nack)") from exc
            except (pika.exceptions.AMQPError, OSError):
                # Lost on the way: the broker may or may not have it. The link publishes
                # it again (a duplicate at worst, never a loss).
                self._drop()
                return False
            self._last_used = time.monotonic()
            return True
        finally:
            self._lock.release()

    def _ready_channel(self) -> BlockingChannel | None:
        if self._channel is not None and time.monotonic() - self._last_used > self._max_idle:
            self._drop()
        if self._channel is None or not self._channel.is_open:
            try:
                self._conn = pika.BlockingConnection(self._params)
                self._channel = self._conn.channel()
                self._channel.confirm_delivery()
            except (pika.exceptions.AMQPError, OSError):
                self._drop()
                return None
        return self._channel

    def _drop(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None and conn.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                conn.close()

    def close(self) -> None:
        with self._lock:
            self._drop()
