"""Job timeouts on threads: interruption, cancellation flag, and the concurrency cap.

These need the manual clock: they advance time past a timeout and its grace period
while a thread is deliberately stuck, and check that nothing else started meanwhile,
which real time can only show by sleeping. Timeouts on RabbitMQ are covered by the
seed's ``test_job_timeout_is_a_retryable_failure[rabbitmq]``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from queuey_core import JobContext
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import RetryPolicy
from queuey_core import Worker
from tests.harness import Memory
from tests.support import ALPHA
from tests.support import Greet
from tests.support import Recorder
from tests.support import start
from tests.support import wait_for

MakeRecorder = Callable[[], Recorder]


def test_a_timed_out_job_is_interrupted_and_sees_its_cancellation_flag(
    mem: Memory, recorder: MakeRecorder
) -> None:
    backend, producer, queues, clock = mem
    seen = recorder()
    contexts: list[JobContext] = []
    cleaned_up = threading.Event()

    def handle(job: Greet, ctx: JobContext) -> None:
        n = seen.enter()
        contexts.append(ctx)
        try:
            if n == 1:
                while True:  # pure Python: the asynchronous JobTimeout lands here
                    clock.sleep(1)
        finally:
            cleaned_up.set()
            seen.leave()

    worker = Worker(backend, queues, [seen.handler(Greet, handle)], job_timeout=5, clock=clock)
    running = start(worker, clock)

    producer.enqueue(Greet(name="slow"))
    wait_for(lambda: len(backend.acked(ALPHA)) == 2, clock)

    assert cleaned_up.is_set(), "finally blocks run when a job is interrupted"
    assert contexts[0].cancelled, "the timed-out job's cancellation flag is set"
    assert not contexts[1].cancelled, "the retry starts with a clear flag"
    assert contexts[1].attempt == 2, "a timeout is a retryable failure"
    assert running.handle.stuck_jobs() == 0
    running.stop()


def test_a_stuck_job_keeps_its_slot_until_its_thread_really_returns(
    mem: Memory, recorder: MakeRecorder
) -> None:
    backend, producer, queues, clock = mem
    seen = recorder()
    release = threading.Event()
    contexts: list[JobContext] = []

    def handle(job: Greet, ctx: JobContext) -> None:
        seen.enter()
        contexts.append(ctx)
        try:
            if job.name == "stuck" and ctx.attempt == 1:
                # A wait inside C: no asynchronous exception can land until it returns,
                # like a thread blocked in a driver call.
                release.wait()
        finally:
            seen.leave()

    worker = Worker(
        backend,
        queues,
        [seen.handler(Greet, handle)],
        consume=[ALPHA],
        concurrency=1,
        job_timeout=5,
        timeout_grace=2,
        clock=clock,
    )
    running = start(worker, clock)

    producer.enqueue(Greet(name="stuck"))
    producer.enqueue(Greet(name="waiting"))
    wait_for(lambda: running.handle.stuck_jobs() == 1, clock)

    # The watchdog settled the stuck job as timed out, so the broker is not kept waiting:
    # its original is acked and the retry (attempt 2) is on its way.
    wait_for(lambda: len(backend.acked(ALPHA)) == 1, clock)
    assert backend.acked(ALPHA)[0].attempt == 1
    assert contexts[0].cancelled

    # But its thread still runs, so its slot is still taken: nothing else may start.
    for _ in range(50):
        clock.advance(1)
    assert seen.attempts() == 1, "the concurrency cap holds while a timed-out job is stuck"

    release.set()
    wait_for(lambda: seen.attempts() == 3, clock)
    wait_for(lambda: len(backend.acked(ALPHA)) == 3, clock)
    assert seen.max_running() == 1, f"ran {seen.max_running()} jobs at once"
    assert running.handle.stuck_jobs() == 0, "the stuck thread returned at last"
    assert running.handle.settle_failures() == 0, "the late thread did not settle twice"
    assert "stuck_jobs=0" in repr(running.handle)
    running.stop()


def test_a_queue_job_timeout_overrides_the_worker_one(
    clock: ManualClock, recorder: MakeRecorder
) -> None:
    queues = QueueSet([QueueConfig(ALPHA, prefetch=1, job_timeout=2, retry=RetryPolicy(1))])
    backend = MemoryBackend(clock=clock)
    seen = recorder()

    def handle(job: Greet, ctx: JobContext) -> None:
        seen.enter()
        try:
            clock.sleep(10)
        finally:
            seen.leave()

    worker = Worker(backend, queues, [seen.handler(Greet, handle)], job_timeout=60, clock=clock)
    running = start(worker, clock)
    Producer(backend, queues, clock=clock).enqueue(Greet(name="x"))
    wait_for(lambda: bool(backend.dead_letters(ALPHA)), clock)
    assert "timed out after 2s" in backend.dead_letters(ALPHA)[0].reason
    running.stop()
