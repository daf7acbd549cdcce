"""``migrate`` from a SQLite file to a real RabbitMQ: every job arrives once, a held job
goes to the delay ladder with what remains of its delay, and a dead letter keeps its
reason and attempt in the queue's ``.dlq``."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from queuey_core import QueueConfig
from queuey_core.backends.capabilities import DeadLetter
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite.migrate import migrate
from queuey_core.envelope import Envelope
from tests.harness import AMQP_URL
from tests.integration.broker import scratch_queue
from tests.integration.broker import take_job_ids
from tests.support import dead_letter_one

pytestmark = pytest.mark.integration


def envelope(queue: str, name: str, attempt: int = 1) -> Envelope:
    return Envelope(
        job_id=uuid.uuid4(),
        job_type="t.job",
        queue=queue,
        attempt=attempt,
        enqueued_at=int(time.time() * 1000),
        payload={"name": name},
    )


def test_a_file_moves_to_rabbitmq_jobs_held_jobs_and_dead_letters(tmp_path: Path) -> None:
    with scratch_queue("migrate") as name:
        q = QueueConfig(name, prefetch=4)
        source = SqliteBackend(f"sqlite:///{tmp_path}/q.db")
        source.declare([q])
        doomed = envelope(name, "doomed", attempt=2)
        source.publish(doomed)
        dead_letter_one(source, q, "fatal error: no")
        ready = [envelope(name, f"r{i}") for i in range(3)]
        for e in ready:
            source.publish(e)
        later = envelope(name, "later")
        source.publish(later, delay=3)

        target = RabbitMQBackend(AMQP_URL, publish_timeout=10)
        try:
            moved = migrate(source, target, [q])
            assert (moved.jobs, moved.held, moved.dead_letters) == (4, 1, 1)
            [dead] = [d for d in target.list_dead_letters(name) if isinstance(d, DeadLetter)]
            assert (dead.envelope, dead.reason) == (doomed, "fatal error: no")
            assert target.held_count() >= 1, "the held job waits in the ladder"
            deadline = time.monotonic() + 30
            while target.queue_counts(name)[0] < 4:  # it comes out of the ladder
                assert time.monotonic() < deadline, "the held job never arrived"
                time.sleep(0.1)
        finally:
            target.close()
        arrived = sorted(take_job_ids(name))
        assert arrived == sorted(e.job_id for e in [*ready, later]), "each job once"
        counts = source.counts([name])[name][0]
        assert (counts.ready, counts.held) == (0, 0)
        source.close()
