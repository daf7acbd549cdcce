"""The control channel on RabbitMQ: a fanout exchange, a queue per worker, direct reply-to.

A worker serves on a connection of its own (``queuey control host=... pid=... v=...`` in
the management UI), owned by the :class:`Link` thread ``queuey-control``, so it never
waits on, slows or breaks the job path. On every (re)connection it declares the fanout
exchange ``queuey.control`` (not durable: workers declare it again after a broker
restart), an exclusive, auto-delete queue of its own bound to it, and consumes. Each
request is handed to the worker's handler; a reply goes to the request's ``reply_to``
with its ``correlation_id``, published on the same channel.

The asker (:func:`broadcast`) consumes RabbitMQ's direct reply-to pseudo-queue
``amq.rabbitmq.reply-to`` and publishes one request with a per-message TTL of its
window, then gathers replies until the window closes.

Must never: publish a reply anywhere but a direct reply-to address (a request whose
``reply_to`` names a job queue would otherwise make a worker put its status there), act
on a request without one, let a handler's exception reach pika's loop, or give up
reconnecting while the worker runs (the link's recovery has no time limit).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
import uuid
from typing import Any

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel
from pika.channel import Channel
from pika.spec import Basic, BasicProperties

from queuey_core.backends.capabilities import ControlHandler
from queuey_core.backends.rabbitmq.link import Link
from queuey_core.control.documents import MAX_DOCUMENT

logger = logging.getLogger(__name__)

#: The fanout exchange every worker's control queue is bound to.
EXCHANGE = "queuey.control"
#: RabbitMQ's direct reply-to: the only address a worker replies to.
REPLY_TO = "amq.rabbitmq.reply-to"
#: A worker's queue: requests older than a minute are stale (their asker has gone), and
#: a flood keeps only the newest 100.
QUEUE_ARGUMENTS: dict[str, Any] = {
    "x-message-ttl": 60_000,
    "x-max-length": 100,
    "x-overflow": "drop-head",
}
#: Requests taken at a time (each is acked once answered).
PREFETCH = 10
#: Seconds between attempts to set the channel up again after the broker closed it.
_RETRY_CHANNEL = (1.0, 30.0)


def queue_name() -> str:
    """The name of a worker's control queue: ``queuey.control.<host>.<pid>.<random>``.

    The random part is new for each connection: the broker may not have dropped the
    previous connection's exclusive queue yet.
    """
    return f"{EXCHANGE}.{socket.gethostname()[:180]}.{os.getpid()}.{uuid.uuid4().hex[:6]}"


class ControlLink(Link):
    """A worker's control connection and channel; all of it runs on the link's thread.

    Made by ``RabbitMQBackend.serve_control``: ``link_args`` as for the other links,
    with ``recovery_timeout`` infinite.
    """

    def __init__(self, handler: ControlHandler, **link_args: Any) -> None:
        super().__init__(**link_args)
        self._handler = handler
        self.channel: Channel | None = None
        self.queue: str | None = None
        self._failures = 0
        self._ignored_before = False

    # -- hooks -------------------------------------------------------------------------

    def on_open(self, conn: Any) -> None:
        conn.channel(on_open_callback=self._channel_opened)

    def on_lost(self, reason: BaseException) -> None:
        self.channel = None

    def on_closing(self) -> None:
        self.channel = None

    # -- the channel -------------------------------------------------------------------

    def _channel_opened(self, ch: Channel) -> None:
        self.channel = ch
        ch.add_on_close_callback(self._channel_closed)
        ch.add_on_cancel_callback(lambda _frame: self._cancelled(ch))
        ch.exchange_declare(
            EXCHANGE, "fanout", durable=False, callback=lambda _f: self._declare_queue(ch)
        )

    def _declare_queue(self, ch: Channel) -> None:
        if not self._current(ch):
            return
        name = queue_name()
        ch.queue_declare(
            name,
            exclusive=True,
            auto_delete=True,
            arguments=QUEUE_ARGUMENTS,
            callback=lambda _f: ch.queue_bind(
                name, EXCHANGE, callback=lambda _f: self._consume(ch, name)
            ),
        )

    def _consume(self, ch: Channel, name: str) -> None:
        if not self._current(ch):
            return
        ch.basic_qos(prefetch_count=PREFETCH)
        ch.basic_consume(name, self._request)
        self.queue = name
        if self._failures:
            logger.info("control channel set up again", extra={"queue": name})
        self._failures = 0
        logger.debug("control channel ready", extra={"queue": name})

    def _request(
        self, ch: Channel, method: Basic.Deliver, props: BasicProperties, body: bytes
    ) -> None:
        try:
            self._answer(ch, props, body)
        except Exception:  # an exception here would end the link's thread
            logger.error("a control request failed; ignored", exc_info=True)
        finally:
            if ch.is_open:
                ch.basic_ack(method.delivery_tag)

    def _answer(self, ch: Channel, props: BasicProperties, body: bytes) -> None:
        reply_to = props.reply_to
        if not (isinstance(reply_to, str) and reply_to.startswith(REPLY_TO + ".")):
            self._ignored("its reply_to is not a direct reply-to address")
            return
        if len(body) > MAX_DOCUMENT:
            self._ignored(f"{len(body)} bytes, more than {MAX_DOCUMENT}")
            return
        reply = self._handler(bytes(body))
        if reply is None or not ch.is_open:
            return
        ch.basic_publish(
            "",
            reply_to,
            reply,
            BasicProperties(
                correlation_id=props.correlation_id,
                content_type="application/json",
                delivery_mode=1,
            ),
        )

    def _ignored(self, why: str) -> None:
        # The first at WARNING, the rest at DEBUG: a flood must not fill the logs.
        log = logger.debug if self._ignored_before else logger.warning
        log("control request ignored: %s", why)
        self._ignored_before = True

    def _channel_closed(self, ch: Channel, reason: BaseException) -> None:
        if not self._current(ch):
            return
        self.channel = None
        self.queue = None
        conn = self._conn
        if self.is_dead or conn is None or not conn.is_open:
            return  # the connection's own recovery takes it from here
        self._failures += 1
        delay = min(_RETRY_CHANNEL[0] * 2 ** (self._failures - 1), _RETRY_CHANNEL[1])
        log = logger.warning if self._failures == 1 else logger.debug
        log(
            "control channel closed by RabbitMQ (%s); `queuey workers` will not see this "
            "worker until it is set up again (next try in %gs)",
            reason,
            delay,
        )
        self._ioloop.call_later(delay, lambda: self.on_open(conn) if conn.is_open else None)

    def _current(self, ch: Channel) -> bool:
        return ch is self.channel

    def _cancelled(self, ch: Channel) -> None:
        """The broker cancelled the consumer (the queue was deleted): set it up again."""
        if self._current(ch) and ch.is_open:
            ch.close()  # _channel_closed retries


def broadcast(ch: BlockingChannel, request: bytes, timeout: float) -> list[bytes]:
    """Send ``request`` to every worker's control queue; the replies within ``timeout``.

    No exchange means no worker ever served on this virtual host, and no queue bound to
    it that none serves now: no replies, at once. A refusal (no permission to write to
    the exchange) raises pika's ChannelClosedByBroker, which the admin connection turns
    into a BackendError.
    """
    try:
        ch.exchange_declare(EXCHANGE, "fanout", passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code == 404:
            return []
        raise
    correlation_id = uuid.uuid4().hex
    replies: list[bytes] = []

    def on_reply(_ch: Any, _method: Any, props: BasicProperties, body: bytes) -> None:
        if props.correlation_id == correlation_id and len(body) <= MAX_DOCUMENT:
            replies.append(bytes(body))

    ch.basic_consume(REPLY_TO, on_reply, auto_ack=True)
    # Confirmed and mandatory: a refusal (no write permission on the exchange) is an
    # error now, and no worker queue bound is an answer at once.
    ch.confirm_delivery()
    try:
        ch.basic_publish(
            EXCHANGE,
            "",
            request,
            BasicProperties(
                reply_to=REPLY_TO,
                correlation_id=correlation_id,
                content_type="application/json",
                delivery_mode=1,
                # A worker that only reads it after the window would answer no one.
                expiration=str(max(1, math.ceil(timeout * 1000))),
            ),
            mandatory=True,
        )
    except pika.exceptions.UnroutableError:
        return []
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        ch.connection.process_data_events(time_limit=left)
    return replies
