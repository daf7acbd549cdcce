"""Every write of the embedded backend that is more than one statement: declaring,
publishing (with the producer's three outcomes), settling, burying, requeueing.

Owns: turning envelopes into rows (the priority a queue can hold, the ``available_at``
of a delay, in milliseconds of the injected clock) and a failed commit into the right
publish error: surely not written (:class:`NotEnqueuedError`) or maybe written, when
the commit itself was interrupted (:class:`EnqueueUnknownError`). Must never: write a
replacement without deleting its original in the same transaction, or settle a row
this backend no longer holds.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Protocol

from queuey_core.backends.base import closed_to_publishing
from queuey_core.backends.sqlite import dead, messages
from queuey_core.backends.sqlite.acks import GroupAcks
from queuey_core.backends.sqlite.database import Database, SqliteError
from queuey_core.clock import Clock
from queuey_core.envelope import EncodedEnvelope, Envelope
from queuey_core.errors import (
    BackendError,
    ConfigError,
    EnqueueUnknownError,
    NotEnqueuedError,
    PublishFailure,
    UnroutableError,
)
from queuey_core.limits import check_delay
from queuey_core.queues import QueueConfig

logger = logging.getLogger(__name__)

#: A declared queue as the file knows it: (max_priority, kind).
QueueInfo = tuple[int | None, str]


class Leased(Protocol):
    """What a settle needs of a delivery (:class:`SqliteDelivery` is one): declared
    here so that this module never imports the consumer's."""

    @property
    def row_id(self) -> int:
        """The leased row."""

    @property
    def queue(self) -> str:
        """The queue it was claimed from."""

    @property
    def envelope(self) -> Envelope:
        """The job the row holds."""


class Writer:
    """The multi-statement writes of one backend, on its :class:`Database`."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock
        self._lock = threading.Lock()
        self._known: dict[str, QueueInfo] = {}
        self._acks = GroupAcks(db)

    # -- queues ------------------------------------------------------------------

    def declare(self, queues: Sequence[QueueConfig]) -> None:
        """Record ``queues``; a queue recorded with another ``max_priority`` is a
        ConfigError. Its ``kind`` is recorded as first declared and never compared: a
        file keeps one copy of every queue, quorum or not (docs/embedded.md)."""
        recorded: dict[str, QueueInfo] = {}
        with self._db.write() as conn:
            for config in queues:
                found = self.queue_info(config.name, conn)
                if found is None:
                    found = (config.max_priority, str(config.kind))
                    conn.execute(
                        "INSERT INTO queuey_queues (name, max_priority, kind) VALUES (?, ?, ?)",
                        (config.name, *found),
                    )
                elif found[0] != config.max_priority:
                    raise ConfigError(
                        f"queue {config.name!r} already exists with other settings "
                        f"(max_priority={found[0]})"
                    )
                recorded[config.name] = found
        with self._lock:
            self._known.update(recorded)

    def queue_info(self, name: str, conn: sqlite3.Connection | None = None) -> QueueInfo | None:
        """How ``name`` was declared, or None if it never was (cached once found)."""
        with self._lock:
            known = self._known.get(name)
        if known is not None:
            return known
        if conn is None:
            with self._db.read() as read:
                return self.queue_info(name, read)
        row = conn.execute(
            "SELECT max_priority, kind FROM queuey_queues WHERE name = ?", (name,)
        ).fetchone()
        if row is None:
            return None
        info: QueueInfo = (row[0], row[1])
        with self._lock:
            self._known[name] = info
        return info

    # -- publishing --------------------------------------------------------------

    def publish(self, items: Sequence[tuple[Envelope, float | None]], *, deferral: bool) -> None:
        """Write ``items`` in one transaction; raises as :meth:`Backend.publish_many`."""
        ids = [e.job_id for e, _ in items]
        now = self._clock.wall_ms()
        rows = []
        for envelope, delay in items:
            at = self._available_at(now, delay)
            try:
                body = envelope.encode()
            except Exception as exc:
                raise NotEnqueuedError(
                    f"job {envelope.job_id} could not be encoded: {exc}",
                    reason=PublishFailure.UNENCODABLE,
                    not_enqueued=ids,
                ) from exc
            rows.append(self._row(envelope.queue, envelope.priority, at, deferral, envelope, body))
        self._commit_rows(rows, ids)

    def publish_encoded(self, items: Sequence[tuple[EncodedEnvelope, float | None]]) -> None:
        """Write first attempts already encoded, in one transaction."""
        now = self._clock.wall_ms()
        rows = [
            self._row(e.queue, e.priority, self._available_at(now, d), False, None, e.body, e)
            for e, d in items
        ]
        self._commit_rows(rows, [e.job_id for e, _ in items])

    def publish_raw(self, queue: str, body: bytes, message_id: str | None) -> None:
        """Write ``body`` as it is, at priority 0."""
        row = messages.Row(queue, 0, self._clock.wall_ms(), False, message_id, None, bytes(body))
        self._commit_rows([row], [])

    def _available_at(self, now: int, delay: float | None) -> int:
        if delay is None:
            return now
        return now + round(check_delay(delay) * 1000)

    def _row(
        self,
        queue: str,
        priority: int,
        at: int,
        deferral: bool,
        envelope: Envelope | None,
        body: bytes,
        encoded: EncodedEnvelope | None = None,
        conn: sqlite3.Connection | None = None,
    ) -> messages.Row:
        # Inside a write, the queue is looked up on that transaction's connection: a
        # read of its own there would begin a transaction within it.
        info = self.queue_info(queue, conn)
        if info is None:
            raise UnroutableError(f"no queue named {queue!r} has been declared")
        top = info[0]
        level = 0 if top is None else max(0, min(priority, top))
        source = envelope or encoded
        job_id = str(source.job_id) if source is not None else None
        if envelope is None:  # the batch fast path: never traced (the producer sees to it)
            return messages.Row(queue, level, at, deferral, job_id, 1, body)
        # The trace context goes beside the body, never in it (docs/backends.md).
        trace = envelope.trace
        if trace is None:
            return messages.Row(queue, level, at, deferral, job_id, envelope.attempt, body)
        return messages.Row(
            queue,
            level,
            at,
            deferral,
            job_id,
            envelope.attempt,
            body,
            trace.traceparent,
            trace.tracestate or None,
        )

    def _commit_rows(self, rows: list[messages.Row], ids: Sequence[uuid.UUID]) -> None:
        with self.committing(ids) as conn:
            messages.insert(conn, rows)

    @contextlib.contextmanager
    def committing(self, ids: Sequence[uuid.UUID]) -> Iterator[sqlite3.Connection]:
        """A write transaction that publishes the jobs ``ids``, its failure one of the
        producer's outcomes: EnqueueUnknownError when the commit may have happened,
        NotEnqueuedError otherwise. Publishes inside it join it (:meth:`Database.write`)."""
        try:
            with self._db.write() as conn:
                yield conn
        except SqliteError as exc:
            if exc.maybe_committed:
                raise EnqueueUnknownError(
                    str(exc), reason=PublishFailure.LOST, unknown=ids
                ) from None
            if self._db.closed:  # closed since the backend's own check
                raise closed_to_publishing(ids) from None
            raise NotEnqueuedError(
                str(exc), reason=PublishFailure.REFUSED, not_enqueued=ids
            ) from None

    # -- settling ----------------------------------------------------------------

    def settle(
        self,
        delivery: Leased,
        *,
        owner: str,
        dead: str | None,
        replacement: tuple[Envelope, float, bool] | None,
    ) -> None:
        """Delete the delivery's row and write its replacement or dead letter, at once.

        A replacement that cannot be built (a bad delay, an envelope that will not
        encode) dead-letters the original instead, as the RabbitMQ delivery does.

        Raises:
            SqliteError: the file refused; the row is still this backend's.
            BackendError: the lease was lost: another worker holds the row now.
        """
        if replacement is None and dead is None:
            self._acks.ack(delivery.row_id, owner)  # a plain ack: committed in a group
            return
        queue = delivery.queue
        now = self._clock.wall_ms()
        row: messages.Row | None = None
        if replacement is not None:
            next_env, delay, deferral = replacement
            try:
                if next_env.queue != queue:
                    next_env = next_env.model_copy(update={"queue": queue})
                at = self._available_at(now, delay)
                row = self._row(queue, next_env.priority, at, deferral, next_env, next_env.encode())
            except Exception as exc:
                what = "deferral" if deferral else "retry"
                dead = f"could not publish the {what}: {type(exc).__name__}: {exc}"
                logger.error(
                    "%s; dead-lettered the original instead",
                    dead,
                    extra={"queue": queue, "job_id": str(delivery.envelope.job_id)},
                )
        with self._db.write() as conn:
            if not messages.take(conn, delivery.row_id, owner=owner):
                raise BackendError(
                    "the delivery's lease was lost (another worker holds the job now)"
                )
            if row is not None:
                messages.insert(conn, [row])
            elif dead is not None:
                env = delivery.envelope
                trace = env.trace
                self._add_dead(
                    conn,
                    queue,
                    str(env.job_id),
                    dead,
                    now,
                    env.attempt,
                    env.encode(),
                    trace=(trace.traceparent, trace.tracestate or None) if trace else (None, None),
                )

    def bury(
        self, row: messages.Claimed, queue: str, reason: str, *, decodable: bool, owner: str
    ) -> None:
        """Move a claimed row straight to the dead letters (undecodable, or redelivered
        too often), its body as it was."""
        now = self._clock.wall_ms()
        attempt = None
        if decodable:
            attempt = Envelope.decode(row.body).attempt
        try:
            with self._db.write() as conn:
                if messages.take(conn, row.id, owner=owner):
                    handle = row.job_id or ""
                    self._add_dead(
                        conn,
                        queue,
                        handle,
                        reason,
                        now,
                        attempt,
                        bytes(row.body),
                        decodable,
                        trace=(row.traceparent, row.tracestate),
                    )
        except BackendError as exc:
            # Its lease runs out and it comes back to be buried again.
            logger.warning("could not dead-letter a message: %s", exc)

    def _add_dead(
        self,
        conn: sqlite3.Connection,
        queue: str,
        handle: str,
        reason: str,
        now: int,
        attempt: int | None,
        body: bytes,
        decodable: bool = True,
        *,
        trace: tuple[str | None, str | None],
    ) -> None:
        dead.add(
            conn, dead.Dead(queue, handle, reason, now, attempt, queue, decodable, body, *trace)
        )

    def requeue_dead(
        self, queue: str, job_ids: Sequence[str] | None, *, after: int = 0, limit: int | None = None
    ) -> tuple[int, int | None]:
        """Dead letters of ``queue`` back on it at attempt 1, in one transaction (see
        :func:`dead.requeue` for ``after``, ``limit`` and what it returns)."""
        now = self._clock.wall_ms()
        with self._db.write() as conn:

            def put_back(envelope: Envelope) -> None:
                body = envelope.encode()
                row = self._row(queue, envelope.priority, now, False, envelope, body, conn=conn)
                messages.insert(conn, [row])

            return dead.requeue(conn, queue, job_ids, put_back, after=after, limit=limit)

    # -- consumers ---------------------------------------------------------------

    def consumer_seen(
        self, tags: Sequence[tuple[str, str]], conn: sqlite3.Connection | None = None
    ) -> None:
        """Record that the consumers ``tags`` ((tag, queue) pairs) are alive now."""
        if conn is None:
            with self._db.write() as write:
                self.consumer_seen(tags, write)
            return
        now = self._clock.wall_ms()
        conn.executemany(
            "INSERT INTO queuey_consumers (owner, queue, seen_at) VALUES (?, ?, ?) "
            "ON CONFLICT (owner, queue) DO UPDATE SET seen_at = excluded.seen_at",
            [(tag, queue, now) for tag, queue in tags],
        )


def other_consumers(conn: sqlite3.Connection, queue: str, owner: str, since: int) -> int:
    """Consumers of ``queue`` seen since ``since`` (ms) in processes other than ``owner``."""
    return int(
        conn.execute(
            "SELECT count(*) FROM queuey_consumers "
            "WHERE queue = ? AND seen_at >= ? AND owner NOT LIKE ?",
            (queue, since, f"{owner}:%"),
        ).fetchone()[0]
    )
