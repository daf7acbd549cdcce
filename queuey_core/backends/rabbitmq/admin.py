"""The admin connection: topology and counting, one caller at a time.

Owns: a ``BlockingConnection`` behind a lock (to the first node of a cluster that
answers, see :mod:`.nodes`) for declaring queues and the delay ladder (with the end of
the ladder's alternate exchange, :func:`declare_end_of_ladder`) and counting (a queue
that does not exist counts as None, not an error: :func:`inspect`). The dead-letter
tools run on it too (:mod:`.dead_letters`).
Must never: be used for the job path (publishing and consuming have connections of
their own).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import BasicProperties

from queuey_core.backends.capabilities import (
    Inspection,
    QueueCounts,
)
from queuey_core.backends.rabbitmq import topology
from queuey_core.backends.rabbitmq.errors import connect_error, error_text, refused
from queuey_core.backends.rabbitmq.nodes import Picker
from queuey_core.backends.rabbitmq.pika_compat import nowait_channel, server_properties
from queuey_core.errors import BackendError, ConfigError
from queuey_core.queues import QueueConfig, QueueKind

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The routing key of the probe that tells whether the deliver exchange has an alternate
#: exchange: two words, where every binding of the deliver exchange needs 37 or more.
_PROBE_KEY = "queuey.probe"


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
                        _close_quietly(ch)
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
                            f"lost the connection to RabbitMQ at {self._where}: {error_text(exc)}"
                        ) from exc
            raise AssertionError("unreachable")

    @contextlib.contextmanager
    def channel(self) -> Iterator[BlockingChannel]:
        """A fresh channel kept for as long as the caller needs it (a pass that hands out
        what it reads as it goes), one caller at a time, closed at the end, which gives
        back whatever it still held. No second try: a lost connection is a BackendError."""
        with self._lock:
            conn = self._connection()
            try:
                ch = conn.channel()
                try:
                    yield ch
                finally:
                    _close_quietly(ch)
            except pika.exceptions.ChannelClosedByBroker as exc:
                raise refused(exc) from exc
            except (
                pika.exceptions.AMQPConnectionError,
                pika.exceptions.ConnectionWrongStateError,
                pika.exceptions.ChannelWrongStateError,
            ) as exc:
                self._drop()
                raise BackendError(
                    f"lost the connection to RabbitMQ at {self._where}: {error_text(exc)}"
                ) from exc

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
            version = server_properties(self._conn).get("version", b"")
            self.server_version = version.decode() if isinstance(version, bytes) else str(version)
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and conn.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):
                conn.close()

    @property
    def vhost(self) -> str:
        """The virtual host this connection works in."""
        return str(self._nodes.params[0].virtual_host)  # every node's URL names the same one

    def close(self) -> None:
        with self._lock:
            self._drop()


def declare_queues(admin: Admin, queues: Sequence[QueueConfig], *, ladder: bool) -> None:
    """Declare ``queues`` with their dead-letter queues (and the delay ladder if
    ``ladder``), in one batch; ConfigError when one exists with other settings."""
    version = admin.server_version
    major = int(version.split(".")[0] or 0) if version else 0
    for q in queues:
        if q.kind is QueueKind.QUORUM and q.max_priority is not None and 0 < major < 4:
            raise ConfigError(
                f"queue {q.name!r}: quorum queues on RabbitMQ {version} do "
                'not support priorities; drop max_priority or use kind = "classic"'
            )

    if ladder:
        declare_end_of_ladder(admin)
    # A quorum queue's dead letters are quorum too (replicated, as its jobs are), but a
    # dead-letter queue an earlier version made classic is kept as it is.
    quorum = [q for q in queues if q.kind is QueueKind.QUORUM]
    existing = admin.existing([q.dead_letter_queue for q in quorum]) if quorum else set()

    def work(ch: BlockingChannel) -> None:
        declares = Declares()
        if ladder:
            declare_ladder(declares)
        for q in queues:
            if q.dead_letter_queue not in existing:
                declares.queue_declare(
                    q.dead_letter_queue,
                    durable=True,
                    arguments=topology.dead_letter_queue_arguments(q.kind),
                )
            declares.queue_declare(q.name, durable=True, arguments=topology.queue_arguments(q))
            declares.queue_bind(q.name, topology.DELIVER_EXCHANGE, topology.deliver_binding(q.name))
        declares.send(ch)

    try:
        admin.run(work)
    except ConfigError as exc:
        names = ", ".join(q.name for q in queues)
        raise ConfigError(
            f"{exc} (declaring {names}: a queue exists with other settings?)"
        ) from exc


def declare_end_of_ladder(admin: Admin) -> bool:
    """Declare the unroutable exchange and queue, then the deliver exchange with it as its
    alternate exchange. True when that alternate exchange is in effect.

    A deliver exchange declared by an older queuey has no such argument, and declaring it
    with one is refused (406): then it is declared as it is, and a probe tells whether a
    policy gave it the alternate exchange. If none did, a delayed message for a queue
    that does not exist would be dropped at the end of the ladder: that is logged, with
    the command that fixes it.
    """

    def unroutable(declares: Declares) -> Declares:
        declares.exchange_declare(topology.UNROUTABLE, "fanout", durable=True)
        declares.queue_declare(
            topology.UNROUTABLE, durable=True, arguments=topology.dead_letter_queue_arguments()
        )
        declares.queue_bind(topology.UNROUTABLE, topology.UNROUTABLE)
        return declares

    def deliver(arguments: dict[str, Any] | None) -> Callable[[BlockingChannel], None]:
        return lambda ch: ch.exchange_declare(
            topology.DELIVER_EXCHANGE, "topic", durable=True, arguments=arguments
        )

    def end_of_ladder(ch: BlockingChannel) -> None:
        declares = unroutable(Declares())
        declares.exchange_declare(
            topology.DELIVER_EXCHANGE,
            "topic",
            durable=True,
            arguments=topology.deliver_exchange_arguments(),
        )
        declares.send(ch)

    try:
        admin.run(end_of_ladder)
        return True
    except ConfigError:  # 406: declared before it had an alternate exchange
        # One at a time again: a refusal of the unroutable queue or exchange (not ours)
        # raises here, as it did before the declares were sent together.
        admin.run(lambda ch: unroutable(Declares(wait_each=True)).send(ch))
        admin.run(deliver(None))
    if admin.run(_alternate_in_effect):
        return True
    logger.warning(
        "the exchange %s predates its alternate exchange: a delayed message for a queue "
        "that does not exist would be dropped at the end of the delay ladder instead of "
        "kept in %s; give it one with: %s",
        topology.DELIVER_EXCHANGE,
        topology.UNROUTABLE,
        topology.unroutable_policy_command(admin.vhost),
    )
    return False


def _alternate_in_effect(ch: BlockingChannel) -> bool:
    """Whether the deliver exchange passes on what no queue takes.

    The probe matches no binding, so only an alternate exchange routes it; it is
    published mandatory (an unroutable one comes back) with expiration 0, so the
    unroutable queue drops it as soon as it reaches the head, never delivering it.
    """
    ch.confirm_delivery()
    try:
        ch.basic_publish(
            topology.DELIVER_EXCHANGE,
            _PROBE_KEY,
            b"",
            BasicProperties(expiration="0"),
            mandatory=True,
        )
    except pika.exceptions.UnroutableError:
        return False
    return True


def inspect(ch: BlockingChannel, names: Sequence[str]) -> Inspection:
    """Counts of ``names`` (and their dead-letter queues) and of the delay ladder.

    A passive declare of a missing queue is answered 404 and closes its channel: the
    check goes on on a new channel, so one missing queue hides nothing after it.
    """
    conn = ch.connection
    current = ch

    def count(name: str) -> tuple[int, int] | None:
        nonlocal current
        try:
            frame = current.queue_declare(name, passive=True)
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code != 404:
                raise
            current = conn.channel()
            return None
        return int(frame.method.message_count), int(frame.method.consumer_count)

    try:
        queues: dict[str, QueueCounts | None] = {}
        for name in names:
            main = count(name)
            dead = count(topology.dead_letter_name(name)) if main is not None else None
            queues[name] = (
                None if main is None else QueueCounts(*main, None if dead is None else dead[0])
            )
        levels = [count(topology.delay_name(k)) for k in range(topology.DELAY_LEVELS)]
        found = [level[0] for level in levels if level is not None]
        unroutable = count(topology.UNROUTABLE)
        return Inspection(queues, sum(found) if found else None, unroutable[0] if unroutable else 0)
    finally:
        if current is not ch:
            _close_quietly(current)


def _close_quietly(ch: BlockingChannel) -> None:
    """Close ``ch`` if it is open, never raising: the work on it is done (or failed with
    an error of its own, which a failing close must not replace: a Ctrl-C turned into
    a "broker lost" kept ``queues --watch`` running), and a broken connection shows at
    its next use."""
    if ch.is_open:
        with contextlib.suppress(pika.exceptions.AMQPError):
            ch.close()


class Declares:
    """Declares and binds for one channel, sent together and answered once.

    Every call but the last goes out nowait; the last one waits for its answer. RabbitMQ
    handles a channel's methods in order, so that answer means every one before it took
    effect, and a refusal of any of them closes the channel with its own code and text
    (the queue or exchange it names), which the last call raises. The ladder and a
    worker's queues are about 150 declares: one round trip instead of 150.
    """

    def __init__(self, *, wait_each: bool = False) -> None:
        self._calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self._wait_each = wait_each  # one round trip each (a refusal shows which)

    def exchange_declare(self, name: str, kind: str, **kwargs: Any) -> None:
        """Add ``BlockingChannel.exchange_declare(name, kind, **kwargs)``."""
        self._calls.append(("exchange_declare", (name, kind), kwargs))

    def queue_declare(self, name: str, **kwargs: Any) -> None:
        """Add ``BlockingChannel.queue_declare(name, **kwargs)``."""
        self._calls.append(("queue_declare", (name,), kwargs))

    def queue_bind(self, queue: str, exchange: str, routing_key: str | None = None) -> None:
        """Add ``BlockingChannel.queue_bind(queue, exchange, routing_key)``."""
        self._calls.append(("queue_bind", (queue, exchange, routing_key), {}))

    def exchange_bind(self, destination: str, source: str, routing_key: str) -> None:
        """Add ``BlockingChannel.exchange_bind(destination, source, routing_key)``."""
        self._calls.append(("exchange_bind", (destination, source, routing_key), {}))

    def send(self, ch: BlockingChannel) -> None:
        """Send them all on ``ch``; raises pika's ChannelClosedByBroker on a refusal."""
        if not self._calls:
            return
        *ahead, (method, args, kwargs) = self._calls
        # pika's own channel under the blocking one: a call without a callback is sent
        # nowait, written out with the last call's request.
        nowait = ch if self._wait_each else nowait_channel(ch)
        for name, ahead_args, ahead_kwargs in ahead:
            getattr(nowait, name)(*ahead_args, **ahead_kwargs)
        getattr(ch, method)(*args, **kwargs)


def declare_ladder(declares: Declares) -> None:
    """The ladder's levels and their bindings (the deliver exchange comes first, from
    :func:`declare_end_of_ladder`)."""
    for level in range(topology.DELAY_LEVELS):
        name = topology.delay_name(level)
        declares.exchange_declare(name, "topic", durable=True)
        declares.queue_declare(name, durable=True, arguments=topology.delay_queue_arguments(level))
    for level in range(topology.DELAY_LEVELS):
        name = topology.delay_name(level)
        declares.queue_bind(name, name, topology.level_binding(level, "1"))
        declares.exchange_bind(topology.next_hop(level), name, topology.level_binding(level, "0"))
