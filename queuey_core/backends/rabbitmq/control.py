"""The control channel on RabbitMQ: a fanout exchange, a queue per worker, direct reply-to.

A worker serves on a connection of its own (``queuey control host=... pid=... v=...`` in
the management UI), owned by the :class:`Link` thread ``queuey-control``, so it never
waits on, slows or breaks the job path. On every (re)connection it declares the fanout
exchange ``queuey.control`` (not durable: workers declare it again after a broker
restart), an exclusive, auto-delete queue of its own bound to it, and consumes. Each
request is handed to the worker's handler; a reply goes to the request's ``reply_to``
with its ``correlation_id``, published on the same channel.

The asker (:func:`broadcast`) declares an exclusive reply queue of the control
exchange's own naming (``queuey.control-reply.<random>``; direct reply-to when it may
not), publishes one request with a per-message TTL of its window, then gathers replies
until the window closes.

A reply goes only to such a queue, or to a RabbitMQ direct reply-to address the broker
could have given (:func:`reply_node`). Why it matters: RabbitMQ (3.10) decodes a direct
reply-to address ``amq.rabbitmq.reply-to.<base64 pid>.<base64 key>`` when a reply is
published to it, and an address whose pid does not decode, or names a node hash that is
not in the cluster (``reply@<erlang:phash2(node)>``), crashes the *replying* channel:
RabbitMQ closes the worker's whole control connection (541 INTERNAL_ERROR). So a worker
replies to a direct address only when it is well-formed and its node hash is one the
worker learned from the broker itself: on each (re)connection it sends itself a probe
with ``reply_to=amq.rabbitmq.reply-to``, and the address the broker writes in its place
names the worker's node. Anything else is dropped, counted (:attr:`ControlLink.refused`)
and logged (a warning at most once a minute, the rest at debug).

Must never: publish a reply anywhere else (a request whose ``reply_to`` names a job
queue would make a worker put its status there, a forged direct address would close
its connection), act on a request without a valid ``reply_to``, let a handler's
exception reach pika's loop, or give up reconnecting while the worker runs (the link's
recovery has no time limit).
"""

from __future__ import annotations

import base64
import binascii
import logging
import math
import os
import re
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
#: RabbitMQ's direct reply-to pseudo-queue; the broker gives each consumer of it addresses
#: ``amq.rabbitmq.reply-to.<pid>.<key>``.
REPLY_TO = "amq.rabbitmq.reply-to"
#: Reply queues of the control exchange's own naming (an asker's exclusive queue). Worker
#: control queues start ``queuey.control.``: no name can be both.
REPLY_QUEUE_PREFIX = "queuey.control-reply."
_REPLY_QUEUE = re.compile(re.escape(REPLY_QUEUE_PREFIX) + r"[A-Za-z0-9_-]{1,64}")
_BASE64 = re.compile(r"[A-Za-z0-9+/]{4,400}={0,2}")
_REPLY_NODE = re.compile(rb"reply@([0-9]{1,10})")
#: Seconds between two warnings about refused requests (the rest are logged at debug).
_WARN_EVERY = 60.0
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
        self._warned_at = -_WARN_EVERY
        self._unwarned = 0
        self._probe = uuid.uuid4().hex
        self.nodes: set[int] = set()
        """Hashes of the broker nodes this worker has been connected to (learned from
        its probes): the only nodes whose direct reply-to addresses it replies to."""
        self.refused = 0
        """Requests dropped for their ``reply_to`` (or size): never answered."""

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
        # The probe: RabbitMQ writes this channel's own direct reply-to address in place
        # of REPLY_TO, naming our node. The channel must consume the pseudo-queue first,
        # and pika holds a consume back until the one before is answered while a publish
        # goes out at once: publish only once this consume is answered (else 406).
        ch.basic_consume(
            REPLY_TO,
            lambda *_args: None,
            auto_ack=True,
            callback=lambda _frame: self._send_probe(ch, name),
        )
        if self._failures:
            logger.info("control channel set up again", extra={"queue": name})
        self._failures = 0
        logger.debug("control channel ready", extra={"queue": name})

    def _send_probe(self, ch: Channel, name: str) -> None:
        if not self._current(ch) or not ch.is_open:
            return
        ch.basic_publish(
            "",
            name,
            b"",
            BasicProperties(reply_to=REPLY_TO, correlation_id=self._probe, delivery_mode=1),
        )

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
        if props.correlation_id == self._probe and not body:
            self._learn(reply_to)
            return
        why = self._refusal(reply_to)
        if why is None and len(body) > MAX_DOCUMENT:
            why = f"{len(body)} bytes, more than {MAX_DOCUMENT}"
        if why is not None:
            self._refuse(why)
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

    def _refusal(self, reply_to: object) -> str | None:
        """Why a reply cannot go to ``reply_to``, or None when it can."""
        if not isinstance(reply_to, str) or not reply_to:
            return "no reply_to"
        if _REPLY_QUEUE.fullmatch(reply_to):
            return None
        if not reply_to.startswith(REPLY_TO + "."):
            return "its reply_to is neither a direct reply-to address nor a control reply queue"
        node = reply_node(reply_to)
        if node is None:
            return "its reply_to is not a direct reply-to address RabbitMQ could have made"
        if node not in self.nodes:
            return "its reply_to names a broker node this worker has not seen (forged?)"
        return None

    def _learn(self, reply_to: object) -> None:
        node = reply_node(reply_to) if isinstance(reply_to, str) else None
        if node is None:
            logger.warning("the control channel's probe came back without a reply address")
            return
        if node not in self.nodes:
            logger.debug("control replies to direct reply-to addresses of node %s", node)
        self.nodes.add(node)

    def _refuse(self, why: str) -> None:
        """Count a request dropped unanswered; warn at most once a minute."""
        self.refused += 1
        now = time.monotonic()
        if now - self._warned_at < _WARN_EVERY:
            self._unwarned += 1
            logger.debug("control request ignored: %s", why)
            return
        more = f" ({self._unwarned} more since the last warning)" if self._unwarned else ""
        logger.warning("control request ignored: %s%s", why, more)
        self._warned_at = now
        self._unwarned = 0

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

    Replies come to a queue of the control exchange's naming, which every worker accepts
    whichever node of a cluster it is on; a user who may not declare one (no configure
    permission on ``queuey.control-reply.*``) gets them through direct reply-to, which a
    worker accepts only from a node it has been connected to.
    """
    try:
        ch.exchange_declare(EXCHANGE, "fanout", passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code == 404:
            return []
        raise
    reply_queue = REPLY_QUEUE_PREFIX + uuid.uuid4().hex
    try:
        # Exclusive and auto-delete: gone with its consumer, when the channel closes.
        ch.queue_declare(reply_queue, exclusive=True, auto_delete=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code != 403:
            raise
        logger.debug("may not declare a control reply queue: replies by direct reply-to")
        direct = ch.connection.channel()
        try:
            return _gather(direct, REPLY_TO, request, timeout)
        finally:
            if direct.is_open:
                direct.close()
    return _gather(ch, reply_queue, request, timeout)


def _gather(ch: BlockingChannel, reply_to: str, request: bytes, timeout: float) -> list[bytes]:
    """Publish ``request`` to the exchange and collect the replies to ``reply_to``."""
    correlation_id = uuid.uuid4().hex
    replies: list[bytes] = []

    def on_reply(_ch: Any, _method: Any, props: BasicProperties, body: bytes) -> None:
        if props.correlation_id == correlation_id and len(body) <= MAX_DOCUMENT:
            replies.append(bytes(body))

    ch.basic_consume(reply_to, on_reply, auto_ack=True)
    # Confirmed and mandatory: a refusal (no write permission on the exchange) is an
    # error now, and no worker queue bound is an answer at once.
    ch.confirm_delivery()
    try:
        ch.basic_publish(
            EXCHANGE,
            "",
            request,
            BasicProperties(
                reply_to=reply_to,
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


def reply_node(address: str) -> int | None:
    """The node hash of a direct reply-to address formed as RabbitMQ forms them, or None.

    RabbitMQ 3.10 writes ``amq.rabbitmq.reply-to.<pid>.<key>``: the pid is base64 of the
    Erlang external term of the requester's channel pid, its node replaced by
    ``reply@<erlang:phash2(node)>``; the key is base64 of 16 random bytes. Only an
    address that decodes exactly so is safe to publish to (see the module's docstring).
    """
    prefix = REPLY_TO + "."
    if not address.startswith(prefix) or len(address) > 255:
        return None
    parts = address[len(prefix) :].split(".")
    if len(parts) != 2 or not all(_BASE64.fullmatch(p) for p in parts):
        return None
    try:
        raw = base64.b64decode(parts[0], validate=True)
    except (binascii.Error, ValueError):
        return None
    return _pid_node(raw)


def _pid_node(raw: bytes) -> int | None:
    """The node hash of an external-term pid: 131, then NEW_PID_EXT (88; id, serial and
    creation 4 bytes each) or PID_EXT (103; creation 1 byte), whose node is an atom
    (ATOM_UTF8_EXT 118 or ATOM_EXT 100 with a 2-byte length, SMALL_ATOM_UTF8_EXT 119 or
    SMALL_ATOM_EXT 115 with 1 byte) spelling ``reply@<digits>``."""
    if len(raw) < 5 or raw[0] != 131 or raw[1] not in (88, 103):
        return None
    tail = 12 if raw[1] == 88 else 9
    if raw[2] in (118, 100):
        start, size = 5, int.from_bytes(raw[3:5], "big")
    elif raw[2] in (119, 115):
        start, size = 4, raw[3]
    else:
        return None
    if len(raw) != start + size + tail:
        return None
    match = _REPLY_NODE.fullmatch(raw[start : start + size])
    return int(match.group(1)) if match else None
