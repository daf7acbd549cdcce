"""Moving a file's jobs and dead letters to another backend: every job arrives once,
with what remains of its delay, and every dead letter with its reason and attempt."""

from __future__ import annotations

from pathlib import Path

from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import QueueConfig
from queuey_core.backends.capabilities import DeadLetter
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite.migrate import migrate
from queuey_core.envelope import Envelope
from tests.support import dead_letter_one
from tests.support import named_envelope

Q = QueueConfig("jobs", prefetch=2, max_priority=5)


class Broker(MemoryBackend):
    """A MemoryBackend that takes dead letters as RabbitMQBackend does."""

    def publish_dead_letter(
        self, envelope: Envelope, reason: str, *, queue: str | None = None
    ) -> None:
        where = self._queue(queue or envelope.queue)
        where.dead.append(DeadLetter(envelope, reason, 0, str(envelope.job_id)))

    def publish_raw_dead_letter(
        self, queue: str, body: bytes, reason: str, *, message_id: str | None = None
    ) -> None:
        raise AssertionError("no undecodable dead letter in this test")


def envelope(name: str, attempt: int = 1) -> Envelope:
    return named_envelope(Q.name, name, attempt=attempt)


def test_jobs_and_dead_letters_move_once_with_their_delays_and_reasons(tmp_path: Path) -> None:
    clock = ManualClock()
    source = SqliteBackend(f"sqlite:///{tmp_path}/q.db", clock=clock)
    source.declare([Q])
    doomed = envelope("doomed", attempt=3)
    source.publish(doomed)
    dead_letter_one(source, Q, "fatal error: no")
    for i in range(3):
        source.publish(envelope(f"r{i}"))
    source.publish(envelope("later"), delay=30)

    target_clock = ManualClock()
    target = Broker(clock=target_clock)
    moved = migrate(source, target, [Q])
    assert (moved.jobs, moved.held, moved.dead_letters, moved.left_running) == (4, 1, 1, 0)
    assert target.pending(Q.name) == 3
    assert target.held(Q.name) == 1, "the delayed job keeps what remains of its delay"
    target_clock.advance(30)
    assert target.pending(Q.name) == 4
    [dead] = target.dead_letters(Q.name)
    assert (dead.envelope, dead.reason) == (doomed, "fatal error: no")
    counts = source.counts([Q.name])[Q.name][0]
    assert (counts.ready, counts.held) == (0, 0)
    assert source.list_dead_letters(Q.name) == []
    assert migrate(source, target, [Q]).jobs == 0, "a second run moves nothing again"
    source.close()
