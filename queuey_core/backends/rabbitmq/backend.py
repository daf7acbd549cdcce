"""RabbitMQBackend: the Backend protocol on RabbitMQ, joining the links together.

Owns: the backend's connections (created on first use), routing a publish straight to
its queue or onto the delay ladder, and the Backend protocol's methods.
Must never: publish a delayed message for a queue it has not declared (it would vanish
at the end of the ladder), or wait on the broker without a time bound.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, NoReturn, TypeVar

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import BasicProperties

from queuey_core import __version__
from queuey_core.backends.base import Sink
from queuey_core.backends.capabilities import (
    AnyDeadLetter,
    ConnectionReporting,
    ControlHandler,
    DeadLetterTools,
    Inspectable,
    Inspection,
    PublishesEncoded,
    SupportsControl,
    SupportsSchedules,
)
from queuey_core.backends.rabbitmq import control, topology
from queuey_core.backends.rabbitmq.admin import (
    Admin,
    Declares,
    declare_end_of_ladder,
    declare_ladder,
    get_all,
    inspect,
    requeue,
)
from queuey_core.backends.rabbitmq.confirms import (
    Deadline,
    raise_for,
    settle,
    wait_for,
)
from queuey_core.backends.rabbitmq.consumer import ConsumerLink, RabbitSubscription
from queuey_core.backends.rabbitmq.direct import Direct, DirectPublisher
from queuey_core.backends.rabbitmq.election import RabbitElection
from queuey_core.backends.rabbitmq.link import Link, LinkStatus, Result
from queuey_core.backends.rabbitmq.nodes import Nodes, Picker, as_urls
from queuey_core.backends.rabbitmq.publisher import (
    Pub,
    PublisherLink,
    check_encodable,
    properties,
    pub_for,
)
from queuey_core.backends.rabbitmq.schedule_state import RabbitScheduleState
from queuey_core.envelope import EncodedEnvelope, Envelope
from queuey_core.errors import (
    BackendError,
    ConfigError,
    EnqueueUnknownError,
    NotEnqueuedError,
    PublishFailure,
    UnroutableError,
)
from queuey_core.queues import QueueConfig, QueueKind
from queuey_core.urls import redact

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"

#: Messages handed to the publisher's thread at a time by publish_many.
_CHUNK = 200


class RabbitMQBackend(
    DeadLetterTools,
    Inspectable,
    SupportsControl,
    SupportsSchedules,
    PublishesEncoded,
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
        self._urls = as_urls(url)
        self._nodes = Nodes(self._urls, shuffle=shuffle)
        self.where = self._nodes.where
        self._heartbeat = heartbeat
        self._connect_timeout = connect_timeout
        self._recovery_timeout = recovery_timeout
        self.publish_timeout = publish_timeout
        self.settle_timeout = settle_timeout
        self._ssl_context = ssl_context
        self._server_name = server_name
        admin = self._picker("admin")  # a bad URL fails here, before any connection
        self._lock = threading.Lock()
        self._publisher: PublisherLink | None = None
        self._consumer: ConsumerLink | None = None
        self._controls: list[control.ControlLink] = []
        self._declared: dict[str, QueueConfig] = {}
        self._ladder_declared = False
        self._closed = False
        self._admin = Admin(admin)
        # The caller's deadline bounds a direct publish, blocked or not.
        direct = self._picker("direct publisher", blocked_timeout=False)
        self._direct = DirectPublisher(direct, heartbeat)
        self._republished_before = 0
        self._admin.run(lambda ch: None)  # fail fast: unreachable broker, wrong credentials

    @property
    def server_version(self) -> str:
        """The broker's version, as it announced it."""
        return self._admin.server_version

    # -- Backend -----------------------------------------------------------------------

    def declare(self, queues: Sequence[QueueConfig]) -> None:
        """See :meth:`Backend.declare`."""
        major = int(self.server_version.split(".")[0] or 0) if self.server_version else 0
        for q in queues:
            if q.kind is QueueKind.QUORUM and q.max_priority is not None and 0 < major < 4:
                raise ConfigError(
                    f"queue {q.name!r}: quorum queues on RabbitMQ {self.server_version} do "
                    'not support priorities; drop max_priority or use kind = "classic"'
                )

        if not self._ladder_declared:
            declare_end_of_ladder(self._admin)
        # A quorum queue's dead letters are quorum too (replicated, as its jobs are), but a
        # dead-letter queue an earlier version made classic is kept as it is.
        quorum = [q for q in queues if q.kind is QueueKind.QUORUM]
        existing = self._admin.existing([q.dead_letter_queue for q in quorum]) if quorum else set()

        def work(ch: BlockingChannel) -> None:
            declares = Declares()
            if not self._ladder_declared:
                declare_ladder(declares)
            for q in queues:
                if q.dead_letter_queue not in existing:
                    declares.queue_declare(
                        q.dead_letter_queue,
                        durable=True,
                        arguments=topology.dead_letter_queue_arguments(q.kind),
                    )
                declares.queue_declare(q.name, durable=True, arguments=topology.queue_arguments(q))
                declares.queue_bind(
                    q.name, topology.DELIVER_EXCHANGE, topology.deliver_binding(q.name)
                )
            declares.send(ch)

        try:
            self._admin.run(work)
        except ConfigError as exc:
            names = ", ".join(q.name for q in queues)
            raise ConfigError(
                f"{exc} (declaring {names}: a queue exists with other settings?)"
            ) from exc
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
        self._send([pub])

    def publish_encoded(self, items: Sequence[tuple[EncodedEnvelope, float | None]]) -> None:
        """See :class:`PublishesEncoded`: :meth:`publish_many` of bodies already encoded."""
        self.publish_many(items)

    def publish_many(
        self, items: Sequence[tuple[Envelope | EncodedEnvelope, float | None]]
    ) -> None:
        """See :meth:`Backend.publish_many`: one batch, a window of confirms, one deadline.

        Raises what :meth:`publish` raises, listing which jobs were confirmed, which
        were not enqueued and which are unknown.
        """
        if not items:
            return
        deadline = self._deadline()
        routes = [self._route(envelope.queue, delay) for envelope, delay in items]
        link = self._handing_to_link(
            lambda: [Pub("", "", b"", None, envelope.job_id) for envelope, _ in items], deadline
        )
        pubs: list[Pub] = []
        # Hand them over in chunks as they are encoded, so encoding overlaps the broker's
        # confirms; wait for every confirm only at the end.
        for start in range(0, len(items), _CHUNK):
            chunk = [
                pub_for(exchange, routing_key, envelope)
                for (envelope, _), (exchange, routing_key) in zip(
                    items[start : start + _CHUNK], routes[start : start + _CHUNK], strict=True
                )
            ]
            pubs.extend(chunk)
            try:
                link.publish(chunk)
            except BackendError as exc:
                # The link died (or the backend closed) meanwhile: the rest is not sent.
                rest = [
                    Pub(ex, rk, b"", None, env.job_id)
                    for (env, _), (ex, rk) in zip(
                        items[start + _CHUNK :], routes[start + _CHUNK :], strict=True
                    )
                ]
                handed = pubs[: len(pubs) - len(chunk)]
                self._refused_by_link(handed, [*chunk, *rest], exc, deadline, link)
        wait_for(pubs, deadline, link, self.where)

    @property
    def republished(self) -> int:
        """Messages published again after a lost connection, over this backend's life.

        Each may be on the broker twice, with the same job id (duplicates, never losses).
        """
        with self._lock:
            link, before = self._publisher, self._republished_before
        return before + (link.republished if link is not None else 0)

    def defer(self, envelope: Envelope, delay: float) -> None:
        """See :meth:`Backend.defer`."""
        self.publish(envelope, delay=delay)

    def publish_dead_letter(
        self, envelope: Envelope, reason: str, *, queue: str | None = None
    ) -> None:
        """Publish ``envelope`` to the dead-letter queue of ``queue``, with why, when, attempt.

        ``queue`` is the queue the envelope was delivered from (by default the one it
        names). Raises before anything is sent if the message could not be encoded.
        """
        where = envelope.queue if queue is None else queue
        headers = topology.dead_letter_headers(
            reason, queue=where, attempt=envelope.attempt, dead_at=int(time.time() * 1000)
        )
        props = properties(envelope, headers)
        pub = Pub("", topology.dead_letter_name(where), envelope.encode(), props)
        self._send([check_encodable(pub)])

    def publish_raw_dead_letter(
        self, queue: str, body: bytes, reason: str, *, message_id: str | None = None
    ) -> None:
        """The poison path: ``body`` unchanged to the dead-letter queue of ``queue``.

        Nothing of the original message but its body (and a printable message id) is
        kept, and every header is plain ASCII: this publish cannot fail on content.
        """
        headers = topology.dead_letter_headers(reason, queue=queue, dead_at=int(time.time() * 1000))
        props = BasicProperties(delivery_mode=2, message_id=message_id, headers=headers)
        self._send([check_encodable(Pub("", topology.dead_letter_name(queue), bytes(body), props))])

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

    def list_dead_letters(self, queue: str, *, limit: int | None = None) -> list[AnyDeadLetter]:
        """See :meth:`DeadLetterTools.list_dead_letters`.

        Takes the messages unacked, then gives them all back with one multiple nack, so
        nothing is lost or reordered. Messages that are not queuey envelopes are listed
        as :class:`UndecodableDeadLetter`.
        """

        def work(ch: BlockingChannel) -> list[AnyDeadLetter]:
            return [d for _, d in get_all(ch, topology.holding_queue(queue), limit)]

        return self._admin.run(work)

    def requeue_dead_letters(self, queue: str, job_ids: Sequence[str] | None = None) -> int:
        """See :meth:`DeadLetterTools.requeue_dead_letters`: confirmed on ``queue`` before removal.

        Undecodable messages are never requeued (they would be dead-lettered again).
        ``queue`` may be :data:`topology.UNROUTABLE`: each goes to the queue its envelope
        names, if that exists now.
        """
        wanted = None if job_ids is None else set(job_ids)
        return self._admin.run(lambda ch: requeue(ch, queue, wanted))

    def delete_dead_letters(self, queue: str, handles: Sequence[str]) -> int:
        """See :meth:`DeadLetterTools.delete_dead_letters`: the rest go back, in order."""
        wanted = set(handles)

        def work(ch: BlockingChannel) -> int:
            got = get_all(ch, topology.holding_queue(queue), None, give_back=False)
            doomed = [tag for tag, d in got if d.handle in wanted]
            for tag in doomed:
                ch.basic_ack(tag)
            ch.basic_recover(requeue=True)
            return len(doomed)

        return self._admin.run(work)

    def purge_dead_letters(self, queue: str) -> int:
        """See :meth:`DeadLetterTools.purge_dead_letters`."""
        frame = self._admin.run(lambda ch: ch.queue_purge(topology.holding_queue(queue)))
        return int(frame.method.message_count)

    def queue_counts(self, queue: str) -> tuple[int, int]:
        """``(ready messages, consumers)`` of ``queue``, as RabbitMQ reports them."""
        frame = self._admin.run(lambda ch: ch.queue_declare(queue, passive=True))
        return int(frame.method.message_count), int(frame.method.consumer_count)

    def unroutable_count(self) -> int:
        """Messages in :data:`topology.UNROUTABLE` (none while it does not exist yet)."""

        def work(ch: BlockingChannel) -> int:
            try:
                frame = ch.queue_declare(topology.UNROUTABLE, passive=True)
            except pika.exceptions.ChannelClosedByBroker as exc:
                if exc.reply_code == 404:
                    return 0
                raise
            return int(frame.method.message_count)

        return self._admin.run(work)

    def inspect(self, names: Sequence[str]) -> Inspection:
        """See :meth:`Inspectable.inspect`: a missing queue is None, never NOT_FOUND."""
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
            args = self._link_args("control")
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
        return RabbitScheduleState(self._urls, connect_timeout=self._connect_timeout)

    def election(self, *, heartbeat: int) -> RabbitElection:
        """See :meth:`SupportsSchedules.election`: a candidate on a connection of its own."""
        return RabbitElection(
            self._urls,
            heartbeat=heartbeat,
            connect_timeout=self._connect_timeout,
            recovery_timeout=self._recovery_timeout,
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
            links: list[Link] = [
                link for link in (self._consumer, self._publisher) if link is not None
            ]
            links += self._controls
        for link in links:
            link.close()
        self._direct.close()
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

    def _deadline(self) -> Deadline:
        return Deadline(self.publish_timeout, self._recovery_timeout)

    def _send(self, pubs: list[Pub]) -> None:
        """Publish ``pubs`` and wait for their confirms, all under one deadline."""
        deadline = self._deadline()
        if self.is_closed():
            self._handing_to_link(lambda: pubs, deadline)  # raises
        if len(pubs) == 1 and self._direct_is_worth_it():
            try:
                how = self._direct.try_publish(pubs[0], deadline)
            except (NotEnqueuedError, EnqueueUnknownError) as exc:
                error = exc
                raise_for(pubs, lambda _pub: error)
            if how is Direct.CONFIRMED:
                return
            # Not sent, or sent and lost with its connection: the link (re)publishes it.
            pubs[0].sent = how is Direct.LOST
        link = self._handing_to_link(lambda: pubs, deadline)
        try:
            link.publish(pubs)
        except BackendError as exc:
            self._refused_by_link([], pubs, exc, deadline, link)
        wait_for(pubs, deadline, link, self.where)

    def _direct_is_worth_it(self) -> bool:
        """Whether a lone publish should try the caller's own connection first.

        Not while the publisher link has no connection (the broker is away: the direct
        connection would fail too, maybe only after a connect timeout) or is blocked.
        """
        link = self._publisher
        return link is None or (link.is_up and not link.blocked)

    def _handing_to_link(self, pubs: Callable[[], list[Pub]], deadline: Deadline) -> PublisherLink:
        """The publisher link, watched by ``deadline``; on a closed backend, raise for
        the messages ``pubs`` gives (none was sent)."""
        try:
            link = self._publisher_link()
        except BackendError as exc:
            never = NotEnqueuedError(str(exc), reason=PublishFailure.CLOSED)
            lost = EnqueueUnknownError(str(exc), reason=PublishFailure.CLOSED)
            raise_for(pubs(), lambda pub: lost if pub.sent else never)
        deadline.watch(link)
        return link

    def _refused_by_link(
        self,
        handed: list[Pub],
        unsent: list[Pub],
        error: BackendError,
        deadline: Deadline,
        link: PublisherLink,
    ) -> NoReturn:
        """Raise for a call whose ``unsent`` messages the link would not take (it died, or
        the backend closed). It fails everything it held (``handed``) as it goes."""
        handed_outcome = settle(handed, deadline, link, self.where)
        reason = PublishFailure.CLOSED if self.is_closed() else PublishFailure.UNREACHABLE
        never = NotEnqueuedError(str(error), reason=reason)
        # Sent on the direct connection, lost with it, and now not republished.
        lost = EnqueueUnknownError(str(error), reason=PublishFailure.LOST)
        refused = {id(pub) for pub in unsent}

        def outcome(pub: Pub) -> BaseException | None:
            if id(pub) in refused:
                return lost if pub.sent else never
            return handed_outcome(pub)

        raise_for([*handed, *unsent], outcome)

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

    def _picker(self, role: str, *, blocked_timeout: bool = True) -> Picker:
        """A connection's way through the nodes, with its parameters for each node.

        Without ``blocked_timeout``, a connection blocked by the broker (an alarm) is held
        rather than torn down after a while: the caller's deadline bounds its waits.
        """
        return self._nodes.picker(lambda url: self._params_for(url, role, blocked_timeout))

    def _params_for(self, url: str, role: str, blocked_timeout: bool) -> pika.ConnectionParameters:
        try:
            params = pika.URLParameters(url)
        except Exception as exc:
            # The message of a URL error may quote the URL: keep the password out.
            raise ConfigError(f"invalid broker URL {redact(url)!r}") from exc
        params.heartbeat = self._heartbeat
        if blocked_timeout:
            params.blocked_connection_timeout = max(self.publish_timeout, 30.0)
        params.connection_attempts = 1
        params.socket_timeout = self._connect_timeout
        params.client_properties = {"connection_name": f"queuey {role} {_whoami()}"}
        if params.ssl_options is not None:  # amqps://
            if self._ssl_context is None:
                self._ssl_context = ssl.create_default_context()
            # pika's own default names no server, and a verifying context needs one.
            params.ssl_options = pika.SSLOptions(
                self._ssl_context, self._server_name or params.host
            )
        elif self._ssl_context is not None:
            raise ConfigError(
                f"an SSL context was given for {redact(url)!r}: TLS needs an amqps:// URL"
            )
        return params

    def _publisher_link(self) -> PublisherLink:
        with self._lock:
            if self._closed:
                raise BackendError("the RabbitMQ backend is closed")
            if self._publisher is None or self._publisher.is_dead:
                if self._publisher is not None:
                    self._republished_before += self._publisher.republished
                # The broker was reached when this backend was made: a publisher that
                # cannot connect is facing an outage, and waits for it as long as a lost
                # connection would. A blocked connection is held, not torn down: the
                # caller's deadline bounds the wait (see confirms.Deadline).
                args = self._link_args("publisher", blocked_timeout=False)
                self._publisher = PublisherLink(**args, patient=True)
                self._publisher.start(wait=False)
            return self._publisher

    def _consumer_link(self) -> ConsumerLink:
        with self._lock:
            if self._closed:
                raise BackendError("the RabbitMQ backend is closed")
            if self._consumer is None or self._consumer.is_dead:
                self._consumer = ConsumerLink(**self._link_args("consumer"))
                self._consumer.start()
            return self._consumer

    def _link_args(self, role: str, *, blocked_timeout: bool = True) -> dict[str, Any]:
        return {
            "nodes": self._picker(role, blocked_timeout=blocked_timeout),
            "name": role,
            "where": self.where,
            "connect_timeout": self._connect_timeout,
            "recovery_timeout": self._recovery_timeout,
        }

    # -- observability -----------------------------------------------------------------

    def connection_status(self) -> dict[str, LinkStatus]:
        """The consumer and publisher connections opened so far, by role: their state,
        reconnections and I/O thread (for health checks and metrics; never blocks)."""
        with self._lock:
            links = {"consumer": self._consumer, "publisher": self._publisher}
        return {role: link.status() for role, link in links.items() if link is not None}


def _whoami() -> str:
    """Who opens a connection, for the management UI: the machine, the process (read
    at each call: a forked child is another process), the version."""
    return f"host={socket.gethostname()} pid={os.getpid()} v={__version__}"
