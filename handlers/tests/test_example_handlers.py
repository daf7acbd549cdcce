"""The example handlers, tested as a user tests theirs: with the ``queuey`` fixture of
queuey's pytest plugin (installed with queuey; no conftest needed).

The kit takes the handlers from the ``queuey.handlers`` entry points (this distribution
registers them) and the queues from ./queuey.toml when pytest runs from the repository
(alpha's and beta's retry policies, with jitter), else queues with default settings:
nothing here depends on which.
"""

from __future__ import annotations

import pytest
from queuey_example_handlers import Doomed, Flaky, Greet, Nap, Snooze

from queuey_core.testing import QueueyKit


def test_greet_succeeds(queuey: QueueyKit) -> None:
    assert queuey.run(Greet(name="ada")).succeeded


def test_greet_refuses_an_empty_name_before_anything_is_enqueued(queuey: QueueyKit) -> None:
    with pytest.raises(ValueError, match="name"):
        queuey.enqueue(Greet(name=""))
    assert queuey.enqueued(Greet) == []


def test_flaky_is_retried_after_its_backoff_then_succeeds(queuey: QueueyKit) -> None:
    first = queuey.run(Flaky(failures=1))

    assert first.retried
    assert first.reason == "flaky failure 1 of 1"
    [retry] = queuey.enqueued(Flaky)
    assert retry.attempt == 2
    assert retry.delay == first.delay
    queuey.advance(retry.delay)
    assert queuey.run(retry).succeeded


def test_flaky_that_always_fails_ends_in_the_dead_letters(queuey: QueueyKit) -> None:
    queuey.enqueue(Flaky(failures=100))

    outcomes = queuey.drain(advance_time=True)

    assert outcomes[-1].dead_lettered
    assert "max attempts" in outcomes[-1].reason
    assert all(o.retried for o in outcomes[:-1])


def test_snooze_defers_once_without_spending_an_attempt(queuey: QueueyKit) -> None:
    outcome = queuey.run(Snooze(seconds=30))

    assert outcome.deferred
    assert (outcome.reason, outcome.delay) == ("snoozing", 30.0)
    [again] = queuey.enqueued(Snooze)
    assert (again.attempt, again.deferrals, again.delay) == (1, 1, 30.0)
    assert queuey.drain() == [], "still held: the clock has not moved"
    queuey.advance(30)
    assert [o.succeeded for o in queuey.drain()] == [True]


def test_doomed_is_dead_lettered_at_once(queuey: QueueyKit) -> None:
    outcome = queuey.run(Doomed(why="no such customer"))

    assert outcome.dead_lettered
    assert outcome.reason == "fatal error: no such customer"
    assert queuey.enqueued(Doomed) == []


@pytest.mark.queuey(job_timeout=60)
def test_nap_stops_when_its_timeout_cancels_it(queuey: QueueyKit) -> None:
    # An hour's nap; the job timeout (the worker's 60 s, or beta's own in queuey.toml)
    # fires on the kit's clock, which the run moves on while the job naps.
    outcome = queuey.run(Nap(seconds=3600), elapse=3600)

    assert outcome.timed_out
    assert outcome.retried
