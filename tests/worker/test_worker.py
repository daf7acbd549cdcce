"""The seed's 28 worker tests (docs/seed/worker.rs), one Python twin each.

Each keeps the seed's name, setup and assertions, and runs on every backend of
tests/backend_kinds.py: on MemoryBackend with a ManualClock standing in for tokio's
paused time (``h.wait_for`` advances it while polling, so no test sleeps through a
backoff, a hold or a timeout), and on a real RabbitMQ, where the seed's durations
shrink to ``h.d(x)`` of real time (see tests/harness.py).

And each runs with both kinds of handler (the ``style`` fixture, tests/worker/styles.py):
its handler's body, written once, runs as a plain function on a job thread and as an
``async def`` on the worker's event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from collections.abc import Iterator

import pytest

from queuey_core import BackendError
from queuey_core import Clock
from queuey_core import ConsumerStoppedError
from queuey_core import Deferred
from queuey_core import Delivery
from queuey_core import DuplicateHandlerError
from queuey_core import Envelope
from queuey_core import Fatal
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core import Retryable
from queuey_core import Worker
from tests.harness import Inspectable
from tests.harness import PassingDelivery
from tests.harness import WorkerEnv
from tests.harness import Wrapping
from tests.support import ALPHA
from tests.support import BETA
from tests.support import GAMMA
from tests.support import Greet
from tests.support import Nudge
from tests.support import Orphan
from tests.support import Ping
from tests.support import Recorder
from tests.support import Stubborn
from tests.support import start
from tests.worker.styles import STYLES
from tests.worker.styles import Style
from tests.worker.styles import StyledRecorder

MakeRecorder = Callable[[], Recorder]


@pytest.fixture(params=STYLES)
def style(request: pytest.FixtureRequest, h: WorkerEnv) -> Style:
    return Style(request.param, h)


@pytest.fixture
def recorder(style: Style) -> Iterator[MakeRecorder]:
    """Recorders whose handlers are of the test's style (see tests/conftest.py's)."""
    made: list[Recorder] = []

    def make() -> Recorder:
        made.append(StyledRecorder(style))
        return made[-1]

    yield make
    failures = [exc for rec in made for exc in rec.failed_assertions]
    assert not failures, f"assertions failed inside handlers: {failures}"


@pytest.fixture
def backend(h: WorkerEnv) -> Inspectable:
    return h.backend


@pytest.fixture
def producer(h: WorkerEnv) -> Producer:
    return h.producer()


@pytest.fixture
def queues(h: WorkerEnv) -> QueueSet:
    return h.queues


@pytest.fixture
def clock(h: WorkerEnv) -> Clock:
    return h.clock


class Unsettleable(Wrapping):
    """A backend whose deliveries can never be settled."""

    def wrap(self, delivery: Delivery) -> Delivery:
        return NeverSettles(delivery)


class NeverSettles(PassingDelivery):
    """Every settle fails; the inner delivery is left unsettled."""

    def ack(self) -> None:
        raise BackendError("channel is gone")

    def dead_letter(self, reason: str) -> None:
        raise BackendError("channel is gone")

    def retry(self, next_envelope: Envelope, delay: float) -> None:
        raise BackendError("channel is gone")

    def defer(self, next_envelope: Envelope, delay: float) -> None:
        raise BackendError("channel is gone")


def test_successful_job_is_acked(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    seen = recorder()

    async def handle(job: Greet, ctx: JobContext) -> None:
        seen.enter()
        seen.leave()
        assert job.name == "ada"
        assert ctx.attempt == 1
        assert ctx.max_attempts == 3
        assert ctx.job_type == Greet.NAME
        assert ctx.queue == ALPHA

    worker = Worker(backend, queues, [seen.handler(Greet, handle)], clock=clock)
    running = start(worker, h)

    job_id = producer.enqueue(Greet(name="ada"))
    h.wait_for(lambda: len(backend.acked(ALPHA)) == 1)

    assert backend.acked(ALPHA)[0].job_id == job_id
    assert backend.dead_letters(ALPHA) == []
    assert seen.attempts() == 1
    assert running.handle.settle_failures() == 0
    running.stop()
    assert not backend.is_closed(), "the backend is shared with the producer"


def test_retryable_failure_is_retried_and_then_succeeds(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    seen = recorder()

    async def handle(job: Greet, ctx: JobContext) -> None:
        n = seen.enter()
        seen.leave()
        if n == 1:
            assert ctx.attempt == 1
            assert not ctx.is_last_attempt()
            raise Retryable("flaky")
        assert ctx.attempt == 2

    running = start(Worker(backend, queues, [seen.handler(Greet, handle)], clock=clock), h)

    producer.enqueue(Greet(name="ada"))
    h.wait_for(lambda: seen.attempts() == 2)
    h.wait_for(lambda: len(backend.acked(ALPHA)) == 2)

    acked = backend.acked(ALPHA)
    assert acked[0].attempt == 1, "the first ack is the retried original"
    assert acked[1].attempt == 2, "the second is the successful attempt"
    assert acked[0].job_id == acked[1].job_id
    assert backend.dead_letters(ALPHA) == []
    running.stop()


def test_retryable_failure_dead_letters_once_attempts_are_exhausted(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    seen = recorder()

    async def handle(job: Greet, ctx: JobContext) -> None:
        seen.enter()
        seen.leave()
        raise Retryable("always down")

    running = start(Worker(backend, queues, [seen.handler(Greet, handle)], clock=clock), h)

    producer.enqueue(Greet(name="ada"))
    h.wait_for(lambda: bool(backend.dead_letters(ALPHA)))

    assert seen.attempts() == 3, "queue policy is three attempts"
    dead = backend.dead_letters(ALPHA)
    assert len(dead) == 1
    assert dead[0][0].attempt == 3
    assert "max attempts" in dead[0][1], f"reason was {dead[0][1]!r}"
    assert "always down" in dead[0][1]
    running.stop()


def test_fatal_failure_dead_letters_immediately(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    seen = recorder()

    async def handle(job: Greet, ctx: JobContext) -> None:
        seen.enter()
        seen.leave()
        raise Fatal("bad input")

    running = start(Worker(backend, queues, [seen.handler(Greet, handle)], clock=clock), h)

    producer.enqueue(Greet(name="ada"))
    h.wait_for(lambda: bool(backend.dead_letters(ALPHA)))

    assert seen.attempts() == 1, "one attempt only, though the queue allows three"
    dead = backend.dead_letters(ALPHA)
    assert dead[0][0].attempt == 1
    assert "fatal" in dead[0][1], f"reason was {dead[0][1]!r}"
    assert backend.acked(ALPHA) == []
    running.stop()


def test_job_retry_policy_overrides_the_queue_policy(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    seen = recorder()

    async def handle(job: Stubborn, ctx: JobContext) -> None:
        seen.enter()
        assert ctx.max_attempts == 2, "the queue says one attempt, the job says two"
        seen.leave()
        raise Retryable("nope")

    running = start(Worker(backend, queues, [seen.handler(Stubborn, handle)], clock=clock), h)

    producer.enqueue(Stubborn(id=1))
    h.wait_for(lambda: bool(backend.dead_letters(BETA)))

    assert seen.attempts() == 2
    assert "max attempts" in backend.dead_letters(BETA)[0][1]
    running.stop()


def test_queue_policy_without_retries_dead_letters_on_first_failure(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    seen = recorder()

    async def handle(job: Ping, ctx: JobContext) -> None:
        seen.enter()
        assert ctx.max_attempts == 1
        assert ctx.is_last_attempt()
        seen.leave()
        raise Retryable("nope")

    running = start(Worker(backend, queues, [seen.handler(Ping, handle)], clock=clock), h)

    producer.enqueue(Ping(seq=1))
    h.wait_for(lambda: bool(backend.dead_letters(BETA)))
    assert seen.attempts() == 1
    running.stop()


def test_job_without_a_handler_is_dead_lettered(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
) -> None:
    running = start(Worker(backend, queues, [style.noop(Greet)], clock=clock), h)

    producer.enqueue(Orphan(id=9))
    h.wait_for(lambda: bool(backend.dead_letters(ALPHA)))

    dead = backend.dead_letters(ALPHA)
    assert dead[0][0].job_type == Orphan.NAME
    assert "no handler" in dead[0][1], f"reason was {dead[0][1]!r}"
    running.stop()


def test_malformed_payload_is_dead_lettered(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    seen = recorder()

    async def handle(job: Greet, ctx: JobContext) -> None:
        seen.enter()
        seen.leave()

    running = start(Worker(backend, queues, [seen.handler(Greet, handle)], clock=clock), h)

    envelope = Envelope.for_job(Greet(name="ada"), enqueued_at=clock.wall_ms())
    envelope = envelope.model_copy(update={"payload": {"not_a_name": 42}})
    backend.publish(envelope)

    h.wait_for(lambda: bool(backend.dead_letters(ALPHA)))
    dead = backend.dead_letters(ALPHA)
    assert "decode error" in dead[0][1], f"reason was {dead[0][1]!r}"
    assert seen.attempts() == 0, "handler must not run on a decode failure"
    running.stop()


def test_panicking_handler_is_retried(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    seen = recorder()

    async def handle(job: Greet, ctx: JobContext) -> None:
        n = seen.enter()
        seen.leave()
        if n == 1:
            raise RuntimeError("handler exploded on purpose")

    running = start(Worker(backend, queues, [seen.handler(Greet, handle)], clock=clock), h)

    producer.enqueue(Greet(name="ada"))
    h.wait_for(lambda: seen.attempts() == 2)
    h.wait_for(lambda: len(backend.acked(ALPHA)) == 2)

    assert backend.dead_letters(ALPHA) == []
    assert not running.is_finished(), "the worker itself survived the exception"
    running.stop()


def test_job_timeout_is_a_retryable_failure(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    seen = recorder()

    async def handle(job: Greet, ctx: JobContext) -> None:
        n = seen.enter()
        if n == 1:
            await style.sleep(3600)
        seen.leave()

    worker = Worker(backend, queues, [seen.handler(Greet, handle)], job_timeout=h.d(5), clock=clock)
    running = start(worker, h)

    producer.enqueue(Greet(name="ada"))
    h.wait_for(lambda: len(backend.acked(ALPHA)) == 2)

    assert seen.attempts() == 2
    assert backend.dead_letters(ALPHA) == []
    running.stop()


def test_deferred_job_runs_again_with_the_same_attempt_and_top_priority(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    seen = recorder()
    second_run: list[JobContext] = []

    async def handle(job: Greet, ctx: JobContext) -> None:
        n = seen.enter()
        seen.leave()
        if n == 1:
            assert ctx.deferrals == 0
            assert ctx.priority == 0
            raise Deferred(h.d(1))
        second_run.append(ctx)

    running = start(Worker(backend, queues, [seen.handler(Greet, handle)], clock=clock), h)

    job_id = producer.enqueue(Greet(name="limited"))
    h.wait_for(lambda: seen.attempts() == 2)
    h.wait_for(lambda: len(backend.acked(ALPHA)) == 2)

    ctx = second_run[0]
    assert ctx.attempt == 1, "a deferral does not spend an attempt"
    assert ctx.deferrals == 1
    assert ctx.priority == 10, "alpha's ten levels"
    assert ctx.job_id == job_id

    acked = backend.acked(ALPHA)
    assert (acked[0].attempt, acked[0].deferrals) == (1, 0), "first the deferred original"
    assert (acked[1].attempt, acked[1].deferrals) == (1, 1), "then the re-delivery"
    assert acked[1].priority == 10
    assert backend.dead_letters(ALPHA) == []
    assert running.handle.settle_failures() == 0, "the defer settled cleanly"
    assert backend.deferred(ALPHA) == 0
    running.stop()


def test_a_retry_after_a_deferral_drops_back_to_priority_zero(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    seen = recorder()
    third_run: list[JobContext] = []

    # Run 1 defers, run 2 (back at the top of the queue) fails transiently, run 3 is
    # the retry: it must have lost the deferral's priority.
    async def handle(job: Greet, ctx: JobContext) -> None:
        n = seen.enter()
        seen.leave()
        if n == 1:
            raise Deferred(h.d(1))
        if n == 2:
            assert ctx.priority == 10, "the deferral came back first"
            raise Retryable("flaky")
        third_run.append(ctx)

    running = start(Worker(backend, queues, [seen.handler(Greet, handle)], clock=clock), h)

    producer.enqueue(Greet(name="limited"))
    h.wait_for(lambda: seen.attempts() == 3)
    h.wait_for(lambda: len(backend.acked(ALPHA)) == 3)

    ctx = third_run[0]
    assert ctx.attempt == 2, "the retry spent an attempt"
    assert ctx.deferrals == 1, "the deferral history is carried forward"
    assert ctx.priority == 0, "a retry must not keep jumping the backlog"

    acked = backend.acked(ALPHA)
    assert (acked[2].attempt, acked[2].deferrals, acked[2].priority) == (2, 1, 0), (
        "the envelope the backend saw agrees with what the handler was told"
    )
    assert backend.dead_letters(ALPHA) == []
    assert running.handle.settle_failures() == 0
    running.stop()


def test_deferral_on_a_queue_without_priorities_stays_at_zero(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    seen = recorder()
    second_run: list[JobContext] = []

    async def handle(job: Nudge, ctx: JobContext) -> None:
        n = seen.enter()
        seen.leave()
        if n == 1:
            raise Deferred(h.d(2), "rate limited")
        second_run.append(ctx)

    running = start(Worker(backend, queues, [seen.handler(Nudge, handle)], clock=clock), h)

    producer.enqueue(Nudge(id=1))
    h.wait_for(lambda: seen.attempts() == 2)

    ctx = second_run[0]
    assert ctx.priority == 0, "gamma is not a priority queue"
    assert ctx.deferrals == 1
    assert ctx.attempt == 1
    assert backend.dead_letters(GAMMA) == []
    assert running.handle.settle_failures() == 0
    running.stop()


def test_deferral_never_consults_the_retry_policy(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    seen = recorder()

    # Beta allows a single attempt: a *failure* dead-letters at once. A deferral must
    # not, however often it happens.
    async def handle(job: Ping, ctx: JobContext) -> None:
        n = seen.enter()
        seen.leave()
        assert ctx.max_attempts == 1
        assert ctx.attempt == 1
        assert ctx.is_last_attempt()
        assert ctx.deferrals == n - 1
        if n < 4:
            raise Deferred(h.d(1))

    running = start(Worker(backend, queues, [seen.handler(Ping, handle)], clock=clock), h)

    producer.enqueue(Ping(seq=1))
    h.wait_for(lambda: seen.attempts() == 4)
    h.wait_for(lambda: len(backend.acked(BETA)) == 4)

    assert backend.dead_letters(BETA) == [], (
        "three deferrals on a one-attempt queue must not dead-letter"
    )
    assert all(e.attempt == 1 for e in backend.acked(BETA))
    assert backend.acked(BETA)[-1].deferrals == 3, "only the deferral counter moved"
    assert running.handle.settle_failures() == 0
    running.stop()


def test_a_job_in_hold_survives_the_worker_shutting_down(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    seen = recorder()

    async def handle(job: Greet, ctx: JobContext) -> None:
        seen.enter()
        seen.leave()
        raise Deferred(h.d(3600))

    running = start(Worker(backend, queues, [seen.handler(Greet, handle)], clock=clock), h)

    job_id = producer.enqueue(Greet(name="held"))
    h.wait_for(lambda: len(backend.acked(ALPHA)) == 1)
    assert backend.deferred(ALPHA) == 1

    # The worker goes away while the job is still in hold.
    running.stop()
    assert seen.attempts() == 1
    assert backend.deferred(ALPHA) == 1, "still held, not lost"
    assert backend.pending(ALPHA) == 0

    # The backend is shared and stays open, so the hold still expires.
    h.elapse(3601)
    assert backend.deferred(ALPHA) == 0
    assert backend.pending(ALPHA) == 1
    waiting = backend.acked(ALPHA)
    assert waiting[0].job_id == job_id
    assert backend.dead_letters(ALPHA) == []


def test_a_deferred_job_beats_work_enqueued_while_it_waited(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    order: list[str] = []
    seen = recorder()

    def make_worker() -> Worker:
        """Runs one Greet at a time, recording the order; defers "limited" once."""

        async def handle(job: Greet, ctx: JobContext) -> None:
            seen.enter()
            seen.leave()
            order.append(job.name)
            if job.name == "limited" and ctx.deferrals == 0:
                raise Deferred(h.d(30))

        return Worker(
            backend,
            queues,
            [seen.handler(Greet, handle)],
            consume=[ALPHA],
            concurrency=1,
            clock=clock,
        )

    running = start(make_worker(), h)
    producer.enqueue(Greet(name="limited"))
    h.wait_for(lambda: backend.deferred(ALPHA) == 1)
    # Nothing consumes from here on, so the queue order is observable.
    running.stop()

    # Two ordinary jobs pile up while the deferred one is still in hold, and only then
    # does its delay elapse.
    producer.enqueue(Greet(name="backlog-1"))
    producer.enqueue(Greet(name="backlog-2"))
    assert backend.pending(ALPHA) == 2
    h.wait_for(lambda: backend.deferred(ALPHA) == 0)
    assert backend.pending(ALPHA) == 3

    running = start(make_worker(), h)
    h.wait_for(lambda: seen.attempts() == 4)

    assert order == ["limited", "limited", "backlog-1", "backlog-2"], (
        "the deferred job must overtake the backlog that built up"
    )
    assert running.handle.settle_failures() == 0
    running.stop()


def test_a_failed_defer_is_counted_as_a_settle_failure(
    h: WorkerEnv, style: Style, backend: Inspectable, queues: QueueSet, clock: Clock
) -> None:
    inner = backend
    wrapped = Unsettleable(inner)
    producer = Producer(wrapped, queues, clock=clock)

    async def handle(job: Greet, ctx: JobContext) -> None:
        raise Deferred(h.d(1))

    worker = Worker(wrapped, queues, [style.handler(Greet, handle)], clock=clock)
    running = start(worker, h)

    producer.enqueue(Greet(name="ada"))
    h.wait_for(lambda: running.handle.settle_failures() == 1)

    assert inner.acked(ALPHA) == []
    assert inner.deferred(ALPHA) == 0
    running.stop()


def test_duplicate_handler_fails_the_build(
    h: WorkerEnv, style: Style, backend: Inspectable, queues: QueueSet
) -> None:
    with pytest.raises(DuplicateHandlerError) as err:
        Worker(backend, queues, [style.noop(Greet), style.noop(Greet)])
    assert err.value.job_type == Greet.NAME


def test_queues_restricts_consumption_to_the_chosen_subset(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    alpha_seen = recorder()
    beta_seen = recorder()

    async def on_greet(job: Greet, ctx: JobContext) -> None:
        alpha_seen.enter()
        alpha_seen.leave()

    async def on_ping(job: Ping, ctx: JobContext) -> None:
        beta_seen.enter()
        beta_seen.leave()

    worker = Worker(
        backend,
        queues,
        [alpha_seen.handler(Greet, on_greet), beta_seen.handler(Ping, on_ping)],
        consume=[ALPHA, ALPHA],
        clock=clock,
    )
    assert len(worker.queues) == 1, "duplicates must be collapsed"
    running = start(worker, h)

    producer.enqueue(Ping(seq=1))
    producer.enqueue(Greet(name="ada"))
    h.wait_for(lambda: alpha_seen.attempts() == 1)

    assert beta_seen.attempts() == 0
    assert backend.pending(BETA) == 1, "the beta message is still on its queue, untouched"
    running.stop()


def test_graceful_shutdown_waits_for_in_flight_jobs(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    started = recorder()
    finished = recorder()

    async def handle(job: Greet, ctx: JobContext) -> None:
        started.enter()
        await style.sleep(30)
        finished.enter()
        finished.leave()
        started.leave()

    running = start(Worker(backend, queues, [started.handler(Greet, handle)], clock=clock), h)

    producer.enqueue(Greet(name="slow"))
    h.wait_for(lambda: started.attempts() == 1)
    assert finished.attempts() == 0

    running.handle.shutdown()
    assert running.handle.is_shutdown()
    assert running.join() is None

    assert finished.attempts() == 1, "shutdown must not abandon a running job"
    assert len(backend.acked(ALPHA)) == 1
    assert not backend.is_closed(), "closing the backend is opt-in"


def test_shutdown_processes_the_deliveries_it_already_pulled(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    published = 6
    seen = recorder()

    # Prefetch 4 on alpha with room for one job at a time: the consumer keeps pulling
    # while the dispatcher is busy, so deliveries pile up in between.
    async def handle(job: Greet, ctx: JobContext) -> None:
        seen.enter()
        await style.sleep(5)
        seen.leave()

    worker = Worker(
        backend, queues, [seen.handler(Greet, handle)], consume=[ALPHA], concurrency=1, clock=clock
    )
    running = start(worker, h)

    for i in range(published):
        producer.enqueue(Greet(name=f"job-{i}"))
    # One job is running; the rest are buffered in the worker, in the backend's
    # consumer, or still on the queue.
    h.wait_for(lambda: seen.attempts() == 1)
    # Where deliveries are pulled by polling (the embedded backend), a loaded machine
    # can reach this point before a second one left the queue: wait until the worker
    # holds at least one more than it runs, as the test means to shut it down.
    h.wait_for(lambda: backend.pending(ALPHA) <= published - 2)

    running.handle.shutdown()
    assert running.join() is None

    acked = len(backend.acked(ALPHA))
    pending = backend.pending(ALPHA)
    assert acked + pending == published, (
        f"{acked} acked + {pending} pending must account for every message"
    )
    assert acked >= 2, f"buffered deliveries must be processed, not dropped; only {acked} were"
    assert acked == seen.attempts(), "every job that ran was settled"
    assert backend.dead_letters(ALPHA) == []


def test_closing_the_backend_on_shutdown_is_opt_in(
    h: WorkerEnv, style: Style, backend: Inspectable, queues: QueueSet, clock: Clock
) -> None:
    running = start(Worker(backend, queues, [style.noop(Greet)], clock=clock), h)
    running.stop()
    assert not backend.is_closed(), "default must leave the backend alone"

    # Still usable afterwards: this is what a shared Producer relies on.
    Producer(backend, queues, clock=clock).enqueue(Greet(name="after"))

    worker = Worker(
        backend, queues, [style.noop(Greet)], close_backend_on_shutdown=True, clock=clock
    )
    assert "close_backend_on_shutdown=True" in repr(worker)
    running = start(worker, h)
    running.stop()
    assert backend.is_closed()


def test_failures_to_settle_are_counted(
    h: WorkerEnv, style: Style, backend: Inspectable, queues: QueueSet, clock: Clock
) -> None:
    inner = backend
    wrapped = Unsettleable(inner)
    producer = Producer(wrapped, queues, clock=clock)

    worker = Worker(wrapped, queues, [style.noop(Greet)], clock=clock)
    handle = worker.handle
    assert handle.settle_failures() == 0
    running = start(worker, h)

    producer.enqueue(Greet(name="ada"))
    h.wait_for(lambda: handle.settle_failures() == 1)

    assert inner.acked(ALPHA) == [], "the handler ran, but the broker never heard about it"
    assert "settle_failures=1" in repr(handle)
    running.stop()


def test_concurrency_is_capped(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    seen = recorder()

    async def handle(job: Greet, ctx: JobContext) -> None:
        seen.enter()
        await style.sleep(1)
        seen.leave()

    worker = Worker(backend, queues, [seen.handler(Greet, handle)], concurrency=2, clock=clock)
    assert worker.concurrency == 2
    running = start(worker, h)

    for i in range(8):
        producer.enqueue(Greet(name=f"job-{i}"))
    h.wait_for(lambda: len(backend.acked(ALPHA)) == 8)

    assert seen.attempts() == 8
    assert seen.max_running() <= 2, f"ran {seen.max_running()} jobs at once"
    running.stop()


def test_default_concurrency_is_the_sum_of_prefetch(
    h: WorkerEnv, style: Style, backend: Inspectable, queues: QueueSet
) -> None:
    worker = Worker(backend, queues, [style.noop(Greet)])
    assert worker.concurrency == 7, "alpha prefetch 4 + beta prefetch 2 + gamma prefetch 1"
    assert len(worker.queues) == 3


def test_lost_backend_ends_the_run_with_an_error(
    h: WorkerEnv, style: Style, backend: Inspectable, queues: QueueSet, clock: Clock
) -> None:
    running = start(Worker(backend, queues, [style.noop(Greet)], clock=clock), h)

    # Simulate the connection going away underneath the worker, once its consumers
    # have actually registered with the backend: every queue's, gamma's too (the seed
    # names alpha and beta; on a real broker gamma's start can still be in flight, and a
    # backend closed under a start is a failure to start, not a consumer that stopped).
    h.wait_for(lambda: all(backend.consumer_count(q) == 1 for q in (ALPHA, BETA, GAMMA)))
    backend.close()

    error = running.join()
    assert isinstance(error, ConsumerStoppedError), f"unexpected result: {error!r}"
    assert error.queue.startswith("test.")


def test_shutdown_before_run_stops_immediately(
    h: WorkerEnv, style: Style, backend: Inspectable, queues: QueueSet, clock: Clock
) -> None:
    worker = Worker(backend, queues, [style.noop(Greet)], clock=clock)
    handle = worker.handle
    handle.shutdown()
    done = threading.Event()

    def run() -> None:
        worker.run()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(5), "run() must return at once when shutdown came first"
    assert not backend.is_closed()
    assert "shutdown=True" in repr(handle)


def test_handlers_of_different_job_types_are_routed_independently(
    h: WorkerEnv,
    style: Style,
    backend: Inspectable,
    producer: Producer,
    queues: QueueSet,
    clock: Clock,
    recorder: MakeRecorder,
) -> None:
    greets = recorder()
    pings = recorder()

    async def on_greet(job: Greet, ctx: JobContext) -> None:
        greets.enter()
        greets.leave()

    async def on_ping(job: Ping, ctx: JobContext) -> None:
        pings.enter()
        pings.leave()

    worker = Worker(
        backend,
        queues,
        [greets.handler(Greet, on_greet), pings.handler(Ping, on_ping)],
        clock=clock,
    )
    running = start(worker, h)

    producer.enqueue(Greet(name="ada"))
    producer.enqueue(Ping(seq=1))
    producer.enqueue(Ping(seq=2))

    # Paused time in the seed resumed only once every task was idle: here, once the
    # worker holds no unsettled delivery.
    h.wait_for(
        lambda: greets.attempts() == 1 and pings.attempts() == 2 and running.handle.in_flight() == 0
    )
    assert len(backend.acked(ALPHA)) == 1
    assert len(backend.acked(BETA)) == 2
    running.stop()
