"""The Backend contract: one set of tests, run on every backend of tests/backend_kinds.py
(in memory, a SQLite file, RabbitMQ; a new backend joins with one line there, see
docs/backends.md).

In memory and on SQLite, time is a ManualClock advanced while polling; on RabbitMQ it is
real, so the delays here are a few seconds at most.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable
from collections.abc import Iterator

import pytest

from queuey_core import BackendError
from queuey_core import ConfigError
from queuey_core import ConsumerEnded
from queuey_core import ConsumerStoppedError
from queuey_core import DeadLetter
from queuey_core import Delivery
from queuey_core import NotEnqueuedError
from queuey_core import QueueConfig
from queuey_core import Subscription
from queuey_core import UnroutableError
from queuey_core.backends.capabilities import PublishesEncoded
from queuey_core.envelope import EncodedEnvelope
from queuey_core.errors import PublishFailure
from tests.backend_kinds import BackendKind
from tests.backend_kinds import ContractEnv
from tests.backend_kinds import backend_params
from tests.conftest import backend_env

_names = itertools.count()


class Collector:
    """A sink that keeps what it is given, with when it came."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._lock = threading.Lock()
        self.items: list[tuple[float, Delivery | ConsumerEnded]] = []

    def __call__(self, item: Delivery | ConsumerEnded) -> None:
        with self._lock:
            self.items.append((self._now(), item))

    def deliveries(self) -> list[Delivery]:
        with self._lock:
            return [d for _, d in self.items if not isinstance(d, ConsumerEnded)]

    def ended(self) -> list[ConsumerEnded]:
        with self._lock:
            return [e for _, e in self.items if isinstance(e, ConsumerEnded)]

    def names(self) -> list[str]:
        return [d.envelope.payload["name"] for d in self.deliveries()]

    def times(self) -> dict[str, float]:
        with self._lock:
            return {
                d.envelope.payload["name"]: t
                for t, d in self.items
                if not isinstance(d, ConsumerEnded)
            }


@pytest.fixture(params=backend_params())
def env(request: pytest.FixtureRequest) -> Iterator[ContractEnv]:
    """A backend under contract: one of tests/backend_kinds.py's, fresh for the test."""
    kind: BackendKind = request.param
    with backend_env(kind, kind.contract_env) as e:
        yield e


def test_a_published_envelope_is_delivered_intact(env: ContractEnv) -> None:
    q = env.queue(prefetch=1)
    sent = env.envelope(q, "ada")
    env.backend.publish(sent)
    got = Collector(env.now)
    sub = env.backend.consume(q, got)
    env.wait_until(lambda: len(got.deliveries()) == 1)
    delivery = got.deliveries()[0]
    assert delivery.envelope == sent
    delivery.ack()
    sub.close()
    assert env.pending(q.name) == 0


def test_higher_priorities_first_and_fifo_within_a_level(env: ContractEnv) -> None:
    q = env.queue(prefetch=0, max_priority=10)
    for name, prio in [("a0", 0), ("b5", 5), ("c0", 0), ("d9", 9), ("e5", 5)]:
        env.backend.publish(env.envelope(q, name, prio))
    got = Collector(env.now)
    sub = env.backend.consume(q, got)
    env.wait_until(lambda: len(got.deliveries()) == 5)
    assert got.names() == ["d9", "b5", "e5", "a0", "c0"]
    sub.close()


def test_a_long_delay_never_holds_back_a_short_one(env: ContractEnv) -> None:
    q = env.queue(prefetch=0)
    start = env.now()
    env.backend.publish(env.envelope(q, "long"), delay=2.5)
    env.backend.publish(env.envelope(q, "short"), delay=1.0)
    got = Collector(env.now)
    sub = env.backend.consume(q, got)
    env.wait_until(lambda: len(got.deliveries()) == 2)
    assert got.names() == ["short", "long"]
    at = {name: t - start for name, t in got.times().items()}
    assert 1.0 <= at["short"] < 2.0, f"short arrived after {at['short']:.2f}s"
    assert 2.5 <= at["long"] < 3.5, f"long arrived after {at['long']:.2f}s"
    for d in got.deliveries():
        d.ack()
    sub.close()


def test_a_deferral_comes_back_at_top_priority_ahead_of_the_backlog(env: ContractEnv) -> None:
    q = env.queue(prefetch=1, max_priority=10)
    env.backend.publish(env.envelope(q, "limited"))
    got = Collector(env.now)
    sub = env.backend.consume(q, got)
    env.wait_until(lambda: len(got.deliveries()) == 1)
    first = got.deliveries()[0]
    first.defer(first.envelope.deferred(q.top_priority), 1.5)
    sub.close()

    env.backend.publish(env.envelope(q, "backlog-1"))
    env.backend.publish(env.envelope(q, "backlog-2"))
    env.wait_until(lambda: env.pending(q.name) == 3)

    again = Collector(env.now)
    sub = env.backend.consume(q, again)
    for expected in range(1, 4):
        env.wait_until(lambda n=expected: len(again.deliveries()) == n)  # type: ignore[misc]
        again.deliveries()[-1].ack()
    assert again.names() == ["limited", "backlog-1", "backlog-2"]
    returned = again.deliveries()[0].envelope
    assert (returned.attempt, returned.deferrals, returned.priority) == (1, 1, 10)
    sub.close()


def test_a_retry_comes_back_later_with_the_next_attempt_at_priority_zero(env: ContractEnv) -> None:
    q = env.queue(prefetch=1, max_priority=10)
    env.backend.publish(env.envelope(q, "flaky", priority=7))
    got = Collector(env.now)
    sub = env.backend.consume(q, got)
    env.wait_until(lambda: len(got.deliveries()) == 1)
    first = got.deliveries()[0]
    retried_at = env.now()
    first.retry(first.envelope.next_attempt(), 1.0)
    env.wait_until(lambda: len(got.deliveries()) == 2)
    second = got.deliveries()[1]
    assert env.now() - retried_at >= 1.0, "a retry never comes back early"
    assert (second.envelope.attempt, second.envelope.priority) == (2, 0)
    assert second.envelope.job_id == first.envelope.job_id
    second.ack()
    sub.close()


def test_dead_letters_are_listed_without_loss_then_requeued_and_purged(env: ContractEnv) -> None:
    q = env.queue(prefetch=0)
    sent = [env.envelope(q, f"j{i}") for i in range(4)]
    for e in sent:
        env.backend.publish(e)
    got = Collector(env.now)
    sub = env.backend.consume(q, got)
    env.wait_until(lambda: len(got.deliveries()) == 4)
    for i, d in enumerate(got.deliveries()):
        d.retry(d.envelope.next_attempt(), 0) if i == 3 else d.dead_letter(f"reason {i}")
    env.wait_until(lambda: len(got.deliveries()) == 5)
    got.deliveries()[4].dead_letter("reason 3")
    sub.close()

    env.wait_until(lambda: len(env.backend.list_dead_letters(q.name)) == 4)
    listed = env.backend.list_dead_letters(q.name)
    assert [d.handle for d in listed] == [str(e.job_id) for e in sent]
    assert [d.reason for d in listed] == [f"reason {i}" for i in range(4)]
    assert isinstance(listed[3], DeadLetter)
    assert listed[3].envelope.attempt == 2
    assert all(d.dead_at is not None and d.dead_at > 0 for d in listed)
    assert env.backend.list_dead_letters(q.name) == listed, "listing loses and reorders nothing"
    assert env.backend.list_dead_letters(q.name, limit=2) == listed[:2]

    assert env.backend.requeue_dead_letters(q.name, [str(sent[3].job_id)]) == 1
    remaining = env.backend.list_dead_letters(q.name)
    assert [d.handle for d in remaining] == [str(e.job_id) for e in sent[:3]]
    again = Collector(env.now)
    sub = env.backend.consume(q, again)
    env.wait_until(lambda: len(again.deliveries()) == 1)
    back = again.deliveries()[0].envelope
    assert (back.job_id, back.attempt) == (sent[3].job_id, 1), "requeued at attempt 1"
    again.deliveries()[0].ack()
    sub.close()

    assert env.backend.purge_dead_letters(q.name) == 3
    assert env.backend.list_dead_letters(q.name) == []


def full_prefetch(
    env: ContractEnv, q: QueueConfig, *, published: int
) -> tuple[Collector, Subscription]:
    """``published`` jobs j0, j1 ... on ``q``, consumed until its prefetch is used up."""
    for i in range(published):
        env.backend.publish(env.envelope(q, f"j{i}"))
    got = Collector(env.now)
    sub = env.backend.consume(q, got)
    env.wait_until(lambda: len(got.deliveries()) == q.prefetch)
    return got, sub


def test_prefetch_limits_unsettled_deliveries(env: ContractEnv) -> None:
    q = env.queue(prefetch=2)
    got, sub = full_prefetch(env, q, published=5)
    env.wait_until(lambda: env.pending(q.name) == 3)
    assert got.names() == ["j0", "j1"]
    got.deliveries()[0].ack()
    env.wait_until(lambda: len(got.deliveries()) == 3)
    assert got.names() == ["j0", "j1", "j2"], "settling one frees one slot"
    sub.close()


def test_closing_a_subscription_gives_unsettled_deliveries_back(env: ContractEnv) -> None:
    q = env.queue(prefetch=2)
    got, sub = full_prefetch(env, q, published=3)
    sub.close()
    env.wait_until(lambda: env.pending(q.name) == 3)
    with pytest.raises(BackendError):
        got.deliveries()[0].ack()
    again = Collector(env.now)
    sub = env.backend.consume(q, again)
    env.wait_until(lambda: len(again.deliveries()) == 2)
    assert sorted(again.names()) == ["j0", "j1"]
    sub.close()


def test_a_delivery_settles_once(env: ContractEnv) -> None:
    q = env.queue(prefetch=1)
    env.backend.publish(env.envelope(q, "once"))
    got = Collector(env.now)
    sub = env.backend.consume(q, got)
    env.wait_until(lambda: len(got.deliveries()) == 1)
    got.deliveries()[0].ack()
    with pytest.raises(BackendError, match="already settled"):
        got.deliveries()[0].ack()
    sub.close()


def test_publishing_to_an_unknown_queue_is_unroutable(env: ContractEnv) -> None:
    q = QueueConfig(f"contract.{env.run}.missing")
    with pytest.raises(UnroutableError):
        env.backend.publish(env.envelope(q, "lost"))
    with pytest.raises(UnroutableError):
        env.backend.publish(env.envelope(q, "lost"), delay=1)


def test_a_conflicting_redeclaration_is_a_config_error(env: ContractEnv) -> None:
    q = env.queue(max_priority=5)
    with pytest.raises(ConfigError):
        env.backend.declare([QueueConfig(q.name)])


def test_a_held_message_survives_its_consumer_going_away(env: ContractEnv) -> None:
    q = env.queue(prefetch=1)
    got = Collector(env.now)
    sub = env.backend.consume(q, got)
    env.backend.publish(env.envelope(q, "held"), delay=1.0)
    sub.close()
    env.wait_until(lambda: env.pending(q.name) == 1)
    again = Collector(env.now)
    sub = env.backend.consume(q, again)
    env.wait_until(lambda: len(again.deliveries()) == 1)
    assert got.deliveries() == []
    again.deliveries()[0].ack()
    sub.close()


def test_closing_the_backend_ends_its_consumers(env: ContractEnv) -> None:
    q = env.queue(prefetch=1)
    got = Collector(env.now)
    env.backend.consume(q, got)
    env.backend.close()
    env.wait_until(lambda: len(got.ended()) == 1)
    ended = got.ended()[0]
    assert ended.queue == q.name
    assert isinstance(ended.error, ConsumerStoppedError)
    with pytest.raises(BackendError, match="closed"):
        env.backend.publish(env.envelope(q, "late"))


def test_publishing_on_a_closed_backend_is_not_enqueued(env: ContractEnv) -> None:
    # docs/enqueueing.md: the three outcomes mean the same on every backend, and a job
    # a closed backend never took is surely not on the broker.
    q = env.queue()
    env.backend.close()
    one, two = env.envelope(q, "one"), env.envelope(q, "two")
    both = [one.job_id, two.job_id]
    attempts: list[tuple[str, Callable[[], None], list[uuid.UUID]]] = [
        ("publish", lambda: env.backend.publish(one), [one.job_id]),
        ("publish_many", lambda: env.backend.publish_many([(one, None), (two, 1.0)]), both),
        ("defer", lambda: env.backend.defer(one, 1.0), [one.job_id]),
    ]
    if isinstance(env.backend, PublishesEncoded):
        encoded = EncodedEnvelope(one.job_id, one.job_type, q.name, 0, 0, one.encode())
        publish_encoded = env.backend.publish_encoded
        attempts.append(
            ("publish_encoded", lambda: publish_encoded([(encoded, None)]), [one.job_id])
        )
    for name, attempt, ids in attempts:
        with pytest.raises(NotEnqueuedError, match="closed") as caught:
            attempt()
        assert caught.value.reason is PublishFailure.CLOSED, name
        assert list(caught.value.not_enqueued) == ids, f"{name} names the jobs it refused"
