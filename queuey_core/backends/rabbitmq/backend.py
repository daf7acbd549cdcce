"""RabbitMQBackend: the Backend protocol and its capabilities on RabbitMQ, a facade.

Owns: routing a publish straight to its queue or onto the delay ladder, the queues it
declared, the consumer link and the control links (made on first use), and closing
everything. The rest is one room each: connection parameters (:mod:`.connection`),
the direct-or-link publishing choice (:mod:`.publishing`), dead letters
(:mod:`.dead_letters`), declaring and counting on the admin connection (:mod:`.admin`),
the control channel (:mod:`.control`), schedules (:mod:`.schedule_state`,
:mod:`.election`).
Must never: publish a delayed message for a queue it has not declared (it would vanish
at the end of the ladder), or wait on the broker without a time bound.
"""

from __future__ import annotations

import logging
import math
import ssl
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import ClassVar, TypeVar

from pika.adapters.blocking_connection import BlockingChannel

from queuey_core.backends.base import Sink
from queuey_core.backends.capabilities import (
    ConnectionReporting,
    ControlHandler,
    Inspectable,
    Inspection,
    PublishesAhead,
    PublishesEncoded,
    Republishes,
    SupportsControl,
    SupportsSchedules,
)
from queuey_core.backends.features import Features
from queuey_core.backends.rabbitmq import control, topology
from queuey_core.backends.rabbitmq.admin import (
    Admin,
    declare_queues,
    inspect,
)
from queuey_core.backends.rabbitmq.cancels import StreamCancels
from queuey_core.backends.rabbitmq.connection import ConnectionPlan
from queuey_core.backends.rabbitmq.consumer import ConsumerLink
from queuey_core.backends.rabbitmq.dead_letters import RabbitDeadLetters
from queuey_core.backends.rabbitmq.election import RabbitElection
from queuey_core.backends.rabbitmq.features import FEATURES
from queuey_core.backends.rabbitmq.link import Link
from queuey_core.backends.rabbitmq.messages import Pub, properties
from queuey_core.backends.rabbitmq.pauses import MarkerPauses
from queuey_core.backends.rabbitmq.publishing import Publishing
from queuey_core.backends.rabbitmq.result import LinkStatus, Result
from queuey_core.backends.rabbitmq.schedule_state import RabbitScheduleState
from queuey_core.backends.rabbitmq.subscription import RabbitSubscription
from queuey_core.envelope import EncodedEnvelope, Envelope
from queuey_core.errors import BackendError, UnroutableError
from queuey_core.queues import QueueConfig

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


class RabbitMQBackend(
    StreamCancels,
    MarkerPauses,
    RabbitDeadLetters,
    Inspectable,
    SupportsControl,
    SupportsSchedules,
    PublishesEncoded,
    PublishesAhead,
    Republishes,
    ConnectionReporting,
):
    """The production backend. See the module docstring for how it uses the broker.

    Args:
        url: ``amqp://user:password@host:port/vhost``; the password never reaches a log.
            For a cluster, one URL per node (a sequence, or one string of them separated
            by commas): each connection goes to a node of the list and, when it loses
            it, to the next one that answers (see :mod:`.nodes`).
        heartbeat: seconds between AMQP heartbeats.
        connect_timeout: how long to keep trying to reach the broker at first.
        recovery_timeout: how long to keep trying to get a lost connection back before
            consumers end (:class:`ConsumerStoppedError`) and publishes fail.
        publish_timeout: how long a publish waits for the broker's confirm.
        settle_timeout: how long an ack (or the like) waits for the connection's thread.
        ssl_context: for an ``amqps://`` URL: the CA to trust, the client certificate
            (default: ``ssl.create_default_context()``, the system's CAs, no client
            certificate).
        server_name: the name the broker's certificate must be for (default: the URL's
            host).
        shuffle: try a cluster's nodes in an order shuffled for this process, so a fleet
            spreads over them (the default); False keeps the list's order.

    Raises:
        BackendError: the broker cannot be reached or refused the credentials.
        ConfigError: the URL is not a valid AMQP URL, or an SSL context came with an
            ``amqp://`` one.
    """

    #: What it does differently on purpose (:mod:`.features`).
    features: ClassVar[Features] = FEATURES

    def __init__(
        self,
        url: str | Sequence[str] = DEFAULT_URL,
        *,
        heartbeat: int = 30,
        connect_timeout: float = 5.0,
        recovery_timeout: float = 60.0,
        publish_timeout: float = 30.0,
        settle_timeout: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        server_name: str | None = None,
        shuffle: bool = True,
    ) -> None:
        self._plan = ConnectionPlan(
            url,
            heartbeat=heartbeat,
            connect_timeout=connect_timeout,
            recovery_timeout=recovery_timeout,
            publish_timeout=publish_timeout,
            ssl_context=ssl_context,
            server_name=server_name,
            shuffle=shuffle,
        )
        self.where = self._plan.where
        self.publish_timeout = publish_timeout
        self.settle_timeout = settle_timeout
        admin = self._plan.picker("admin")  # a bad URL fails here, before any connection
        self._lock = threading.Lock()
        self._consumer: ConsumerLink | None = None
        self._controls: list[control.ControlLink] = []
        self._declared: dict[str, QueueConfig] = {}
        self._ladder_declared = False
        self._closed = False
        self._admin = Admin(admin)
        self._publishing = Publishing(self._plan, publish_timeout=publish_timeout)
        self._admin.run(lambda ch: None)  # fail fast: unreachable broker, wrong credentials

    @property
    def server_version(self) -> str:
        """The broker's version, as it announced it."""
        return self._admin.server_version

    # -- Backend -----------------------------------------------------------------------

    def declare(self, queues: Sequence[QueueConfig]) -> None:
        """See :meth:`Backend.declare`."""
        declare_queues(self._admin, queues, ladder=not self._ladder_declared)
        self._ladder_declared = True
        for q in queues:
            self._declared[q.name] = q

    def publish(self, envelope: Envelope, *, delay: float | None = None) -> None:
        """See :meth:`Backend.publish`.

        Raises:
            NotEnqueuedError: surely not on the broker (refused, unroutable, unencodable,
                or never sent: unreachable for ``recovery_timeout``, blocked publishers).
            EnqueueUnknownError: sent, and not confirmed within ``publish_timeout`` of
                the broker being up, or lost with its connection and not republished
                before ``recovery_timeout``: it may or may not be on the broker.
        """
        exchange, routing_key = self._route(envelope.queue, delay)
        pub = Pub(exchange, routing_key, envelope.encode(), properties(envelope), envelope.job_id)
        self._publishing.send([pub])

    def publish_encoded(self, items: Sequence[tuple[EncodedEnvelope, float | None]]) -> None:
        """See :class:`PublishesEncoded`: :meth:`publish_many` of bodies already encoded."""
        self.publish_many(items)

    def publish_ahead(
        self, items: Sequence[tuple[EncodedEnvelope, float | None]]
    ) -> Callable[[], None]:
        """See :class:`PublishesAhead`: handed to the publisher link in chunks now (after
        every earlier call's), confirmed within one deadline from now."""
        if not items:
            return lambda: None
        routes = [self._route(envelope.queue, delay) for envelope, delay in items]
        return self._publishing.hand_over(items, routes)

    def publish_many(
        self, items: Sequence[tuple[Envelope | EncodedEnvelope, float | None]]
    ) -> None:
        """See :meth:`Backend.publish_many`: one batch, a window of confirms, one deadline.

        Raises what :meth:`publish` raises, listing which jobs were confirmed, which
        were not enqueued and which are unknown.
        """
        if not items:
            return
        routes = [self._route(envelope.queue, delay) for envelope, delay in items]
        self._publishing.send_many(items, routes)

    @property
    def republished(self) -> int:
        """Messages published again after a lost connection, over this backend's life.

        Each may be on the broker twice, with the same job id (duplicates, never losses).
        """
        return self._publishing.republished

    def defer(self, envelope: Envelope, delay: float) -> None:
        """See :meth:`Backend.defer`."""
        self.publish(envelope, delay=delay)

    def consume(self, queue: QueueConfig, sink: Sink) -> RabbitSubscription:
        """See :meth:`Backend.consume`: returns once RabbitMQ registered the consumer."""
        link = self._consumer_link()
        sub = RabbitSubscription(self, link, queue, sink)

        def register() -> None:
            link.subscriptions.append(sub)
            conn = link.connection
            if conn is not None and conn.is_open:
                sub.open_channel(conn)

        self.wait(link.call(register), "starting a consumer")
        if not sub.started.wait(self.settle_timeout):
            raise BackendError(f"RabbitMQ did not confirm the consumer of {queue.name!r}")
        if sub.start_error is not None:
            raise sub.start_error
        return sub

    # -- counting (Inspectable, and for tests) -------------------------------------------

    def queue_counts(self, queue: str) -> tuple[int, int]:
        """``(ready messages, consumers)`` of ``queue``, as RabbitMQ reports them."""
        frame = self._admin.run(lambda ch: ch.queue_declare(queue, passive=True))
        return int(frame.method.message_count), int(frame.method.consumer_count)

    def unroutable_count(self) -> int:
        """Messages in :data:`topology.UNROUTABLE` (none while it does not exist yet)."""
        return self.unimported_dead_letters(topology.UNROUTABLE)

    def inspect(self, names: Sequence[str]) -> Inspection:
        """See :meth:`Inspectable.inspect`: a missing queue is None, never NOT_FOUND.

        The broker's counts alone: with a job store,
        :meth:`~.dead_letters.RabbitDeadLetters.with_stored_dead_letters`
        adds the dead letters of its table."""
        return self._admin.run(lambda ch: inspect(ch, names))

    def held_count(self) -> int:
        """Messages waiting in the delay ladder, for every queue together."""

        def work(ch: BlockingChannel) -> int:
            return sum(
                int(ch.queue_declare(topology.delay_name(k), passive=True).method.message_count)
                for k in range(topology.DELAY_LEVELS)
            )

        return self._admin.run(work)

    # -- the control channel (SupportsControl; see control.py) ---------------------------

    def serve_control(self, handler: ControlHandler) -> control.ControlLink:
        """See :meth:`SupportsControl.serve_control`: a connection and thread of its own,
        which connects in the background and never gives up reconnecting until closed."""
        with self._lock:
            if self._closed:
                raise BackendError("the RabbitMQ backend is closed")
            args = self._plan.link_args("control")
            args["recovery_timeout"] = math.inf
            link = control.ControlLink(handler, **args, patient=True)
            self._controls.append(link)
        link.start(wait=False)
        return link

    def broadcast_control(self, request: bytes, *, timeout: float) -> list[bytes]:
        """See :meth:`SupportsControl.broadcast_control` (on the admin connection)."""
        return self._admin.run(lambda ch: control.broadcast(ch, request, timeout))

    # -- schedules (SupportsSchedules) ---------------------------------------------------

    def schedule_state(self) -> RabbitScheduleState:
        """See :meth:`SupportsSchedules.schedule_state`: last-value queues on the broker,
        on a connection of its own."""
        return RabbitScheduleState(self._plan.urls, connect_timeout=self._plan.connect_timeout)

    def election(self, *, heartbeat: int) -> RabbitElection:
        """See :meth:`SupportsSchedules.election`: a candidate on a connection of its own."""
        return RabbitElection(
            self._plan.urls,
            heartbeat=heartbeat,
            connect_timeout=self._plan.connect_timeout,
            recovery_timeout=self._plan.recovery_timeout,
        )

    def is_closed(self) -> bool:
        """Whether :meth:`close` was called."""
        with self._lock:
            return self._closed

    def close(self) -> None:
        """See :meth:`Backend.close`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            consumer, controls = self._consumer, list(self._controls)
        if consumer is not None:
            consumer.close()
        self._publishing.close()
        for link in controls:
            link.close()
        if self._dead_writer is not None:
            self._dead_writer.close()
        if self._index is not None:
            self._index.table.close()
        self._admin.close()

    # -- internals ---------------------------------------------------------------------

    def wait(self, future: Result[T], what: str) -> T:
        """The future's result, as a BackendError if it takes over ``settle_timeout``."""
        try:
            return future.result(self.settle_timeout)
        except FutureTimeout:
            raise BackendError(
                f"{what}: RabbitMQ did not answer within {self.settle_timeout:g}s"
            ) from None

    def _route(self, queue: str, delay: float | None) -> tuple[str, str]:
        ms = topology.delay_ms(delay) if delay else 0
        if ms == 0:
            return "", queue
        if queue not in self._declared:
            raise UnroutableError(
                f"queue {queue!r} was not declared through this backend: a delayed message "
                "could not be routed to it"
            )
        return topology.TOP_EXCHANGE, topology.delay_routing_key(ms, queue)

    def _consumer_link(self) -> ConsumerLink:
        with self._lock:
            if self._closed:
                raise BackendError("the RabbitMQ backend is closed")
            if self._consumer is None or self._consumer.is_dead:
                self._consumer = ConsumerLink(**self._plan.link_args("consumer"))
                self._consumer.start()
            return self._consumer

    # -- observability -----------------------------------------------------------------

    def connection_status(self) -> dict[str, LinkStatus]:
        """The consumer and publisher connections opened so far, by role: their state,
        reconnections and I/O thread (for health checks and metrics; never blocks)."""
        with self._lock:
            consumer = self._consumer
        links: dict[str, Link | None] = {"consumer": consumer, "publisher": self._publishing.link}
        return {role: link.status() for role, link in links.items() if link is not None}
