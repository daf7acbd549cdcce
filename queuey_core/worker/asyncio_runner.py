"""The worker's event loop: where ``async def`` handlers run, under caps of their own.

A job thread takes a delivery as for any job, runs the seed's checks, and for an async
handler hands the job over here instead of running it: it takes a permit of the job's
async cap (waiting while the cap is reached, so it pulls nothing more meanwhile), starts
the coroutine on the loop and goes back for the next delivery. The coroutine runs under
its timeout (:mod:`.async_job`); its settle (hooks, logs, the broker, which may block)
runs on a small pool of settle threads, never on the loop.

Caps: a queue with ``async_concurrency`` set has a cap of its own for its async jobs;
the others share one of ``Worker(async_concurrency=...)``, by default the worker's
``concurrency``.

Owns: the loop's thread, the permits, the settle threads, draining and cancelling the
coroutines. Must never: run more async jobs of a cap at once than the cap, block the loop
itself, or lose a delivery: every coroutine handed over is settled (or, after a forced
stop, given back with the connection) before :meth:`AsyncRunner.drain` returns.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import logging
import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any

from queuey_core.aio.cancel import LoopCancelEvent
from queuey_core.backends.base import Delivery
from queuey_core.clock import Clock
from queuey_core.context import JobContext
from queuey_core.handlers import JobHandler
from queuey_core.jobs import Job
from queuey_core.worker.async_job import (
    AsyncJob,
    AsyncRun,
    AsyncSettler,
    Cap,
    Surroundings,
    run_job,
)
from queuey_core.worker.handle import WorkerHandle
from queuey_core.worker.loop_watch import LoopWatch
from queuey_core.worker.outcome import SUCCESS, Outcome

logger = logging.getLogger(__name__)

#: Settle threads at most: a settle waits on the broker for about a millisecond.
SETTLE_THREADS = 8


class AsyncRunner:
    """One event loop on a thread of its own, running the async jobs handed to it.

    Args:
        handle: the worker's handle (jobs in flight, stuck jobs).
        clock: time source for the job timeouts.
        grace: seconds a cancelled coroutine gets to end before it is reported as stuck.
        caps: async jobs running at once, for the queues that have a cap of their own.
        shared_cap: the cap every other queue's async jobs share.
        block_warning: seconds the loop may go without running before it is reported as
            blocked (a coroutine calling blocking code); None: not watched.
    """

    def __init__(
        self,
        *,
        handle: WorkerHandle,
        clock: Clock,
        grace: float,
        caps: Mapping[str, int],
        shared_cap: int,
        block_warning: float | None = 1.0,
    ) -> None:
        self._handle = handle
        self._clock = clock
        self._grace = grace
        self._shared = Cap(shared_cap)
        self._caps = {queue: Cap(cap) for queue, cap in caps.items()}
        self._block_warning = block_warning
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._watch: LoopWatch | None = None
        # One lock for the caps, the count of jobs handed over and the inbox: a job
        # takes it once on its way in and once on its way out. ``_freed`` is waited on
        # by a job thread at its cap and by a drain; ``_waiting`` counts them, so a job
        # that ends wakes nobody when nobody waits.
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._waiting = 0
        self._running = 0
        # Jobs handed over, taken by the loop in batches: one wake-up of the loop for
        # all that arrive while it is busy, not one a job.
        self._inbox: collections.deque[tuple[AsyncJob, Cap, contextvars.Context]] = (
            collections.deque()
        )
        self._inbox_called = False
        # Settles, taken by the settle threads: (job, outcome, the cap to give a permit
        # back to once settled, or None when the coroutine still holds it).
        self._settles: queue.SimpleQueue[tuple[AsyncJob, Outcome, Cap | None] | None] = (
            queue.SimpleQueue()
        )
        self._settlers: list[threading.Thread] = []
        self._forced = False
        # task -> its run: the loop's thread only (the watch reads a copy).
        self._runs: dict[asyncio.Task[None], AsyncRun] = {}
        self._around = self._surroundings()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop async jobs run on."""
        return self._loop

    def cancel_event(self) -> LoopCancelEvent:
        """A new job's cancellation flag, awaitable on this loop."""
        return LoopCancelEvent(self._loop)

    def running(self) -> int:
        """Async jobs handed over and not settled yet."""
        with self._lock:
            return self._running

    def start(self) -> None:
        """Start the loop's thread (and its watch), with a fresh loop after a
        :meth:`drain` (a worker may ``run()`` again)."""
        if self._thread is not None and self._thread.is_alive():
            return
        if self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
            self._around = self._surroundings()
            self._forced = False
        self._thread = threading.Thread(target=self._serve, name="queuey-asyncio", daemon=True)
        self._thread.start()
        self._settlers = [
            threading.Thread(target=self._settle_loop, name=f"queuey-async-settle-{i}", daemon=True)
            for i in range(SETTLE_THREADS)
        ]
        for thread in self._settlers:
            thread.start()
        if self._block_warning is not None:
            self._watch = LoopWatch(
                self._loop,
                self._thread,
                threshold=self._block_warning,
                handle=self._handle,
                current=self.current_job,
            )
            self._watch.start()

    def _surroundings(self) -> Surroundings:
        return Surroundings(
            self._loop, self._clock, self._grace, self._stuck, self._stuck_ended, self._ended
        )

    def submit(
        self,
        handler: JobHandler,
        job: Job,
        ctx: JobContext,
        queue: str,
        timeout: float | None,
        fields: dict[str, Any],
        *,
        delivery: Delivery,
        route: Any,
        settler: AsyncSettler,
        timed_out: Outcome,
        success_here: bool = False,
    ) -> None:
        """Run a job on the loop (from a job thread), once a permit of its cap is free.

        Waits while the cap is reached: the job thread pulls nothing more meanwhile.
        ``settler`` settles ``delivery`` for an outcome and tells the hooks of a timeout
        (before its settle); both may block and run on a settle thread, but for a
        success when ``success_here`` (its delivery acks early, or settles in process):
        that ack waits for nothing, and is sent from the loop (its hooks run there too).
        """
        item = AsyncJob(
            handler,
            job,
            ctx,
            queue,
            timeout,
            fields,
            delivery,
            route,
            settler,
            timed_out,
            success_here,
        )
        cap = self._caps.get(item.queue, self._shared)
        self._handle.record_in_flight(1)
        # The job thread's context (the job's span, when tracing) goes with it.
        entry = (item, cap, contextvars.copy_context())
        with self._lock:
            if cap.used >= cap.limit:
                self._wait_for(lambda: cap.used < cap.limit)
            cap.used += 1
            self._running += 1
            self._inbox.append(entry)
            if self._inbox_called:
                return
            self._inbox_called = True
        self._loop.call_soon_threadsafe(self._take_inbox)

    def _wait_for(self, ready: Callable[[], bool], timeout: float | None = None) -> bool:
        """Wait on ``_freed`` (its lock held) until ``ready()``; counted as a waiter."""
        self._waiting += 1
        try:
            return self._freed.wait_for(ready, timeout)
        finally:
            self._waiting -= 1

    def drain(self) -> None:
        """Wait for every coroutine handed over to end and be settled, then stop the loop."""
        with self._lock:
            self._wait_for(lambda: not self._running)
        self.close()

    def cancel_all(self, wait: float) -> int:
        """Cancel every running coroutine (a forced stop) and wait up to ``wait`` seconds
        for them to end (their ``finally`` blocks run); their deliveries are not settled.
        Returns how many were still running after the wait."""
        done = threading.Event()

        def cancel() -> None:
            self._forced = True  # and any job handed over from now on
            for task, run in list(self._runs.items()):
                run.forced = True
                run.item.ctx.cancel_event.set()
                task.cancel("the worker is stopping at once")
            done.set()

        try:
            self._loop.call_soon_threadsafe(cancel)
        except RuntimeError:  # closed: nothing runs
            return 0
        done.wait(wait)
        with self._lock:
            self._wait_for(lambda: not self._running, wait)
            return self._running

    def close(self) -> None:
        """Stop the loop and the settle threads (after :meth:`drain`, or when unused)."""
        if self._watch is not None:
            self._watch.stop()
        if self._thread is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        elif self._thread is None and not self._loop.is_closed():
            self._loop.close()
        for _ in self._settlers:
            self._settles.put(None)
        for thread in self._settlers:
            thread.join()

    # -- on the loop's thread ---------------------------------------------------------

    def _serve(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            # Tasks a handler started and left behind: cancelled, not left to warn.
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()

    def _take_inbox(self) -> None:
        with self._lock:
            taken = list(self._inbox)
            self._inbox.clear()
            self._inbox_called = False
        create_task, runs, around, forced = (
            self._loop.create_task,
            self._runs,
            self._around,
            self._forced,
        )
        for item, cap, context in taken:
            run = AsyncRun(item, cap, around, forced)
            run.task = task = create_task(run_job(run), context=context)
            runs[task] = run

    def _ended(self, run: AsyncRun, outcome: Outcome | None) -> None:
        """A job's coroutine is over: settle it (here, or on a settle thread), or give
        its permit back if it is not to be settled."""
        del self._runs[run.task]  # type: ignore[arg-type]
        item, cap = run.item, run.cap
        if outcome is SUCCESS and item.success_here:  # nothing to wait for: here
            self._settle_here(item, outcome, cap)
        elif outcome is not None:  # the settle thread gives the permit back, settled
            self._settles.put((item, outcome, cap))
        else:
            self._release(cap)

    def _release(self, cap: Cap) -> None:
        """A job is over (settled, or never to be): its permit and counts given back."""
        self._handle.record_in_flight(-1)
        with self._lock:
            cap.used -= 1
            self._running -= 1
            if self._waiting:
                self._freed.notify_all()

    # -- on the settle threads ----------------------------------------------------------

    def _settle_loop(self) -> None:
        while (taken := self._settles.get()) is not None:
            self._settle_here(*taken)

    def _settle_here(self, item: AsyncJob, outcome: Outcome, cap: Cap | None) -> None:
        """Settle ``item`` for ``outcome`` (the hooks, the logs, the broker), then give
        its permit back (None: the coroutine still holds it)."""
        try:
            item.settler.settle_async(item, outcome)
        except BaseException:  # never expected: the dispatcher's settle logs its own
            logger.critical("worker bug while settling an async job", exc_info=True)
        finally:
            if cap is not None:
                self._release(cap)

    def _stuck(self, item: AsyncJob) -> None:
        """On the clock's thread: a coroutine still running ``grace`` after its timeout."""
        self._handle.record_stuck(1)
        logger.error(
            "async job still running %gs after its timeout was cancelled; settling it as "
            "timed out, its permit stays taken until it ends",
            self._grace,
            extra=item.fields,
        )
        self._settles.put((item, item.timed_out, None))

    def _stuck_ended(self, item: AsyncJob) -> None:
        self._handle.record_stuck(-1)
        logger.warning("stuck async job ended at last", extra=item.fields)

    def current_job(self) -> AsyncJob | None:
        """The job whose coroutine the loop is running right now, if any (any thread)."""
        task = asyncio.current_task(self._loop) if self._thread is not None else None
        run = self._runs.get(task) if task is not None else None
        return run.item if run is not None else None
