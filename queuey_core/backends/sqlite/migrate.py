"""Moving what a queuey file holds to a broker: jobs waiting or held, and dead letters.

The envelope is the same on every backend, so a job moves as it is (its trace context
too, beside it): published to the
target with what remains of its delay, then deleted from the file once the target
confirmed it (a crash in between leaves it in both: at least once, never lost). A
dead letter moves to the target's dead-letter queue with its reason and attempt (its
``dead_at`` becomes the time of the move). Jobs leased by a live worker are left where
they are, and counted: stop the workers on the file first, or run the move again once
they settled. Owns: the order of the move. Must never: delete a row the target did not
confirm.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from queuey_core.backends.base import Backend
from queuey_core.backends.capabilities import DeadLetter
from queuey_core.backends.sqlite import dead
from queuey_core.backends.sqlite.backend import SqliteBackend
from queuey_core.envelope import Envelope
from queuey_core.errors import DecodeError, MissingCapabilityError
from queuey_core.queues import QueueConfig
from queuey_core.trace_context import TraceContext

logger = logging.getLogger(__name__)

#: Jobs published to the target per confirmed batch.
BATCH = 500


@runtime_checkable
class TakesDeadLetters(Protocol):
    """A target that can be handed dead letters (RabbitMQBackend can)."""

    def publish_dead_letter(
        self, envelope: Envelope, reason: str, *, queue: str | None = None
    ) -> None:
        """Put ``envelope`` in the dead-letter queue of ``queue``, with ``reason``."""

    def publish_raw_dead_letter(
        self, queue: str, body: bytes, reason: str, *, message_id: str | None = None
    ) -> None:
        """Put ``body`` (not an envelope) in the dead-letter queue of ``queue``."""


@dataclass(frozen=True, slots=True)
class Moved:
    """What a move did: jobs moved (of them, held for a delay), dead letters moved, and
    jobs left because a live worker holds them."""

    jobs: int
    held: int
    dead_letters: int
    left_running: int


def migrate(source: SqliteBackend, target: Backend, queues: Sequence[QueueConfig]) -> Moved:
    """Move the jobs and dead letters of ``queues`` from ``source`` to ``target``.

    Raises:
        BackendError: the file or the target failed; what was confirmed before is moved,
            the rest is still in the file (run it again).
    """
    if not isinstance(target, TakesDeadLetters):
        raise MissingCapabilityError(
            f"{type(target).__name__} cannot take dead letters: move to a RabbitMQ broker"
        )
    target.declare(queues)
    jobs = held = buried = 0
    for config in queues:
        while True:
            now = source._clock.wall_ms()
            with source._db.read() as conn:
                rows = conn.execute(
                    "SELECT id, available_at, body, traceparent, tracestate FROM queuey_messages "
                    "WHERE queue = ? AND (lease_owner IS NULL OR lease_expires < ?) "
                    "ORDER BY priority DESC, available_at, id LIMIT ?",
                    (config.name, now, BATCH),
                ).fetchall()
            if not rows:
                break
            items: list[tuple[Envelope, float | None]] = []
            for _, available_at, body, traceparent, tracestate in rows:
                try:
                    envelope = Envelope.decode(body)
                    if traceparent is not None:  # carried on, in the target's headers
                        trace = TraceContext.parse(traceparent, tracestate)
                        envelope = envelope.with_trace(trace)
                except DecodeError:
                    envelope = None
                wait = max(0, available_at - now) / 1000
                if envelope is not None:
                    items.append((envelope.model_copy(update={"queue": config.name}), wait or None))
            target.publish_many(items)
            with source._db.write() as conn:
                conn.executemany(
                    "DELETE FROM queuey_messages WHERE id = ? AND "
                    "(lease_owner IS NULL OR lease_expires < ?)",
                    [(row[0], now) for row in rows],
                )
            jobs += len(items)
            held += sum(1 for _, wait in items if wait)
        buried += _move_dead(source, target, config.name)
    with source._db.read() as conn:
        running = int(
            conn.execute(
                "SELECT count(*) FROM queuey_messages WHERE lease_owner IS NOT NULL "
                "AND lease_expires >= ?",
                (source._clock.wall_ms(),),
            ).fetchone()[0]
        )
    return Moved(jobs, held, buried, running)


def _move_dead(source: SqliteBackend, target: Backend, queue: str) -> int:
    with source._db.read() as conn:
        listed = dead.listed(conn, queue)
        bodies = {
            row[0]: bytes(row[1])
            for row in conn.execute("SELECT id, body FROM queuey_dead WHERE queue = ?", (queue,))
        }
    assert isinstance(target, TakesDeadLetters)  # checked before anything moved
    for row_id, letter in listed:
        if isinstance(letter, DeadLetter):
            target.publish_dead_letter(letter.envelope, letter.reason, queue=queue)
        else:
            handle = None if letter.handle.startswith("#") else letter.handle
            target.publish_raw_dead_letter(queue, bodies[row_id], letter.reason, message_id=handle)
        with source._db.write() as conn:
            conn.execute("DELETE FROM queuey_dead WHERE id = ?", (row_id,))
    return len(listed)
