"""MemoryBackend: ordering, prefetch, holds on the clock, and what tests inspect."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

import pytest

from queuey_core import BackendError
from queuey_core import ConfigError
from queuey_core import ConsumerEnded
from queuey_core import ConsumerStoppedError
from queuey_core import Delivery
from queuey_core import Envelope
from queuey_core import JobContext
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import UnroutableError
from queuey_core import Worker
from tests.harness import Memory
from tests.support import ALPHA
from tests.support import GAMMA
from tests.support import Greet
from tests.support import Nudge
from tests.support import Recorder
from tests.support import start
from tests.support import wait_for


def collect() -> tuple[list[Delivery | ConsumerEnded], Callable[[Delivery | ConsumerEnded], None]]:
    got: list[Delivery | ConsumerEnded] = []
    return got, got.append


def names(items: list[Delivery | ConsumerEnded]) -> list[str]:
    return [d.envelope.payload["name"] for d in items if not isinstance(d, ConsumerEnded)]


def test_higher_priorities_first_and_fifo_within_a_level(
    backend: MemoryBackend, producer: Producer, queues: QueueSet
) -> None:
    for name, prio in [("a0", 0), ("b5", 5), ("c0", 0), ("d9", 9), ("e5", 5)]:
        producer.enqueue(Greet(name=name), priority=prio)
    got, sink = collect()
    sub = backend.consume(QueueConfig(ALPHA, prefetch=0, max_priority=10), sink)
    assert names(got) == ["d9", "b5", "e5", "a0", "c0"]
    sub.cancel()


def test_priorities_are_ignored_on_a_queue_without_them(
    backend: MemoryBackend, producer: Producer
) -> None:
    clock = ManualClock()
    env = [
        Envelope.for_job(Nudge(id=i), enqueued_at=clock.wall_ms(), priority=9 * (i % 2))
        for i in range(4)
    ]
    for e in env:
        backend.publish(e)  # published straight to the backend, past the producer's check
    got, sink = collect()
    backend.consume(QueueConfig(GAMMA, prefetch=0), sink)
    assert [d.envelope.payload["id"] for d in got if not isinstance(d, ConsumerEnded)] == [
        0,
        1,
        2,
        3,
    ]


def test_prefetch_limits_unsettled_deliveries(backend: MemoryBackend, producer: Producer) -> None:
    for i in range(5):
        producer.enqueue(Greet(name=f"j{i}"))
    got, sink = collect()
    backend.consume(QueueConfig(ALPHA, prefetch=2, max_priority=10), sink)
    assert names(got) == ["j0", "j1"]
    assert (backend.pending(ALPHA), backend.unacked(ALPHA)) == (3, 2)
    first = got[0]
    assert not isinstance(first, ConsumerEnded)
    first.ack()
    assert names(got) == ["j0", "j1", "j2"], "settling one frees one slot"


def test_a_delivery_settles_once(backend: MemoryBackend, producer: Producer) -> None:
    producer.enqueue(Greet(name="once"))
    got, sink = collect()
    backend.consume(QueueConfig(ALPHA, prefetch=1, max_priority=10), sink)
    delivery = got[0]
    assert not isinstance(delivery, ConsumerEnded)
    delivery.ack()
    with pytest.raises(BackendError, match="already settled"):
        delivery.ack()


def test_closing_a_subscription_gives_unsettled_deliveries_back_in_order(
    backend: MemoryBackend, producer: Producer
) -> None:
    for i in range(3):
        producer.enqueue(Greet(name=f"j{i}"))
    got, sink = collect()
    sub = backend.consume(QueueConfig(ALPHA, prefetch=2, max_priority=10), sink)
    sub.close()
    assert backend.pending(ALPHA) == 3
    late = got[0]
    assert not isinstance(late, ConsumerEnded)
    with pytest.raises(BackendError, match="closed"):
        late.ack()
    again, sink2 = collect()
    backend.consume(QueueConfig(ALPHA, prefetch=0, max_priority=10), sink2)
    assert names(again) == ["j0", "j1", "j2"]


def test_closing_the_backend_ends_every_consumer(
    backend: MemoryBackend, producer: Producer
) -> None:
    got, sink = collect()
    backend.consume(QueueConfig(ALPHA, prefetch=1, max_priority=10), sink)
    backend.close()
    assert isinstance(got[-1], ConsumerEnded)
    assert isinstance(got[-1].error, ConsumerStoppedError)
    with pytest.raises(BackendError, match="closed"):
        backend.publish(Envelope.for_job(Greet(name="x"), enqueued_at=0))


def test_publishing_to_an_undeclared_queue_is_unroutable() -> None:
    backend = MemoryBackend(clock=ManualClock())
    with pytest.raises(UnroutableError, match="no queue"):
        backend.publish(Envelope.for_job(Greet(name="x"), enqueued_at=0))


def test_redeclaring_with_other_settings_is_a_config_error(backend: MemoryBackend) -> None:
    backend.declare([QueueConfig("q", max_priority=5)])
    backend.declare([QueueConfig("q", max_priority=5, prefetch=3)])
    with pytest.raises(ConfigError, match="other settings"):
        backend.declare([QueueConfig("q")])


def test_dead_letters_can_be_listed_requeued_and_purged(
    backend: MemoryBackend, producer: Producer, clock: ManualClock
) -> None:
    ids = [producer.enqueue(Greet(name=f"j{i}")) for i in range(3)]
    got, sink = collect()
    sub = backend.consume(QueueConfig(ALPHA, prefetch=0, max_priority=10), sink)
    for i, d in enumerate(got):
        assert not isinstance(d, ConsumerEnded)
        d.dead_letter(f"reason {i}")
    sub.cancel()
    listed = backend.list_dead_letters(ALPHA)
    assert [d.handle for d in listed] == [str(i) for i in ids], "a job's handle is its id"
    assert [d.reason for d in listed] == ["reason 0", "reason 1", "reason 2"]
    assert backend.list_dead_letters(ALPHA, limit=1) == listed[:1]
    assert backend.list_dead_letters(ALPHA) == listed, "listing removes nothing"

    assert backend.requeue_dead_letters(ALPHA, [str(ids[1])]) == 1
    assert backend.pending(ALPHA) == 1
    assert [d.handle for d in backend.list_dead_letters(ALPHA)] == [str(ids[0]), str(ids[2])]
    assert backend.purge_dead_letters(ALPHA) == 2
    assert backend.list_dead_letters(ALPHA) == []
    assert backend.requeue_dead_letters(ALPHA, [str(uuid.uuid4())]) == 0


def test_a_dead_letter_never_died_before_it_was_enqueued(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    # The producer's clock runs 1.5 s ahead of the backend's (another machine's, say).
    ahead = ManualClock(start_wall_ms=clock.wall_ms() + 1_500)
    job_id = Producer(backend, queues, clock=ahead).enqueue(Greet(name="x"))
    got, sink = collect()
    sub = backend.consume(QueueConfig(ALPHA, prefetch=0, max_priority=10), sink)
    [delivery] = got
    assert not isinstance(delivery, ConsumerEnded)
    delivery.dead_letter("why")
    sub.cancel()
    [dead] = backend.list_dead_letters(ALPHA)
    assert dead.handle == str(job_id)
    assert dead.dead_at == ahead.wall_ms() > clock.wall_ms(), "at the earliest, its enqueue"


def test_a_requeued_dead_letter_starts_again_at_attempt_one(
    backend: MemoryBackend, producer: Producer
) -> None:
    producer.enqueue(Greet(name="x"))
    got, sink = collect()
    backend.consume(QueueConfig(ALPHA, prefetch=1, max_priority=10), sink)
    first = got[0]
    assert not isinstance(first, ConsumerEnded)
    first.retry(first.envelope.next_attempt(), 0)
    second = got[1]
    assert not isinstance(second, ConsumerEnded)
    assert second.envelope.attempt == 2
    second.dead_letter("gave up")
    backend.requeue_dead_letters(ALPHA)
    third = got[2]
    assert not isinstance(third, ConsumerEnded)
    assert (third.envelope.attempt, third.envelope.job_id) == (1, first.envelope.job_id)


def test_every_job_event_is_logged_with_the_job_identity(
    mem: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    backend, producer, queues, clock = mem
    seen = Recorder()

    def handle(job: Greet, ctx: JobContext) -> None:
        seen.enter()
        seen.leave()

    caplog.set_level(logging.DEBUG, logger="queuey_core.worker")
    running = start(Worker(backend, queues, [seen.handler(Greet, handle)], clock=clock), clock)
    job_id = producer.enqueue(Greet(name="ada"))
    wait_for(lambda: len(backend.acked(ALPHA)) == 1, clock)
    running.stop()

    job_events = [r for r in caplog.records if hasattr(r, "job_id")]
    assert {r.getMessage() for r in job_events} >= {"running job", "job succeeded"}
    for record in job_events:
        fields = record.__dict__
        assert fields["job_id"] == str(job_id)
        assert fields["job_type"] == Greet.NAME
        assert fields["queue"] == ALPHA
        assert fields["attempt"] == 1
