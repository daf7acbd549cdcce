"""The testing kit (queuey_core.testing), through the ``queuey`` fixture of its pytest
plugin: what a test enqueues, runs, drains and steps through, on memory and SQLite."""

from __future__ import annotations

import asyncio
import tempfile
import traceback
import uuid
from pathlib import Path
from typing import ClassVar

import pytest

from queuey_core import Backoff
from queuey_core import DeadLetter
from queuey_core import Deferred
from queuey_core import DuplicateJobError
from queuey_core import Fatal
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import JobInfo
from queuey_core import QueueConfig
from queuey_core import Retryable
from queuey_core import RetryPolicy
from queuey_core import UnknownQueueError
from queuey_core import WorkerHooks
from queuey_core import handler
from queuey_core.testing import KitError
from queuey_core.testing import QueueyKit
from queuey_core.testing import Status

#: No jitter: a test can state the backoff. Three attempts, 1 s then 2 s.
POLICY = RetryPolicy(3, Backoff(initial=1.0, max=60.0, jitter=False))
QUEUES = [
    QueueConfig("kit.work", max_priority=10, retry=POLICY),
    QueueConfig("kit.slow", retry=POLICY, job_timeout=5.0),
]

#: What the handlers below were given, in order (tests run one at a time).
seen: list[str] = []


class Add(Job):
    NAME: ClassVar[str] = "kit.add"
    QUEUE: ClassVar[str] = "kit.work"
    a: int
    b: int


class Flaky(Job):
    NAME: ClassVar[str] = "kit.flaky"
    QUEUE: ClassVar[str] = "kit.work"
    failures: int


class Snooze(Job):
    NAME: ClassVar[str] = "kit.snooze"
    QUEUE: ClassVar[str] = "kit.work"
    seconds: float


class Doomed(Job):
    NAME: ClassVar[str] = "kit.doomed"
    QUEUE: ClassVar[str] = "kit.work"


class Buggy(Job):
    NAME: ClassVar[str] = "kit.buggy"
    QUEUE: ClassVar[str] = "kit.work"


class AsyncAdd(Job):
    NAME: ClassVar[str] = "kit.async-add"
    QUEUE: ClassVar[str] = "kit.work"
    a: int
    fail_first: bool = False


class AsyncBuggy(Job):
    NAME: ClassVar[str] = "kit.async-buggy"
    QUEUE: ClassVar[str] = "kit.work"


class Stuck(Job):
    NAME: ClassVar[str] = "kit.stuck"
    QUEUE: ClassVar[str] = "kit.slow"


class Orphan(Job):
    """A job type the kit has no handler for."""

    NAME: ClassVar[str] = "kit.orphan"
    QUEUE: ClassVar[str] = "kit.work"


@handler
def add(job: Add, ctx: JobContext) -> int:
    seen.append(f"add {job.a}+{job.b}")
    return job.a + job.b


@handler
def flaky(job: Flaky, ctx: JobContext) -> None:
    if ctx.attempt <= job.failures:
        raise Retryable(f"failure {ctx.attempt}")


@handler
def snooze(job: Snooze, ctx: JobContext) -> None:
    if ctx.deferrals == 0:
        raise Deferred(job.seconds, "not yet")


@handler
def doomed(job: Doomed, ctx: JobContext) -> None:
    raise Fatal("never works")


@handler
def buggy(job: Buggy, ctx: JobContext) -> None:
    prices: dict[str, int] = {}
    prices["no such key"]  # the bug under test: a KeyError


@handler
async def async_add(job: AsyncAdd, ctx: JobContext) -> int:
    await asyncio.sleep(0)
    if job.fail_first and ctx.attempt == 1:
        raise Retryable("async failure")
    return job.a + 1


@handler
async def async_buggy(job: AsyncBuggy, ctx: JobContext) -> None:
    await asyncio.sleep(0)
    raise ZeroDivisionError("the async bug under test")


@handler
def stuck(job: Stuck, ctx: JobContext) -> None:
    # Runs until its timeout (on the kit's clock) sets the cancellation flag.
    while not ctx.wait(0.001):
        pass
    ctx.raise_if_cancelled()


HANDLERS = [add, flaky, snooze, doomed, buggy, async_add, async_buggy, stuck]
kit_options = pytest.mark.queuey(handlers=HANDLERS, queues=QUEUES)
both_backends = pytest.mark.parametrize("queuey", ["memory", "sqlite"], indirect=True)
pytestmark = kit_options


@both_backends
def test_enqueued_jobs_wait_typed_with_their_envelope_details(queuey: QueueyKit) -> None:
    first = queuey.enqueue(Add(a=1, b=2), priority=7)
    later = queuey.enqueue(Add(a=3, b=4), delay=30)

    waiting = queuey.enqueued(Add)

    assert [e.job for e in waiting] == [Add(a=1, b=2), Add(a=3, b=4)], "typed, soonest first"
    assert [e.job_id for e in waiting] == [first, later]
    assert (waiting[0].priority, waiting[0].delay, waiting[0].attempt) == (7, 0.0, 1)
    assert waiting[1].delay == 30.0, "a delayed job says how long it still waits"
    assert queuey.enqueued(Flaky) == [], "other job types are not listed"
    assert queuey.outcomes == [], "nothing runs until the test asks"


@both_backends
def test_run_performs_one_job_and_returns_its_result(queuey: QueueyKit) -> None:
    queuey.enqueue(Add(a=10, b=10))

    outcome = queuey.run(Add(a=2, b=3))

    assert outcome.succeeded
    assert outcome.status is Status.SUCCEEDED
    assert outcome.result == 5
    assert [e.job for e in queuey.enqueued(Add)] == [Add(a=10, b=10)], "only that job ran"


@both_backends
def test_a_job_published_twice_under_one_id_runs_twice(queuey: QueueyKit) -> None:
    job_id = queuey.enqueue(Add(a=1, b=1), job_id="order-1")
    # A second enqueue under the id is a DuplicateJobError here (a chosen id is a unique
    # key on memory and on a file); a second *message* is what a broker can still hold,
    # after a publish whose outcome was unknown: put it there as the backend would.
    with pytest.raises(DuplicateJobError):
        queuey.enqueue(Add(a=1, b=1), job_id="order-1")
    [first] = queuey.enqueued(Add)
    queuey.backend.publish(first.envelope)

    assert [e.job_id for e in queuey.enqueued(Add)] == [job_id, job_id]
    assert [o.job_id for o in queuey.drain()] == [job_id, job_id], "neither is lost"


@both_backends
def test_a_retry_waits_for_its_backoff_on_the_manual_clock(queuey: QueueyKit) -> None:
    failed = queuey.run(Flaky(failures=1))

    assert failed.retried, failed
    assert (failed.reason, failed.delay, failed.attempt) == ("failure 1", 1.0, 1)
    [retry] = queuey.enqueued(Flaky)
    assert (retry.attempt, retry.delay) == (2, 1.0)
    with pytest.raises(KitError, match="held for 1s more"):
        queuey.run(retry)

    queuey.advance(1.0)
    outcome = queuey.run(retry)

    assert outcome.succeeded
    assert outcome.attempt == 2
    assert queuey.enqueued(Flaky) == []


@both_backends
def test_drain_with_time_runs_retries_until_dead_lettered(queuey: QueueyKit) -> None:
    job_id = queuey.enqueue(Flaky(failures=5))

    outcomes = queuey.drain(advance_time=True)

    assert [o.status for o in outcomes] == [Status.RETRIED, Status.RETRIED, Status.DEAD_LETTERED]
    assert [o.delay for o in outcomes[:2]] == [1.0, 2.0], "the policy's backoff, unjittered"
    assert outcomes[-1].reason.startswith("max attempts (3) exhausted after attempt 3")
    # (give or take the SQLite file's whole milliseconds)
    assert queuey.clock.monotonic() == pytest.approx(3.0, abs=0.01), "only as far as the backoffs"
    [dead] = queuey.backend.list_dead_letters("kit.work")
    assert isinstance(dead, DeadLetter)
    assert dead.envelope.job_id == job_id


@both_backends
def test_a_deferral_keeps_the_attempt_and_comes_back_on_top(queuey: QueueyKit) -> None:
    outcome = queuey.run(Snooze(seconds=90))

    assert outcome.deferred
    assert (outcome.reason, outcome.delay) == ("not yet", 90.0)
    [again] = queuey.enqueued(Snooze)
    assert (again.attempt, again.deferrals, again.priority, again.delay) == (1, 1, 10, 90.0)
    assert queuey.drain() == [], "drain without time leaves a held job held"
    queuey.advance(90)
    assert [o.status for o in queuey.drain()] == [Status.SUCCEEDED]


def test_fatal_and_unknown_jobs_are_dead_lettered_with_the_reason(queuey: QueueyKit) -> None:
    fatal = queuey.run(Doomed())
    orphan = queuey.run(Orphan())

    assert fatal.dead_lettered
    assert fatal.reason == "fatal error: never works"
    assert orphan.dead_lettered
    assert not orphan.ran
    assert orphan.reason == "no handler for job type 'kit.orphan'"


def test_a_handlers_bug_surfaces_with_its_own_traceback(queuey: QueueyKit) -> None:
    with pytest.raises(KeyError) as raised:
        queuey.run(Buggy())

    frames = [f.name for f in traceback.extract_tb(raised.value.__traceback__)]
    assert "buggy" in frames, f"the handler's frame is in the traceback: {frames}"
    [retry] = queuey.enqueued(Buggy)
    assert retry.attempt == 2, "the worker still settled it as it would: a retry"


@pytest.mark.queuey(raise_errors=False)
def test_without_raise_errors_a_bug_is_an_outcome(queuey: QueueyKit) -> None:
    outcome = queuey.run(Buggy())

    assert outcome.retried
    assert outcome.reason == "KeyError: 'no such key'"
    assert isinstance(outcome.error, KeyError)


class Fan(Job):
    NAME: ClassVar[str] = "kit.fan"
    QUEUE: ClassVar[str] = "kit.work"
    n: int


class Again(Job):
    NAME: ClassVar[str] = "kit.again"
    QUEUE: ClassVar[str] = "kit.work"


def test_drain_runs_jobs_that_jobs_enqueue_by_priority() -> None:
    kits: list[QueueyKit] = []

    @handler
    def fan(job: Fan, ctx: JobContext) -> None:
        for i in range(job.n):
            kits[0].enqueue(Add(a=i, b=0), priority=i)

    with QueueyKit([fan, add], queues=QUEUES) as kit:
        kits.append(kit)
        seen.clear()
        kit.enqueue(Fan(n=3))

        outcomes = kit.drain()

    assert [o.job_type for o in outcomes] == ["kit.fan", "kit.add", "kit.add", "kit.add"]
    assert seen == ["add 2+0", "add 1+0", "add 0+0"], "highest priority first"


def test_drain_stops_a_job_that_enqueues_itself_for_ever() -> None:
    kits: list[QueueyKit] = []

    @handler
    def again(job: Again, ctx: JobContext) -> None:
        kits[0].enqueue(Again())

    with QueueyKit([again], queues=QUEUES) as kit:
        kits.append(kit)
        kit.enqueue(Again())
        with pytest.raises(KitError, match="drain ran 20 jobs"):
            kit.drain(max_jobs=20)


@both_backends
def test_async_handlers_run_the_same_way(queuey: QueueyKit) -> None:
    assert queuey.run(AsyncAdd(a=41)).result == 42

    failed = queuey.run(AsyncAdd(a=1, fail_first=True))
    queuey.advance(failed.delay or 0)
    [retry] = queuey.enqueued(AsyncAdd)

    assert failed.retried
    assert failed.reason == "async failure"
    assert queuey.run(retry).result == 2


def test_an_async_handlers_bug_surfaces_with_its_own_traceback(queuey: QueueyKit) -> None:
    with pytest.raises(ZeroDivisionError, match="the async bug under test") as raised:
        queuey.run(AsyncBuggy())

    frames = [f.name for f in traceback.extract_tb(raised.value.__traceback__)]
    assert "async_buggy" in frames, frames


def test_a_delayed_jobs_delay_counts_down_with_the_clock(queuey: QueueyKit) -> None:
    queuey.enqueue(Add(a=1, b=1), delay=10)
    queuey.advance(4)

    [held] = queuey.enqueued(Add)

    assert held.delay == 6.0
    with pytest.raises(KitError, match=r"held for 6s more .*kit\.advance\(6\)"):
        queuey.run(held)


def test_a_job_timeout_fires_on_the_clock_the_run_lets_pass(queuey: QueueyKit) -> None:
    outcome = queuey.run(Stuck(), elapse=10)

    assert outcome.retried
    assert outcome.timed_out
    assert outcome.reason == "job timed out after 5s"


def test_a_job_cancelled_before_it_runs_is_acked_unrun(queuey: QueueyKit) -> None:
    job_id = queuey.enqueue(Add(a=1, b=1))
    queuey.cancel(job_id)

    outcome = queuey.run(job_id)

    assert outcome.cancelled
    assert not outcome.ran


def test_the_kits_hooks_are_told_as_a_workers_are() -> None:
    told: list[tuple[str, object]] = []

    class Told(WorkerHooks):
        def on_job_succeeded(self, job: JobInfo) -> None:
            told.append((job.job_type, job.result))

    with QueueyKit(HANDLERS, queues=QUEUES, hooks=[Told()]) as kit:
        kit.run(Add(a=1, b=1))

    assert told == [("kit.add", 2)]


def test_running_what_is_not_waiting_says_so(queuey: QueueyKit) -> None:
    done = queuey.run(Add(a=1, b=1))

    with pytest.raises(KitError, match="is not waiting to run"):
        queuey.run(done.job_id)
    with pytest.raises(KitError, match="is not waiting to run"):
        queuey.run(uuid.uuid4())


@pytest.mark.parametrize("queuey", [{"backend": "sqlite"}], indirect=True)
def test_the_fixture_takes_a_dict_of_options(queuey: QueueyKit) -> None:
    assert type(queuey.backend).__name__ == "GatedSqliteBackend"
    assert queuey.run(Add(a=1, b=2)).result == 3


def test_an_unknown_backend_is_one_clear_error() -> None:
    with pytest.raises(KitError, match="unknown kit backend 'redis'"):
        QueueyKit(HANDLERS, queues=QUEUES, backend="redis")  # type: ignore[arg-type]


def test_a_handler_on_an_unknown_queue_is_refused_and_its_file_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = tmp_path / "kit"

    def mkdtemp(prefix: str) -> str:
        made.mkdir()
        return str(made)

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)

    with pytest.raises(UnknownQueueError, match=r"unknown queue 'kit\.slow'"):
        QueueyKit(HANDLERS, queues=QUEUES[:1], backend="sqlite")

    assert not made.exists(), "the kit's temporary file went with it"
