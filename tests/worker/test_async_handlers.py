"""``async def`` handlers: what the event loop gives that threads cannot, and what it
must not take away (caps, timeouts, stuck jobs, a blocked loop, a forced stop).

All in memory on a ManualClock: timeouts and graces fire when the test advances the
clock, never by sleeping. Only the blocked-loop watch runs on real time, since what it
watches is the loop's real time; it is told to report after 50 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import ClassVar

import pytest

from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import JobInfo
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Retryable
from queuey_core import Worker
from queuey_core import WorkerHooks
from queuey_core import handler
from queuey_core.handlers import is_async
from tests.harness import Memory
from tests.support import ALPHA
from tests.support import Greet
from tests.support import Ping
from tests.support import Recorder
from tests.support import start
from tests.support import wait_for
from tests.worker.styles import manual_sleep

WIDE = "test.wide"


class Wide(Job):
    NAME: ClassVar[str] = "test.wide_job"
    QUEUE: ClassVar[str] = WIDE
    n: int


class Events(WorkerHooks):
    """Every job event, in order, as (event, job type, attempt)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str, int]] = []
        self.infos: list[JobInfo] = []

    def _add(self, event: str, job: JobInfo) -> None:
        with self.lock:
            self.seen.append((event, job.job_type, job.attempt))
            self.infos.append(job)

    def on_job_started(self, job: JobInfo) -> None:
        self._add("started", job)

    def on_job_succeeded(self, job: JobInfo) -> None:
        self._add("succeeded", job)

    def on_job_failed(self, job: JobInfo) -> None:
        self._add("failed", job)

    def on_job_timed_out(self, job: JobInfo) -> None:
        self._add("timed_out", job)

    def events(self) -> list[tuple[str, str, int]]:
        with self.lock:
            return list(self.seen)


def test_an_async_def_is_registered_like_a_plain_function() -> None:
    @handler
    async def greet(job: Greet, ctx: JobContext) -> None:
        return None

    @handler
    def ping(job: Ping, ctx: JobContext) -> None:
        return None

    assert isinstance(greet, Handler)
    assert greet.job_type is Greet
    assert is_async(greet)
    assert not is_async(ping)


def test_async_and_plain_handlers_run_side_by_side_in_one_worker(mem: Memory) -> None:
    backend, producer, queues, clock = mem
    where: dict[str, str] = {}

    @handler
    async def greet(job: Greet, ctx: JobContext) -> None:
        asyncio.get_running_loop()  # raises on a thread without a running loop
        where["greet"] = threading.current_thread().name

    @handler
    def ping(job: Ping, ctx: JobContext) -> None:
        where["ping"] = threading.current_thread().name

    hooks = Events()
    running = start(Worker(backend, queues, [greet, ping], clock=clock, hooks=[hooks]), clock)
    producer.enqueue(Greet(name="ada"))
    producer.enqueue(Ping(seq=1))
    wait_for(lambda: len(backend.acked(ALPHA)) == 1 and len(backend.acked("test.beta")) == 1)
    running.stop()

    assert where["greet"] == "queuey-asyncio", "the async handler ran on the worker's loop"
    assert where["ping"].startswith("queuey-job-"), "the plain one on a job thread"
    assert sorted(hooks.events()) == [
        ("started", Greet.NAME, 1),
        ("started", Ping.NAME, 1),
        ("succeeded", Greet.NAME, 1),
        ("succeeded", Ping.NAME, 1),
    ]
    assert all(i.duration is not None for i in hooks.infos if i.duration is not None)


def test_async_jobs_are_counted_in_the_metrics_as_plain_ones_are(mem: Memory) -> None:
    from queuey_core.observability import WorkerMetrics  # noqa: PLC0415

    backend, producer, queues, clock = mem

    async def body(job: Greet, ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise Retryable("first attempt fails")

    metrics = WorkerMetrics()
    worker = Worker(backend, queues, [Handler(Greet, body)], clock=clock, hooks=[metrics])
    running = start(worker, clock)
    producer.enqueue(Greet(name="ada"))
    wait_for(lambda: len(backend.acked(ALPHA)) == 2, clock)
    running.stop()

    def total(outcome: str) -> float | None:
        labels = {"job_type": Greet.NAME, "outcome": outcome}
        return metrics.registry.get_sample_value("queuey_jobs_total", labels)

    assert total("retried") == 1
    assert total("succeeded") == 1


def test_a_timeout_cancels_the_coroutine_and_its_finally_blocks_run(mem: Memory) -> None:
    backend, producer, queues, clock = mem
    cleaned: list[int] = []
    cancelled_seen: list[bool] = []

    async def body(job: Greet, ctx: JobContext) -> None:
        if ctx.attempt > 1:
            return
        try:
            await manual_sleep(clock, 3600)
        finally:
            cancelled_seen.append(ctx.cancelled)
            cleaned.append(ctx.attempt)

    hooks = Events()
    worker = Worker(
        backend, queues, [Handler(Greet, body)], job_timeout=5, clock=clock, hooks=[hooks]
    )
    running = start(worker, clock)
    producer.enqueue(Greet(name="slow"))
    wait_for(lambda: len(backend.acked(ALPHA)) == 2, clock)
    running.stop()

    assert cleaned == [1], "the first attempt's finally ran when its timeout cancelled it"
    assert cancelled_seen == [True], "and its cancellation flag was set"
    assert worker.handle.stuck_jobs() == 0, "a cancelled coroutine is not stuck"
    events = hooks.events()
    assert events[:3] == [
        ("started", Greet.NAME, 1),
        ("timed_out", Greet.NAME, 1),
        ("failed", Greet.NAME, 1),
    ], events
    assert events[-1] == ("succeeded", Greet.NAME, 2)


def test_a_coroutine_that_ignores_its_cancellation_is_reported_stuck_and_settled(
    mem: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    backend, producer, queues, clock = mem
    release = threading.Event()

    async def body(job: Greet, ctx: JobContext) -> None:
        if ctx.attempt > 1:
            return
        while not release.is_set():
            # Swallowed: as a thread that ignores its JobTimeout.
            with contextlib.suppress(asyncio.CancelledError):
                await manual_sleep(clock, 1)

    worker = Worker(
        backend, queues, [Handler(Greet, body)], job_timeout=5, timeout_grace=10, clock=clock
    )
    running = start(worker, clock)
    producer.enqueue(Greet(name="stubborn"))
    wait_for(lambda: worker.handle.stuck_jobs() == 1, clock)
    wait_for(lambda: len(backend.acked(ALPHA)) == 2, clock)

    assert any("still running 10s after its timeout" in r.message for r in caplog.records)
    assert worker.handle.in_flight() >= 1, "its permit stays taken while it runs"
    release.set()
    wait_for(lambda: worker.handle.stuck_jobs() == 0, clock)
    running.stop()
    assert len(backend.acked(ALPHA)) == 2, "settled once, by the watchdog, then the retry"
    assert backend.dead_letters(ALPHA) == []


def test_a_coroutine_that_blocks_the_loop_is_reported_with_its_job_and_stack(
    mem: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    backend, producer, queues, clock = mem
    gate = threading.Event()

    async def blocking_body(job: Greet, ctx: JobContext) -> None:
        gate.wait(30)  # blocking call inside a coroutine: the loop stops

    worker = Worker(
        backend,
        queues,
        [Handler(Greet, blocking_body)],
        clock=clock,
        loop_block_warning=0.05,
    )
    running = start(worker, clock)
    job_id = producer.enqueue(Greet(name="blocker"))
    try:
        wait_for(lambda: worker.handle.stuck_jobs() == 1)
        reports = [r for r in caplog.records if "event loop blocked" in r.message]
        assert reports, "the blocked loop was reported"
        report = reports[0]
        assert report.levelno == logging.ERROR
        assert getattr(report, "job_id", None) == str(job_id), "naming the job that blocks"
        assert "blocking_body" in getattr(report, "traceback", ""), "and where it is"
    finally:
        gate.set()
    wait_for(lambda: worker.handle.stuck_jobs() == 0 and len(backend.acked(ALPHA)) == 1)
    running.stop()
    assert any("event loop runs again" in r.message for r in caplog.records)


def test_a_queue_gives_its_async_jobs_a_cap_of_their_own(mem: Memory) -> None:
    backend, _, _, clock = mem
    queues = QueueSet([QueueConfig(WIDE, prefetch=20, async_concurrency=5)])
    from queuey_core import Producer  # noqa: PLC0415

    producer = Producer(backend, queues, clock=clock)
    seen = Recorder()
    release = threading.Event()

    async def body(job: Wide, ctx: JobContext) -> None:
        seen.enter()
        while not release.is_set():
            await asyncio.sleep(0.002)
        seen.leave()

    # One job thread: without a cap of their own, async jobs could not outnumber it.
    worker = Worker(backend, queues, [Handler(Wide, body)], concurrency=1, clock=clock)
    running = start(worker, clock)
    producer.enqueue_many([Wide(n=i) for i in range(12)])
    wait_for(lambda: seen.attempts() == 5)  # none has ended: five run at once
    assert worker.handle.in_flight() >= 5
    release.set()
    wait_for(lambda: len(backend.acked(WIDE)) == 12)
    running.stop()
    assert seen.max_running() == 5, f"ran {seen.max_running()} at once, the queue's cap is 5"


def test_a_queue_with_an_async_cap_adds_few_threads_to_the_default_concurrency(
    mem: Memory,
) -> None:
    backend, _, _, _ = mem
    queues = QueueSet(
        [
            QueueConfig(WIDE, prefetch=1000, async_concurrency=1000),
            QueueConfig(ALPHA, prefetch=4, max_priority=10),
        ]
    )
    worker = Worker(backend, queues, [Handler(Wide, lambda job, ctx: None)])
    assert worker.concurrency == 4 + 4, "four threads hand a thousand async jobs over"


def test_without_a_cap_of_their_own_async_jobs_keep_to_the_worker_concurrency(
    mem: Memory,
) -> None:
    backend, producer, queues, clock = mem
    seen = Recorder()

    async def body(job: Greet, ctx: JobContext) -> None:
        seen.enter()
        await manual_sleep(clock, 1)
        seen.leave()

    worker = Worker(backend, queues, [Handler(Greet, body)], concurrency=3, clock=clock)
    running = start(worker, clock)
    producer.enqueue_many([Greet(name=str(i)) for i in range(10)])
    wait_for(lambda: len(backend.acked(ALPHA)) == 10, clock)
    running.stop()
    assert seen.max_running() == 3


def test_a_forced_stop_cancels_running_coroutines_and_leaves_them_unsettled(
    mem: Memory,
) -> None:
    backend, producer, queues, clock = mem
    cleaned: list[str] = []
    started: list[str] = []

    async def body(job: Greet, ctx: JobContext) -> None:
        started.append(job.name)
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append(job.name)

    worker = Worker(backend, queues, [Handler(Greet, body)], clock=clock)
    running = start(worker, clock)
    producer.enqueue(Greet(name="a"))
    producer.enqueue(Greet(name="b"))
    wait_for(lambda: len(started) == 2)

    assert worker.cancel_async_jobs(wait=10) == 0, "every coroutine ended"
    assert sorted(cleaned) == ["a", "b"], "their finally blocks ran"
    running.stop()
    assert backend.acked(ALPHA) == [], "a forced stop settles nothing"
    assert backend.dead_letters(ALPHA) == []


def test_ctx_wait_async_returns_on_cancellation_without_blocking_the_loop() -> None:
    from queuey_core.aio.cancel import LoopCancelEvent  # noqa: PLC0415

    async def main() -> tuple[bool, bool, int]:
        loop = asyncio.get_running_loop()
        ctx = _context(LoopCancelEvent(loop))
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0)
                ticks += 1

        ticker = asyncio.create_task(tick())
        early = await ctx.wait_async(0.01)  # not cancelled: times out
        threading.Timer(0.02, ctx.cancel_event.set).start()  # set from another thread
        late = await ctx.wait_async(30)
        await asyncio.wait_for(ctx.wait_cancelled(), 5)
        ticker.cancel()
        return early, late, ticks

    early, late, ticks = asyncio.run(main())
    assert (early, late) == (False, True)
    assert ticks > 10, "the loop ran on while the job waited"


def _context(event: threading.Event) -> JobContext:
    import uuid  # noqa: PLC0415

    return JobContext(
        job_id=uuid.uuid4(),
        job_type="t",
        queue="q",
        attempt=1,
        max_attempts=1,
        deferrals=0,
        priority=0,
        age=0.0,
        cancel_event=event,
    )
