"""The scheduler election on RabbitMQ: a single-active-consumer queue and one token.

Owns: the election connection (a :class:`Link`, so heartbeats flow on a thread of its
own), the queue ``queuey.scheduler.leader`` (quorum, ``x-single-active-consumer``,
``x-max-length: 1``) and the token message in it.

How it elects: every candidate consumes the queue, and RabbitMQ delivers to one
consumer at a time, the active one; the others wait in line. AMQP 0-9-1 does not tell a
consumer that it became active, so each candidate publishes a token when it connects
(``x-max-length: 1`` keeps at most one ready), and whichever receives a token is the
active consumer: the leader. It holds the token unacked (prefetch 1) while it leads.
When its connection ends, cleanly or not, RabbitMQ requeues the token and activates
the next consumer, which receives it: measured on RabbitMQ 3.10, 3 ms after the
leader's process was killed, and 5.5 s after it froze with a 2 s heartbeat (the
broker drops a silent connection after about two missed heartbeats). The leader gives
the token back and receives it again every ``refresh`` seconds, so it never trips the
broker's ``consumer_timeout`` (30 min) on an unacked delivery; still being the active
consumer, it is the only one the token can go to.

Must never: say "leader" for a channel that has closed (a lost connection or channel
clears it at once, on the link's thread), or touch the connection from another thread.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pika
import pika.exceptions
from pika.channel import Channel
from pika.spec import Basic, BasicProperties

from queuey_core.backends.rabbitmq.link import Link
from queuey_core.backends.rabbitmq.nodes import Nodes, Picker, as_urls
from queuey_core.backends.rabbitmq.result import Result
from queuey_core.errors import BackendError, ConfigError, QueueyError
from queuey_core.urls import redact

logger = logging.getLogger(__name__)

#: The queue whose single active consumer is the leading scheduler.
LEADER_QUEUE = "queuey.scheduler.leader"


def leader_queue_arguments() -> dict[str, Any]:
    """Quorum (replicated in a cluster), one active consumer, at most one ready token."""
    return {
        "x-queue-type": "quorum",
        "x-single-active-consumer": True,
        "x-max-length": 1,
    }


def connection_params(
    url: str, role: str, *, heartbeat: int, connect_timeout: float
) -> pika.ConnectionParameters:
    """Parameters for one of the scheduler's connections; ConfigError for a bad URL."""
    try:
        params = pika.URLParameters(url)
    except Exception as exc:
        raise ConfigError(f"invalid broker URL {redact(url)!r}") from exc
    params.heartbeat = heartbeat
    params.blocked_connection_timeout = 30.0
    params.connection_attempts = 1
    params.socket_timeout = connect_timeout
    params.client_properties = {"connection_name": f"queuey {role}"}
    return params


def node_picker(
    url: str | Sequence[str], role: str, *, heartbeat: int, connect_timeout: float
) -> Picker:
    """The nodes one of the scheduler's connections may use (one URL, or a cluster's)."""
    nodes = Nodes(as_urls(url))
    return nodes.picker(
        lambda u: connection_params(u, role, heartbeat=heartbeat, connect_timeout=connect_timeout)
    )


def candidate_name() -> str:
    """``host:pid:random``: which process a candidate is, in logs and the management UI."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class RabbitElection:
    """One candidate in the election (see the module docstring). Thread-safe.

    Args:
        url: the broker: one URL, or one per node of a cluster (the connection fails over
            to the next node that answers, as the backend's do).
        heartbeat: seconds; a candidate whose machine vanishes is replaced after about
            two to three of them.
        connect_timeout: how long to try to reach the broker at first.
        recovery_timeout: how long to try to get a lost connection back before the
            election fails for good (:attr:`error`).
        confirm_timeout: how long :meth:`confirm` waits for the broker.
        refresh: seconds between giving the token back and taking it again.
        queue: the election's queue (one election per queue).
    """

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        heartbeat: int = 2,
        connect_timeout: float = 5.0,
        recovery_timeout: float = 60.0,
        confirm_timeout: float = 5.0,
        refresh: float = 60.0,
        queue: str = LEADER_QUEUE,
    ) -> None:
        self.name = candidate_name()
        nodes = node_picker(
            url,
            f"scheduler election {self.name}",
            heartbeat=heartbeat,
            connect_timeout=connect_timeout,
        )
        self._link = _ElectionLink(
            nodes,
            name="election",
            where=nodes.where,
            connect_timeout=connect_timeout,
            recovery_timeout=recovery_timeout,
        )
        self._link.queue = queue
        self._link.refresh = refresh
        self._link.candidate = self.name
        self._confirm_timeout = confirm_timeout

    def start(self, on_change: Callable[[], None]) -> None:
        """See :meth:`Election.start`."""
        self._link.on_change = on_change
        self._link.start()

    def is_leader(self) -> bool:
        """See :meth:`Election.is_leader`."""
        return self._link.leader

    def confirm(self) -> bool:
        """See :meth:`Election.confirm`: a ``basic.qos`` round trip on the token's channel."""
        result: Result[bool] = Result()

        def ask() -> None:
            link = self._link
            ch = link.channel
            if ch is None or not ch.is_open or not link.leader:
                result.set(False)
                return
            link.pending.append(result)

            def answered(_frame: Any) -> None:
                if result in link.pending:
                    link.pending.remove(result)
                result.set(ch is link.channel and link.leader)

            ch.basic_qos(prefetch_count=1, callback=answered)

        try:
            self._link.submit(ask)
            return result.result(self._confirm_timeout)
        except (BackendError, FutureTimeout):
            return False

    @property
    def error(self) -> QueueyError | None:
        """See :attr:`Election.error`."""
        return self._link.error

    def close(self) -> None:
        """See :meth:`Election.close`: the connection closes and the token moves on."""
        self._link.close()


class _ElectionLink(Link):
    """The election's connection and channel; everything here runs on the link's thread."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue = LEADER_QUEUE
        self.refresh = 60.0
        self.candidate = "?"
        self.on_change: Callable[[], None] = lambda: None
        self.channel: Channel | None = None
        self.leader = False
        self.error: QueueyError | None = None
        self.pending: list[Result[bool]] = []
        self._held: int | None = None

    # -- hooks -------------------------------------------------------------------------

    def on_open(self, conn: Any) -> None:
        conn.channel(on_open_callback=self._channel_opened)

    def on_lost(self, reason: BaseException) -> None:
        self._step_down("the connection to RabbitMQ was lost")

    def on_gave_up(self, error: BackendError) -> None:
        self.error = error
        self._step_down("the election failed")

    def on_closing(self) -> None:
        self._step_down("")

    # -- the channel -------------------------------------------------------------------

    def _channel_opened(self, ch: Channel) -> None:
        self.channel = ch
        ch.add_on_close_callback(self._channel_closed)
        ch.add_on_cancel_callback(lambda _frame: self._cancelled(ch))
        ch.queue_declare(
            self.queue,
            durable=True,
            arguments=leader_queue_arguments(),
            callback=lambda _frame: self._declared(ch),
        )

    def _declared(self, ch: Channel) -> None:
        if not self._current(ch):
            return
        # A token of our own: if no candidate holds one, the active consumer gets it.
        ch.basic_publish(
            "",
            self.queue,
            b"leader token",
            BasicProperties(delivery_mode=2, headers={"x-queuey-candidate": self.candidate}),
        )
        ch.basic_qos(prefetch_count=1, callback=lambda _frame: self._consume(ch))

    def _consume(self, ch: Channel) -> None:
        if self._current(ch):
            ch.basic_consume(self.queue, self._token)

    def _token(
        self, ch: Channel, method: Basic.Deliver, props: BasicProperties, body: bytes
    ) -> None:
        if not self._current(ch):
            return
        if self._held is not None:  # a surplus token (prefetch 1 should prevent it)
            ch.basic_ack(method.delivery_tag)
            return
        self._held = method.delivery_tag
        if not self.leader:
            self.leader = True
            logger.info("this scheduler is now the leader", extra={"candidate": self.candidate})
            self._ioloop.call_later(self.refresh, lambda: self._refresh(ch))
            self.on_change()

    def _refresh(self, ch: Channel) -> None:
        if not self._current(ch) or not ch.is_open or not self.leader:
            return
        if self._held is not None:
            ch.basic_reject(self._held, requeue=True)  # back to us: we are the active one
            self._held = None
        self._ioloop.call_later(self.refresh, lambda: self._refresh(ch))

    def _channel_closed(self, ch: Channel, reason: BaseException) -> None:
        if not self._current(ch):
            return
        self._step_down(f"the election channel closed ({reason})")
        conn = self._conn
        if self.is_dead or conn is None or not conn.is_open:
            return  # the connection's own recovery takes it from here
        if isinstance(reason, pika.exceptions.ChannelClosedByBroker) and reason.reply_code == 406:
            self.error = ConfigError(
                f"RabbitMQ refused the election queue {self.queue!r}: {reason.reply_text}"
            )
            self.on_change()
            return
        self._ioloop.call_later(1.0, lambda: self.on_open(conn) if conn.is_open else None)

    def _cancelled(self, ch: Channel) -> None:
        """The broker cancelled our consumer (the queue was deleted): start over."""
        if not self._current(ch):
            return
        self._step_down("the election queue was deleted")
        if ch.is_open:
            ch.close()
        conn = self._conn
        if conn is not None and conn.is_open and not self.is_dead:
            self._ioloop.call_later(1.0, lambda: self.on_open(conn) if conn.is_open else None)

    def _current(self, ch: Channel) -> bool:
        return ch is self.channel

    def _step_down(self, why: str) -> None:
        self.channel = None
        self._held = None
        pending, self.pending = self.pending, []
        for result in pending:
            result.set(False)
        if self.leader:
            self.leader = False
            if why:
                logger.warning(
                    "this scheduler is no longer the leader: %s",
                    why,
                    extra={"candidate": self.candidate},
                )
        self.on_change()
