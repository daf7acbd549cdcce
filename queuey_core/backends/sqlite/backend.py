"""The embedded backend: queuey on a SQLite file, no server.

Every job is a row of ``queuey_messages``; a worker claims the best rows of its queue
(highest priority, then first available, then first inserted) with ``BEGIN IMMEDIATE``
and one ``UPDATE ... RETURNING``, which leases them to this backend for ``lease``
seconds. The backend's thread renews its leases while the process lives; a process that
dies (``kill -9``) stops renewing, and its rows become claimable again when their
leases expire, flagged ``redelivered``. A delay is an ``available_at`` in the future
(milliseconds, no ladder), a settle deletes the row, and a retry, deferral or dead
letter is written in the same transaction that deletes the original. Several
processes share one file (WAL); none is a server.

Owns: the Backend protocol and its capabilities (dead letters, inspection, control,
schedules, cancels) on one file. Must never: hand one row to two live owners, lose a
row whose settle failed (it is given back), or be used unless a URL names it.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Sequence
from typing import ClassVar

from queuey_core.backends.base import ConsumerEnded, Sink, closed_to_publishing
from queuey_core.backends.capabilities import (
    ControlHandler,
    ControlServer,
    HoldsLeases,
    HoldsUniqueKeys,
    PublishesEncoded,
    SupportsControl,
    SupportsSchedules,
)
from queuey_core.backends.features import Features
from queuey_core.backends.sqlite import messages
from queuey_core.backends.sqlite.cancels import FileCancels
from queuey_core.backends.sqlite.consumer import SqliteDelivery, SqliteSubscription
from queuey_core.backends.sqlite.control import SqliteControl
from queuey_core.backends.sqlite.database import Database, SqliteError
from queuey_core.backends.sqlite.dead_tools import SqliteDeadLetters
from queuey_core.backends.sqlite.features import FEATURES
from queuey_core.backends.sqlite.inspection import FileInspection
from queuey_core.backends.sqlite.options import SqliteOptions, parse_url
from queuey_core.backends.sqlite.pauses import FilePauses
from queuey_core.backends.sqlite.pump import Pump
from queuey_core.backends.sqlite.schedules import SqliteElection, SqliteScheduleState
from queuey_core.backends.sqlite.writes import Writer
from queuey_core.clock import Clock, SystemClock
from queuey_core.envelope import EncodedEnvelope, Envelope
from queuey_core.errors import BackendError, ConfigError, ConsumerStoppedError, DecodeError
from queuey_core.flow.unique_keys import FileUniqueKeys, SqlUniqueKeys
from queuey_core.queues import QueueConfig
from queuey_core.trace_context import TraceContext
from queuey_core.worker.redelivery import MAX_REDELIVERIES

logger = logging.getLogger(__name__)


class SqliteBackend(
    SqliteDeadLetters,
    FileInspection,
    SupportsControl,
    SupportsSchedules,
    PublishesEncoded,
    FileCancels,
    FilePauses,
    HoldsLeases,
    HoldsUniqueKeys,
):
    """A broker in a file. See the module docstring and docs/embedded.md.

    Its capabilities are the class line: every one but :class:`ConnectionReporting` (a
    file has no connection to lose) and :class:`EarlyAck` (a settle is one short
    commit).
    """

    #: What it does differently on purpose (:mod:`.features`).
    features: ClassVar[Features] = FEATURES

    def __init__(self, url: str | SqliteOptions, *, clock: Clock | None = None) -> None:
        self.options = parse_url(url) if isinstance(url, str) else url
        self._clock = clock or SystemClock()
        self._db = Database(self.options)
        #: Who holds this backend's leases: unique per backend, so a process never
        #: mistakes another's rows (or a dead predecessor's) for its own.
        self.owner = uuid.uuid4().hex
        self._lease_ms = int(self.options.lease * 1000)
        self._lock = threading.RLock()
        self._subs: list[SqliteSubscription] = []
        self._tags = 0
        self._abandoned: set[int] = set()
        self._closed = False
        self._pump = Pump(
            self, self._db, self._clock, poll=self.options.poll, lease=self.options.lease
        )
        self._writer = Writer(self._db, self._clock)
        self._unique = SqlUniqueKeys.of_file(
            self._db.write, lambda: self._closed, self._writer.committing, self._db.read
        )
        self._control = SqliteControl(
            self._db, self._clock, lease=self.options.lease, wake=self._pump.wake
        )

    @property
    def path(self) -> str:
        """The file."""
        return self.options.path

    def unique_keys(self) -> FileUniqueKeys:
        """See :class:`HoldsUniqueKeys`: a table of the file, claimed in the publish's
        own transaction (:class:`~queuey_core.flow.unique_keys.ClaimsWithJobs`)."""
        return self._unique

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # -- Backend -------------------------------------------------------------------

    def declare(self, queues: Sequence[QueueConfig]) -> None:
        """See :meth:`Backend.declare`; a conflicting redeclaration is a ConfigError."""
        self._check_open()
        self._writer.declare(queues)

    def publish(self, envelope: Envelope, *, delay: float | None = None) -> None:
        """See :meth:`Backend.publish`: returns once the row is committed."""
        self._check_open_to_publish([envelope.job_id])
        self._writer.publish([(envelope, delay)], deferral=False)
        self._pump.wake()

    def publish_many(self, items: Sequence[tuple[Envelope, float | None]]) -> None:
        """See :meth:`Backend.publish_many`: one transaction, all or nothing."""
        self._check_open_to_publish([e.job_id for e, _ in items])
        self._writer.publish(items, deferral=False)
        self._pump.wake()

    def publish_encoded(self, items: Sequence[tuple[EncodedEnvelope, float | None]]) -> None:
        """See :class:`PublishesEncoded`: the bodies go in as they are."""
        self._check_open_to_publish([e.job_id for e, _ in items])
        self._writer.publish_encoded(items)
        self._pump.wake()

    def defer(self, envelope: Envelope, delay: float) -> None:
        """See :meth:`Backend.defer`."""
        self._check_open_to_publish([envelope.job_id])
        self._writer.publish([(envelope, delay)], deferral=True)
        self._pump.wake()

    def publish_raw(self, queue: str, body: bytes, *, message_id: str | None = None) -> None:
        """Put ``body`` on ``queue`` as it is, as code other than queuey could; a body
        that is not an envelope is dead-lettered when its turn comes."""
        self._check_open_to_publish([])
        self._writer.publish_raw(queue, body, message_id)
        self._pump.wake()

    def consume(self, queue: QueueConfig, sink: Sink) -> SqliteSubscription:
        """See :meth:`Backend.consume`."""
        with self._lock:
            self._check_open()
            if self._writer.queue_info(queue.name) is None:
                raise ConfigError(f"queue {queue.name!r} has not been declared")
            self._tags += 1
            sub = SqliteSubscription(self, queue, sink, f"{self.owner}:{self._tags}")
            self._subs.append(sub)
        # Recorded in the file by the thread's next renewal, at once: consume() itself
        # waits for no lock of the file.
        self._pump.renew_soon()
        self._pump.start()
        return sub

    def close(self) -> None:
        """See :meth:`Backend.close`: consumers end, every lease is given back."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            subs, self._subs = list(self._subs), []
        took_part = self._pump.stop()
        for sub in subs:
            sub.end(
                ConsumerEnded(sub.queue, ConsumerStoppedError(sub.queue, "the backend was closed"))
            )
        failed = self._let_go() if took_part else None  # a reader holds nothing to give
        if failed is not None:
            # The leases run out on their own: nothing is lost, only delayed.
            logger.warning("could not give back leases on close: %s", failed)
        self._db.close()

    # -- HoldsLeases -----------------------------------------------------------------

    def give_back_now(self, *, timeout: float) -> str:
        """See :class:`HoldsLeases`: the thread stops claiming and renewing, and one
        transaction gives every row this backend holds back to the file. Consumers are
        not ended (the process is on its way out); :meth:`close` still closes."""
        outcome: list[BackendError | None] = []

        def let_go() -> None:
            self._pump.stop()
            outcome.append(self._let_go())

        thread = threading.Thread(target=let_go, name="queuey-sqlite-give-back", daemon=True)
        thread.start()
        thread.join(timeout)
        if outcome and outcome[0] is None:
            return "were given back to the file: any worker can take them at once"
        why = str(outcome[0]) if outcome else f"the file did not answer within {timeout:g}s"
        return f"stay leased in the file for up to {self.options.lease:g}s ({why})"

    # -- SupportsControl -------------------------------------------------------------

    def serve_control(self, handler: ControlHandler) -> ControlServer:
        """See :meth:`SupportsControl.serve_control`: requests are rows the thread polls."""
        self._check_open()
        server = self._control.serve(handler)
        self._pump.start()
        return server

    def broadcast_control(self, request: bytes, *, timeout: float) -> list[bytes]:
        """See :meth:`SupportsControl.broadcast_control`."""
        self._check_open()
        return self._control.broadcast(request, timeout=timeout)

    # -- SupportsSchedules -----------------------------------------------------------

    def schedule_state(self) -> SqliteScheduleState:
        """The last fired tick of each schedule, in the file."""
        return SqliteScheduleState(self.options)

    def election(self, *, heartbeat: float) -> SqliteElection:
        """A candidate for the one active scheduler: a leader row with a lease."""
        return SqliteElection(self.options, heartbeat=heartbeat)

    # -- the thread's work (called by Pump) ------------------------------------------

    def _claim_all(self, now: int) -> tuple[bool, int | None]:
        """Claim for every subscription with credit; whether any row came, and when the
        next one is due."""
        with self._lock:
            subs = list(self._subs)
        claimed = False
        due: int | None = None
        for sub in subs:
            credit = sub.credit()
            if credit == 0:
                continue
            with self._db.write() as conn:
                rows = messages.claim(
                    conn,
                    sub.queue,
                    owner=self.owner,
                    now=now,
                    until=now + self._lease_ms,
                    limit=credit,
                )
                if len(rows) < credit:
                    nxt = messages.next_due(conn, sub.queue, owner=self.owner, now=now)
                    if nxt is not None and (due is None or nxt < due):
                        due = nxt
            claimed = claimed or bool(rows)
            for row in rows:
                self._hand_out(sub, row, now)
        return claimed, due

    def _hand_out(self, sub: SqliteSubscription, row: messages.Claimed, now: int) -> None:
        redeliveries = row.claims - 1
        try:
            envelope = Envelope.decode(row.body)
            if row.traceparent is not None:  # none: no trace, no cost
                envelope = envelope.with_trace(TraceContext.parse(row.traceparent, row.tracestate))
        except DecodeError as exc:
            logger.error("undecodable message dead-lettered: %s", exc, extra={"queue": sub.queue})
            self._writer.bury(row, sub.queue, f"{exc}", decodable=False, owner=self.owner)
            return
        if redeliveries >= MAX_REDELIVERIES:
            # Claimed again and again, by processes that died before settling: the
            # count lives in the row, so it survives the processes (as the dispatcher's
            # in-process count cannot).
            reason = f"redelivered {redeliveries} times without being settled"
            logger.error("%s: dead-lettered", reason, extra={"queue": sub.queue})
            self._writer.bury(row, sub.queue, reason, decodable=True, owner=self.owner)
            return
        delivery = SqliteDelivery(self, sub, row.id, envelope, redeliveries > 0)
        if not sub.deliver(delivery):
            self._give_back([row.id])

    def _renew(self) -> None:
        """Extend this backend's leases; a delivery whose row is gone is marked lost."""
        with self._lock:
            subs = list(self._subs)
            abandoned, self._abandoned = self._abandoned, set()
        now = self._clock.wall_ms()
        try:
            with self._db.write() as conn:
                if abandoned:
                    messages.release(conn, owner=self.owner, ids=sorted(abandoned))
                    # Our own commit does not change the file's data_version for us:
                    # without a wake, this process would not claim the rows it gave back.
                    self._pump.wake()
                held = messages.renew(conn, owner=self.owner, until=now + self._lease_ms)
                self._writer.consumer_seen([(s.tag, s.queue) for s in subs], conn)
                self._control.seen(conn, now)
        except BackendError:
            with self._lock:
                self._abandoned |= abandoned
            raise
        for sub in subs:
            for delivery in list(sub.unsettled.values()):
                if delivery.row_id not in held and not delivery.settled:
                    delivery.lost = True

    def _serve_control(self, now: int) -> None:
        self._control.answer(now)

    def _end_consumers(self, exc: BackendError) -> None:
        with self._lock:
            subs, self._subs = list(self._subs), []
        for sub in subs:
            sub.end(ConsumerEnded(sub.queue, ConsumerStoppedError(sub.queue, str(exc))))

    # -- settling (called by deliveries and subscriptions) -----------------------------

    def _settle(
        self,
        delivery: SqliteDelivery,
        *,
        dead: str | None = None,
        replacement: tuple[Envelope, float, bool] | None = None,
    ) -> None:
        if delivery.settled:
            raise BackendError("delivery was already settled")
        if delivery.sub.closed:
            raise BackendError("the delivery's consumer is closed; the broker took it back")
        self._check_open()
        try:
            self._writer.settle(delivery, owner=self.owner, dead=dead, replacement=replacement)
        except SqliteError:
            # Not settled: give the row back now rather than renew it for ever.
            with self._lock:
                self._abandoned.add(delivery.row_id)
            delivery.settled = True
            delivery.sub.settled(delivery)
            self._pump.wake()
            raise
        except BackendError:
            delivery.lost = True
            delivery.sub.settled(delivery)
            raise
        delivery.settled = True
        delivery.sub.settled(delivery)
        self._pump.wake()

    def _forget(self, sub: SqliteSubscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)
        if not self._closed:
            try:
                with self._db.write() as conn:
                    conn.execute("DELETE FROM queuey_consumers WHERE owner = ?", (sub.tag,))
            except BackendError as exc:
                logger.warning("could not remove a consumer's record: %s", exc)

    def _give_back(self, ids: list[int]) -> None:
        if not ids or self._closed:
            return
        try:
            with self._db.write() as conn:
                messages.release(conn, owner=self.owner, ids=ids)
        except BackendError:
            with self._lock:
                self._abandoned.update(ids)
        self._pump.wake()

    # -- internals -------------------------------------------------------------------

    def _let_go(self) -> BackendError | None:
        """Give back every row this backend holds and drop its records from the file;
        the error if the file refused (the leases then run out on their own)."""
        try:
            with self._db.write() as conn:
                messages.release(conn, owner=self.owner)
                conn.execute(
                    "DELETE FROM queuey_consumers WHERE owner LIKE ?", (f"{self.owner}:%",)
                )
                self._control.forget(conn)
        except BackendError as exc:
            return exc
        return None

    def _check_open(self) -> None:
        if self._closed:
            raise BackendError("the backend is closed")

    def _check_open_to_publish(self, job_ids: list[uuid.UUID]) -> None:
        if self._closed:
            raise closed_to_publishing(job_ids)
