"""The consumer link: the connection every consumer channel of a backend shares.

Owns: the link's subscriptions (re-opened after a recovery, ended when the link gives
up or closes), the reader of each connection's deliveries (:mod:`.delivery_frames`),
sending the acks job threads ask for (a batch of them coalesced into one
``multiple`` ack where :mod:`.acks` says it is safe), and the dead-letterer thread that
moves bodies that are not envelopes to the dead-letter queue (the poison path of
:mod:`.delivery`: that publish waits for a confirm, so it must not run on the link's
thread). One subscription per queue: :mod:`.subscription`.
Must never: block the link's thread, or send an ack on a channel that is not its
delivery's current one (it is refused: the broker redelivers).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

from pika.channel import Channel

from queuey_core.backends.rabbitmq.acks import Unsettled
from queuey_core.backends.rabbitmq.delivery import STALE, Undecodable
from queuey_core.backends.rabbitmq.delivery_frames import DeliveryReader
from queuey_core.backends.rabbitmq.link import Link
from queuey_core.backends.rabbitmq.result import LinkStatus, Result
from queuey_core.errors import BackendError, ConsumerStoppedError


class Subscriber(Protocol):
    """What the consumer link needs of each of its subscriptions (:mod:`.subscription`)."""

    #: The current channel; None once the connection is lost.
    channel: Channel | None

    @property
    def queue(self) -> str:
        """The queue consumed."""

    @property
    def active(self) -> bool:
        """Not cancelled nor ended: re-opened after a recovery."""

    @property
    def consuming(self) -> bool:
        """Whether RabbitMQ is delivering from the queue on the current channel."""

    @property
    def unsettled(self) -> Unsettled:
        """The current channel's unsettled delivery tags."""

    def is_current(self, ch: Channel) -> bool:
        """Whether ``ch`` is the subscription's current channel."""

    def open_channel(self, conn: Any) -> None:
        """Open a channel on ``conn`` and consume on it."""

    def end(self, error: ConsumerStoppedError) -> None:
        """End for good, telling the sink why."""


logger = logging.getLogger(__name__)


class ConsumerLink(Link):
    """Owns every consumer channel; re-subscribes them after a recovery."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.subscriptions: list[Subscriber] = []
        self.dead_letterer = DeadLetterer()
        #: Reads the current connection's deliveries (the link's thread; a new one with
        #: each connection).
        self.reader: DeliveryReader | None = None

    @property
    def connection(self) -> Any:
        return self._conn

    def ack(
        self,
        sub: Subscriber,
        channel: Channel,
        tag: int,
        failed: Callable[[BackendError], None] | None = None,
    ) -> Result[None]:
        """Ack ``tag`` on ``channel`` soon (any thread); the result says once it is sent.

        Acks handed over together are sent together at the end of the batch, coalesced
        where :meth:`Unsettled.plan` allows; any other request in the batch sends the acks
        before it first, so nothing is reordered across a nack, a reject or a close.
        ``failed`` is called with the error if the ack cannot be sent (on the link's
        thread, or on this one when the link takes nothing more).
        """
        pending = PendingAck(sub, channel, tag, failed)
        self._hand_over(pending)
        return pending.result

    def ack_soon(
        self,
        sub: Subscriber,
        channel: Channel,
        tag: int,
        failed: Callable[[BackendError], None],
    ) -> None:
        """:meth:`ack` for a caller that never waits: only ``failed`` hears of a failure.

        One per job: it spares the result (a lock, taken at once) nobody would read.
        """
        self._hand_over(PendingAck(sub, channel, tag, failed, _UNWATCHED))

    def _hand_over(self, pending: PendingAck) -> None:
        if self.on_own_thread():
            pending()  # waiting on ourselves would never end
            return
        try:
            self.submit(pending)
        except BackendError as exc:
            pending.fail(exc)

    def run_batch(self, batch: list[Any]) -> None:
        acks: list[PendingAck] = []
        for fn in batch:
            if type(fn) is PendingAck:
                acks.append(fn)
                continue
            if acks:
                send_acks(acks)
                acks = []
            fn()
        if acks:
            send_acks(acks)

    def status(self) -> LinkStatus:
        """See :meth:`Link.status`; an open link also names the queues RabbitMQ is not
        delivering from (their consume unanswered, or refused and asked again)."""
        status = super().status()
        if status.state != "open":
            return status
        waiting = tuple(s.queue for s in list(self.subscriptions) if s.active and not s.consuming)
        return status._replace(unanswered=waiting)

    def on_open(self, conn: Any) -> None:
        self.reader = DeliveryReader(conn)
        for sub in list(self.subscriptions):
            if sub.active:
                sub.open_channel(conn)

    def on_lost(self, reason: BaseException) -> None:
        for sub in self.subscriptions:
            sub.channel = None  # settles for its deliveries are refused from now on

    def on_gave_up(self, error: BackendError) -> None:
        self.dead_letterer.stop()
        for sub in list(self.subscriptions):
            sub.end(ConsumerStoppedError(sub.queue, str(error)))

    def on_closing(self) -> None:
        self.dead_letterer.stop()
        for sub in list(self.subscriptions):
            sub.end(ConsumerStoppedError(sub.queue, "the backend was closed"))


class PendingAck:
    """An ack a job thread asked for, waiting for the end of the link's batch."""

    __slots__ = ("channel", "failed", "result", "sub", "tag")

    def __init__(
        self,
        sub: Subscriber,
        channel: Channel,
        tag: int,
        failed: Callable[[BackendError], None] | None = None,
        result: Result[None] | None = None,
    ) -> None:
        self.sub = sub
        self.channel = channel
        self.tag = tag
        self.failed = failed
        self.result: Result[None] = Result() if result is None else result

    def fail(self, error: BackendError) -> None:
        """The ack could not be sent: tell whoever waits, or whoever asked to be told."""
        self.result.fail(error)
        if self.failed is not None:
            try:
                self.failed(error)
            except Exception:  # must not end the link's thread
                logger.exception("an ack failure callback failed")

    def __call__(self) -> None:  # run on its own (the link's own thread asked)
        send_acks([self])


#: The result of an ack nobody waits for: already done, so setting it does nothing.
_UNWATCHED: Result[None] = Result()
_UNWATCHED.set(None)


def send_acks(acks: list[PendingAck]) -> None:
    """Send ``acks`` (the link's thread): per channel, one multiple ack for the run at
    the front of its unsettled tags and single acks for the rest; settle each result."""
    by_sub: dict[Subscriber, list[PendingAck]] = {}
    for pending in acks:
        by_sub.setdefault(pending.sub, []).append(pending)
    for sub, mine in by_sub.items():
        current = [p for p in mine if sub.is_current(p.channel) and p.channel.is_open]
        if len(current) < len(mine):
            gone = BackendError(STALE)
            for p in mine:
                if not (sub.is_current(p.channel) and p.channel.is_open):
                    p.fail(gone)
        if not current:
            continue
        ch = current[0].channel
        plan = sub.unsettled.plan(p.tag for p in current)
        sent: set[int] = set()
        try:
            if plan.multiple is not None:
                ch.basic_ack(plan.multiple, multiple=True)
                alone = set(plan.singles)
                sent.update(p.tag for p in current if p.tag not in alone)
            for tag in plan.singles:
                ch.basic_ack(tag)
                sent.add(tag)
        except Exception as exc:
            # The channel is going away mid-batch: what was not sent is redelivered.
            error = BackendError(f"{STALE} ({type(exc).__name__})")
            for p in current:
                if p.tag not in sent:
                    p.fail(error)
        for p in current:
            p.result.set(None)  # no-op for those that failed


class DeadLetterer:
    """A thread that dead-letters undecodable messages, off the link's thread.

    One at a time, in arrival order: a flood of garbage holds at most each channel's
    prefetch, and never more than one thread.
    """

    _STOP = None

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Undecodable, str] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, message: Undecodable, reason: str) -> None:
        """Dead-letter ``message`` with ``reason`` soon; never blocks."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="queuey-dead-letterer", daemon=True
                )
                self._thread.start()
        self._queue.put((message, reason))

    def stop(self) -> None:
        """Let the thread end once it has done what it was given."""
        with self._lock:
            if self._thread is not None:
                self._queue.put(self._STOP)
                self._thread = None

    def _run(self) -> None:
        while (item := self._queue.get()) is not self._STOP:
            message, reason = item
            try:
                message.dead_letter(reason)
            except Exception:  # logged by the delivery; the broker redelivers it
                logger.debug("undecodable message left to RabbitMQ", exc_info=True)
