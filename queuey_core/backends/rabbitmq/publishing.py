"""Publishing for RabbitMQBackend: the caller's own connection or the publisher link.

Owns: the publisher link (made on first use, made again once dead), the direct
publisher, and the choice between them: a lone publish tries the caller's own
connection first (:mod:`.direct`) while the link is up and not blocked, and hands over
to the link whatever that could not settle; batches always go to the link, in chunks
encoded as they are handed over. Every call has one deadline (:class:`Deadline`), and
every message it held gets an outcome (confirmed, not enqueued, or unknown).
Must never: wait on the broker past the deadline, or report a message that may be on
the broker as surely not enqueued.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import NoReturn

from queuey_core.backends.rabbitmq.confirms import Deadline, raise_for, settle, wait_for
from queuey_core.backends.rabbitmq.connection import ConnectionPlan
from queuey_core.backends.rabbitmq.direct import Direct, DirectPublisher
from queuey_core.backends.rabbitmq.messages import Pub, pub_for
from queuey_core.backends.rabbitmq.publisher import PublisherLink
from queuey_core.envelope import EncodedEnvelope, Envelope
from queuey_core.errors import (
    BackendError,
    EnqueueUnknownError,
    NotEnqueuedError,
    PublishFailure,
)

#: Messages handed to the publisher's thread at a time by publish_many.
_CHUNK = 200

#: Where a message goes: (exchange, routing key).
Route = tuple[str, str]


class Publishing:
    """The publishing half of one backend. Thread-safe."""

    def __init__(self, plan: ConnectionPlan, *, publish_timeout: float) -> None:
        self._plan = plan
        self._publish_timeout = publish_timeout
        self._lock = threading.Lock()
        self._link: PublisherLink | None = None
        self._republished_before = 0
        self._closed = False
        # The caller's deadline bounds a direct publish, blocked or not.
        direct = plan.picker("direct publisher", blocked_timeout=False)
        self._direct = DirectPublisher(direct, plan.heartbeat)

    @property
    def republished(self) -> int:
        """Messages published again after a lost connection, over the backend's life."""
        with self._lock:
            link, before = self._link, self._republished_before
        return before + (link.republished if link is not None else 0)

    @property
    def link(self) -> PublisherLink | None:
        """The publisher link, if one was made (for connection reports)."""
        with self._lock:
            return self._link

    def send(self, pubs: list[Pub]) -> None:
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
        wait_for(pubs, deadline, link, self._plan.where)

    def send_many(
        self,
        items: Sequence[tuple[Envelope | EncodedEnvelope, float | None]],
        routes: Sequence[Route],
    ) -> None:
        """Publish ``items`` to their ``routes``: one batch, a window of confirms, one
        deadline; encoded in chunks as they are handed over."""
        self.hand_over(items, routes)()

    def hand_over(
        self,
        items: Sequence[tuple[Envelope | EncodedEnvelope, float | None]],
        routes: Sequence[Route],
    ) -> Callable[[], None]:
        """:meth:`send_many` in two steps: ``items`` are handed to the publisher's thread
        now (after those of every call that returned before), and the call returned waits for their
        confirms, raising as :meth:`send_many` does. A failure while they are handed
        over is raised here."""
        deadline = self._deadline()
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
        return lambda: wait_for(pubs, deadline, link, self._plan.where)

    def is_closed(self) -> bool:
        """Whether :meth:`close` was called."""
        with self._lock:
            return self._closed

    def close(self) -> None:
        """Close the link and the direct connection; every later publish is refused."""
        with self._lock:
            self._closed = True
            link = self._link
        if link is not None:
            link.close()
        self._direct.close()

    def _deadline(self) -> Deadline:
        return Deadline(self._publish_timeout, self._plan.recovery_timeout)

    def _direct_is_worth_it(self) -> bool:
        """Whether a lone publish should try the caller's own connection first.

        Not while the publisher link has no connection (the broker is away: the direct
        connection would fail too, maybe only after a connect timeout) or is blocked.
        """
        link = self._link
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
        handed_outcome = settle(handed, deadline, link, self._plan.where)
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

    def _publisher_link(self) -> PublisherLink:
        with self._lock:
            if self._closed:
                raise BackendError("the RabbitMQ backend is closed")
            if self._link is None or self._link.is_dead:
                if self._link is not None:
                    self._republished_before += self._link.republished
                # The broker was reached when this backend was made: a publisher that
                # cannot connect is facing an outage, and waits for it as long as a lost
                # connection would. A blocked connection is held, not torn down: the
                # caller's deadline bounds the wait (see confirms.Deadline).
                args = self._plan.link_args("publisher", blocked_timeout=False)
                self._link = PublisherLink(**args, patient=True)
                self._link.start(wait=False)
            return self._link
