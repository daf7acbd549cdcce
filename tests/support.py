"""The seed's fixtures: its queue set, its jobs, and the helpers its tests use."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar
from typing import Protocol
from typing import TypeVar

from queuey_core import Backend
from queuey_core import Backoff
from queuey_core import ConsumerEnded
from queuey_core import Deferred
from queuey_core import Delivery
from queuey_core import Envelope
from queuey_core import Fatal
from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Retryable
from queuey_core import RetryPolicy
from queuey_core import Worker
from queuey_core import WorkerHandle
from queuey_core import WorkerHooks

ALPHA = "test.alpha"
BETA = "test.beta"
GAMMA = "test.gamma"

J = TypeVar("J", bound=Job)

BACKOFF = Backoff(initial=1.0, max=600.0)


def seed_queues(backoff_initial: float = 1.0) -> QueueSet:
    """alpha: prefetch 4, ten priorities, 3 attempts; beta: prefetch 2, 1 attempt;
    gamma: prefetch 1, not a priority queue."""
    backoff = Backoff(initial=backoff_initial, max=600.0)
    return QueueSet(
        [
            QueueConfig(ALPHA, prefetch=4, max_priority=10, retry=RetryPolicy(3, backoff)),
            QueueConfig(BETA, prefetch=2, retry=RetryPolicy(1, backoff)),
            QueueConfig(GAMMA, prefetch=1, retry=RetryPolicy(3, backoff)),
        ]
    )


class Greet(Job):
    NAME: ClassVar[str] = "test.greet"
    QUEUE: ClassVar[str] = ALPHA
    name: str


class Ping(Job):
    NAME: ClassVar[str] = "test.ping"
    QUEUE: ClassVar[str] = BETA
    seq: int


class Stubborn(Job):
    """On beta (one attempt), but with a two-attempt policy of its own."""

    NAME: ClassVar[str] = "test.stubborn"
    QUEUE: ClassVar[str] = BETA
    RETRY: ClassVar[RetryPolicy | None] = RetryPolicy(2, BACKOFF)
    id: int


class Nudge(Job):
    NAME: ClassVar[str] = "test.nudge"
    QUEUE: ClassVar[str] = GAMMA
    id: int


class Orphan(Job):
    """A job type no worker registers a handler for."""

    NAME: ClassVar[str] = "test.orphan"
    QUEUE: ClassVar[str] = ALPHA
    id: int


class Recorder:
    """Records what handlers saw, so assertions do not depend on logging.

    An ``assert`` that fails inside a handler would only look like a retryable
    failure to the worker; :meth:`handler` records it so the test fails on it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._attempts = 0
        self._running = 0
        self._max_running = 0
        self.failed_assertions: list[AssertionError] = []

    def enter(self) -> int:
        with self._lock:
            self._running += 1
            self._max_running = max(self._max_running, self._running)
            self._attempts += 1
            return self._attempts

    def leave(self) -> None:
        with self._lock:
            self._running -= 1

    def attempts(self) -> int:
        with self._lock:
            return self._attempts

    def max_running(self) -> int:
        with self._lock:
            return self._max_running

    def handler(self, job_type: type[J], fn: Callable[[J, JobContext], object]) -> Handler[J]:
        def checked(job: J, ctx: JobContext) -> object:
            try:
                return fn(job, ctx)
            except AssertionError as exc:
                self.failed_assertions.append(exc)
                raise

        return Handler(job_type, checked)


def act_out(name: str, ctx: JobContext, *, defer: float = 30) -> None:
    """Raise the outcome a job's name asks for: ``flaky`` fails its first attempt
    (Retryable), ``doomed`` is fatal, ``snooze`` is deferred once by ``defer`` seconds;
    any other name succeeds."""
    if name == "flaky" and ctx.attempt == 1:
        raise Retryable("flaky failure")
    if name == "doomed":
        raise Fatal("cannot ever work")
    if name == "snooze" and ctx.deferrals == 0:
        raise Deferred(defer, "rate limited")


def two_slot_worker(
    backend: Backend,
    queues: QueueSet,
    clock: ManualClock,
    greet: Callable[[Greet, JobContext], None],
    *,
    timeout_grace: float,
    hooks: Iterable[WorkerHooks],
) -> Worker:
    """A worker of ``greet`` on alpha with two job slots and a 5 s job timeout: a job stuck
    past its timeout keeps one slot while the other runs the next job."""
    return Worker(
        backend,
        queues,
        [Handler(Greet, greet)],
        consume=[ALPHA],
        concurrency=2,
        job_timeout=5,
        timeout_grace=timeout_grace,
        clock=clock,
        hooks=hooks,
    )


def named_envelope(
    queue: str, name: str, *, job_type: str = "t.job", attempt: int = 1, priority: int = 0
) -> Envelope:
    """A fresh envelope, enqueued now, of a job whose payload is ``{"name": name}``."""
    return Envelope(
        job_id=uuid.uuid4(),
        job_type=job_type,
        queue=queue,
        attempt=attempt,
        priority=priority,
        enqueued_at=int(time.time() * 1000),
        payload={"name": name},
    )


def stuck_on_first_attempt(clock: ManualClock) -> Callable[[Greet, JobContext], None]:
    """A greet handler whose first attempt runs (in pure Python, on the manual clock)
    until the job timeout interrupts it; a retry returns at once."""

    def greet(job: Greet, ctx: JobContext) -> None:
        while ctx.attempt == 1:  # pure Python: the asynchronous JobTimeout lands here
            clock.sleep(1)

    return greet


def noop(job_type: type[J]) -> Handler[J]:
    return Handler(job_type, lambda _job, _ctx: None)


def wait_for(
    cond: Callable[[], bool],
    clock: ManualClock | None = None,
    *,
    step: float = 0.1,
    timeout: float = 20.0,
) -> None:
    """Poll ``cond``, advancing ``clock`` by ``step`` each turn (as the seed's paused time
    did); without a clock, just give other threads a turn. Fails after ``timeout`` real
    seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition was never met")
        if clock is not None:
            clock.advance(step)
        time.sleep(0.001)


class _Waits(Protocol):
    def wait_for(self, cond: Callable[[], bool], timeout: float = ...) -> None: ...


class OnThread:
    """``run()`` on a daemon thread of its own; what it raised is kept in ``error``."""

    def __init__(self, run: Callable[[], object], name: str) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(run,), name=name, daemon=True)
        self.thread.start()

    def _run(self, run: Callable[[], object]) -> None:
        try:
            run()
        except BaseException as exc:
            self.error = exc


class Running(OnThread):
    """A worker running on its own thread, like the seed's spawned task."""

    def __init__(self, worker: Worker, time: ManualClock | _Waits | None) -> None:
        self.worker = worker
        self.handle: WorkerHandle = worker.handle
        self._time = time
        super().__init__(worker.run, "test-worker")

    def is_finished(self) -> bool:
        return not self.thread.is_alive()

    def join(self) -> BaseException | None:
        """Wait for run() to return (advancing the clock), and return what it raised."""
        if self._time is None or isinstance(self._time, ManualClock):
            wait_for(self.is_finished, self._time)
        else:
            self._time.wait_for(self.is_finished)
        return self.error

    def stop(self) -> None:
        """Shut down, wait, and re-raise whatever run() raised."""
        self.handle.shutdown()
        error = self.join()
        if error is not None:
            raise error


def start(worker: Worker, time: ManualClock | _Waits | None) -> Running:
    return Running(worker, time)


def counts_line(stderr: str) -> dict[str, int]:
    """The counts an ``enqueue --file`` run printed: confirmed, unknown, refused, not sent,
    and the total."""
    match = re.search(
        r": ([\d,]+) confirmed, ([\d,]+) unknown \(may or may not be enqueued\), "
        r"([\d,]+) refused, ([\d,]+) not sent, of ([\d,]+) jobs",
        stderr,
    )
    assert match, f"no counts in: {stderr}"
    values = [int(g.replace(",", "")) for g in match.groups()]
    return dict(zip(["confirmed", "unknown", "refused", "not sent", "total"], values, strict=True))


def bash(script: str, *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``script`` run by bash with no stdin, its output captured as text; it must exit 0."""
    done = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


class Got:
    """A sink keeping the deliveries a backend pushes (and ignoring ConsumerEnded)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[Delivery] = []

    def __call__(self, item: Delivery | ConsumerEnded) -> None:
        if not isinstance(item, ConsumerEnded):
            with self.lock:
                self.items.append(item)

    def __len__(self) -> int:
        with self.lock:
            return len(self.items)


def dead_letter_one(backend: Backend, queue: QueueConfig, reason: str) -> None:
    """Consume ``queue`` until its first delivery, dead-letter it with ``reason`` (as a
    worker would), and stop consuming."""
    got = Got()
    sub = backend.consume(queue, got)
    try:
        wait_for(lambda: len(got) > 0, timeout=10)
        got.items[0].dead_letter(reason)
    finally:
        sub.close()


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which only waits for its parent to reap it, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def kill_all(proc: subprocess.Popen[bytes], children: Iterable[int]) -> None:
    """Clean-up after a failed test: ``proc`` and its ``children`` killed, ``proc`` reaped;
    nothing of ours outlives it."""
    for pid in [proc.pid, *children]:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    proc.wait(10)


def log_tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of the log at ``path``, each cut at 300 characters."""
    return "\n".join(line[:300] for line in path.read_text().splitlines()[-lines:])


def drain(backend: MemoryBackend, queue: str) -> list[Envelope]:
    """Every envelope ready on ``queue``, in delivery order (acked once all are taken)."""
    taken: list[Delivery] = []

    def sink(delivery: Delivery | ConsumerEnded) -> None:
        if not isinstance(delivery, ConsumerEnded):
            taken.append(delivery)

    # No prefetch limit: everything is handed over at once, and acked afterwards (an ack
    # from inside the sink would hand over the next delivery inside it, recursively).
    sub = backend.consume(dataclasses.replace(seed_queues()[queue], prefetch=0), sink)
    for delivery in taken:
        delivery.ack()
    sub.cancel()
    return [d.envelope for d in taken]
