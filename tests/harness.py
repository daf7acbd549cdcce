"""Where the seed's worker tests run: in memory or on a SQLite file on a manual clock,
or on a real RabbitMQ.

Both environments offer the same handful of things the tests use: a backend that can
be inspected (acked, dead letters, pending, held), the clock to give the worker, and
time that passes. In memory, time is a ManualClock that ``wait_for`` advances while it
polls; on RabbitMQ time is real, so a duration ``x`` from the seed becomes ``d(x)``
(a tenth, at most three seconds): the seed's shape survives, its hours do not.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from collections.abc import Generator
from collections.abc import Sequence
from typing import NamedTuple
from typing import Protocol

import pika

from queuey_core import Backend
from queuey_core import Clock
from queuey_core import ConsumerEnded
from queuey_core import DeadLetter
from queuey_core import Delivery
from queuey_core import Envelope
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import SystemClock
from queuey_core.backends.base import Sink
from queuey_core.backends.base import Subscription
from queuey_core.backends.capabilities import AnyDeadLetter
from queuey_core.backends.capabilities import CancelListener
from queuey_core.backends.capabilities import CancelWatch
from queuey_core.backends.capabilities import DeadLetterPage
from queuey_core.backends.capabilities import DeadLetterTools
from queuey_core.backends.capabilities import DeadLetterWindow
from queuey_core.backends.capabilities import HoldsUniqueKeys
from queuey_core.backends.capabilities import SupportsCancellation
from queuey_core.backends.capabilities import SupportsPause
from queuey_core.backends.capabilities import require
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.flow.unique_keys import UniqueKeys
from tests.support import seed_queues

AMQP_URL = os.environ.get("QUEUEY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
_PARAMS = pika.URLParameters(AMQP_URL)
#: The broker is shared: every test stays inside the virtual host of ``AMQP_URL``.
VHOST: str = _PARAMS.virtual_host
BROKER_HOST: str = _PARAMS.host
BROKER_PORT: int = _PARAMS.port


def broker_reachable(host: str = BROKER_HOST, port: int = BROKER_PORT) -> bool:
    """Whether something accepts TCP connections on the broker's port."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


class Memory(NamedTuple):
    """The in-memory world of a unit test, from the fixtures of the same names: one
    fixture (``mem``) for the tests that want all four, unpacked on their first line."""

    backend: MemoryBackend
    producer: Producer
    queues: QueueSet
    clock: ManualClock


class Inspectable(Backend, DeadLetterTools, Protocol):
    """What the seed's tests ask of a backend besides the Backend protocol."""

    def acked(self, queue: str) -> list[Envelope]: ...
    def dead_letters(self, queue: str) -> list[DeadLetter]: ...
    def pending(self, queue: str) -> int: ...
    def deferred(self, queue: str) -> int: ...
    def consumer_count(self, queue: str) -> int: ...
    def is_closed(self) -> bool: ...


class Wrapping:
    """A backend that passes everything to ``inner`` and wraps the deliveries it hands out."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner

    def wrap(self, delivery: Delivery) -> Delivery:
        """The delivery the consumer gets instead of ``delivery``."""
        return delivery

    def declare(self, queues: Sequence[QueueConfig]) -> None:
        self.inner.declare(queues)

    def publish(self, envelope: Envelope, *, delay: float | None = None) -> None:
        self.inner.publish(envelope, delay=delay)

    def publish_many(self, items: Sequence[tuple[Envelope, float | None]]) -> None:
        self.inner.publish_many(items)

    def defer(self, envelope: Envelope, delay: float) -> None:
        self.inner.defer(envelope, delay)

    def consume(self, queue: QueueConfig, sink: Sink) -> Subscription:
        def wrapped(item: Delivery | ConsumerEnded) -> None:
            sink(item if isinstance(item, ConsumerEnded) else self.wrap(item))

        return self.inner.consume(queue, wrapped)

    def list_dead_letters(self, queue: str, *, limit: int | None = None) -> list[AnyDeadLetter]:
        return self._tools.list_dead_letters(queue, limit=limit)

    def dead_letter_page(
        self,
        queue: str,
        *,
        offset: int = 0,
        limit: int = 100,
        job_type: str | None = None,
        reason: str | None = None,
    ) -> DeadLetterPage:
        return self._tools.dead_letter_page(
            queue, offset=offset, limit=limit, job_type=job_type, reason=reason
        )

    def dead_letter_window(
        self,
        queue: str,
        *,
        offset: int = 0,
        limit: int | None = None,
        job_type: str | None = None,
        reason: str | None = None,
    ) -> DeadLetterWindow:
        return self._tools.dead_letter_window(
            queue, offset=offset, limit=limit, job_type=job_type, reason=reason
        )

    def get_dead_letter(self, queue: str, handle: str) -> AnyDeadLetter | None:
        return self._tools.get_dead_letter(queue, handle)

    def iter_dead_letters(
        self, queue: str, *, job_type: str | None = None, reason: str | None = None
    ) -> Generator[AnyDeadLetter, None, None]:
        return self._tools.iter_dead_letters(queue, job_type=job_type, reason=reason)

    def requeue_dead_letters(
        self,
        queue: str,
        job_ids: Sequence[str] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        return self._tools.requeue_dead_letters(queue, job_ids, progress=progress)

    def delete_dead_letters(self, queue: str, handles: Sequence[str]) -> int:
        return self._tools.delete_dead_letters(queue, handles)

    def purge_dead_letters(
        self, queue: str, *, progress: Callable[[int], None] | None = None
    ) -> int:
        return self._tools.purge_dead_letters(queue, progress=progress)

    def close(self) -> None:
        self.inner.close()

    @property
    def _tools(self) -> DeadLetterTools:
        return require(self.inner, DeadLetterTools, "a wrapped backend's dead-letter tools")


class Recording(Wrapping):
    """A backend that records what was acked, as MemoryBackend does.

    Every delivery it hands out records its envelope when an ack, retry or defer went
    through (a retried or deferred original counts as acked, as in memory).
    """

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self._acked: dict[str, list[Envelope]] = {}

    def wrap(self, delivery: Delivery) -> Delivery:
        return _Recorded(self, delivery)

    def record(self, envelope: Envelope) -> None:
        with self._lock:
            self._acked.setdefault(envelope.queue, []).append(envelope)

    def acked(self, queue: str) -> list[Envelope]:
        with self._lock:
            return list(self._acked.get(queue, []))

    def dead_letters(self, queue: str) -> list[DeadLetter]:
        """The queue's dead letters that hold an envelope (as MemoryBackend lists them)."""
        return [d for d in self.list_dead_letters(queue) if isinstance(d, DeadLetter)]


class PassingCancels(Recording, SupportsCancellation):
    """A recording backend whose inner backend has cancels, and passes them on (a worker
    asks for the capability by type, so a wrapper without it would have none)."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self._cancels = require(inner, SupportsCancellation, "a wrapped backend's cancels")

    def cancel_jobs(self, job_ids: Sequence[uuid.UUID]) -> None:
        self._cancels.cancel_jobs(job_ids)

    def watch_cancels(self, listener: CancelListener) -> CancelWatch:
        return self._cancels.watch_cancels(listener)


class PassingPauses(SupportsPause):
    """A wrapping backend that passes paused queues on to ``inner`` (a worker asks for
    the capability by type, so a wrapper without it would never pause)."""

    inner: Backend

    def set_paused(self, queue: str, paused: bool) -> bool:
        return require(self.inner, SupportsPause, "a wrapped backend's pauses").set_paused(
            queue, paused
        )

    def paused_queues(self, names: Sequence[str]) -> frozenset[str]:
        return require(self.inner, SupportsPause, "a wrapped backend's pauses").paused_queues(names)

    def pause_poll(self) -> float:
        return require(self.inner, SupportsPause, "a wrapped backend's pauses").pause_poll()


class RecordingRabbit(PassingCancels, PassingPauses):
    """A RabbitMQBackend that records what was acked (see :class:`Recording`)."""

    def __init__(self, inner: RabbitMQBackend) -> None:
        super().__init__(inner)
        self.rabbit = inner

    def pending(self, queue: str) -> int:
        return self.rabbit.queue_counts(queue)[0]

    def deferred(self, queue: str) -> int:
        # The ladder is shared by every queue: this counts all held messages. The tests
        # hold nothing but the job under test, and the teardown drains the ladder.
        # A message hopping from one level to the next (or into its queue) is briefly
        # in no queue's count, so take the largest of a few reads ~40 ms apart.
        reads = []
        for i in range(3):
            if i:
                time.sleep(0.02)
            reads.append(self.rabbit.held_count())
        return max(reads)

    def consumer_count(self, queue: str) -> int:
        return self.rabbit.queue_counts(queue)[1]

    def is_closed(self) -> bool:
        return self.rabbit.is_closed()


class RecordingSqlite(PassingCancels, PassingPauses, HoldsUniqueKeys):
    """A SqliteBackend that records what was acked (see :class:`Recording`), and passes
    on its unique keys (asked for by type, as cancels are)."""

    def __init__(self, inner: SqliteBackend) -> None:
        super().__init__(inner)
        self.sqlite = inner

    def unique_keys(self) -> UniqueKeys:
        return self.sqlite.unique_keys()

    def pending(self, queue: str) -> int:
        return self.sqlite.counts([queue])[queue][0].ready

    def deferred(self, queue: str) -> int:
        return self.sqlite.held_deferrals(queue)

    def consumer_count(self, queue: str) -> int:
        return self.sqlite.counts([queue])[queue][1]

    def is_closed(self) -> bool:
        return self.sqlite.closed


class PassingDelivery:
    """A delivery that passes everything to ``inner``: subclasses change what they test."""

    def __init__(self, inner: Delivery) -> None:
        self.inner = inner

    @property
    def envelope(self) -> Envelope:
        return self.inner.envelope

    @property
    def queue(self) -> str:
        return self.inner.queue

    @property
    def redelivered(self) -> bool:
        return self.inner.redelivered

    def is_stale(self) -> bool:
        return self.inner.is_stale()

    def ack(self) -> None:
        self.inner.ack()

    def dead_letter(self, reason: str) -> None:
        self.inner.dead_letter(reason)

    def retry(self, next_envelope: Envelope, delay: float) -> None:
        self.inner.retry(next_envelope, delay)

    def defer(self, next_envelope: Envelope, delay: float) -> None:
        self.inner.defer(next_envelope, delay)


class _Recorded(PassingDelivery):
    def __init__(self, owner: Recording, inner: Delivery) -> None:
        super().__init__(inner)
        self._owner = owner

    def ack(self) -> None:
        super().ack()
        self._owner.record(self.inner.envelope)

    def retry(self, next_envelope: Envelope, delay: float) -> None:
        super().retry(next_envelope, delay)
        self._owner.record(self.inner.envelope)

    def defer(self, next_envelope: Envelope, delay: float) -> None:
        super().defer(next_envelope, delay)
        self._owner.record(self.inner.envelope)


class WorkerEnv:
    """The backend, clock and time of one test of the worker."""

    name = "?"
    backend: Inspectable
    clock: Clock
    queues: QueueSet

    def d(self, seconds: float) -> float:
        """A duration of the seed, as this environment runs it."""
        return seconds

    def sleep(self, seconds: float) -> None:
        """Sleep inside a handler for the seed's ``seconds`` (interruptible by a timeout)."""
        raise NotImplementedError

    def elapse(self, seconds: float) -> None:
        """Let the seed's ``seconds`` pass in the test's own thread."""
        raise NotImplementedError

    def wait_for(self, cond: Callable[[], bool], timeout: float = 30.0) -> None:
        """Poll ``cond`` until it holds, letting time pass; fail after ``timeout`` real s."""
        raise NotImplementedError

    def producer(self, backend: Backend | None = None) -> Producer:
        return Producer(backend or self.backend, self.queues, clock=self.clock)

    def another_backend(self) -> Backend:
        """A second backend on the same queues, as another process would open it (the
        caller closes it); only where the backend declares ``across_processes``."""
        raise NotImplementedError(f"no other process reaches the {self.name} backend")

    def close(self) -> None:
        """Clean up after the test."""


class MemoryEnv(WorkerEnv):
    """MemoryBackend on a ManualClock: the seed's paused time."""

    name = "memory"

    def __init__(self) -> None:
        self.manual = ManualClock()
        self.clock = self.manual
        self.backend = MemoryBackend(clock=self.manual)
        self.queues = seed_queues()

    def sleep(self, seconds: float) -> None:
        self.manual.sleep(seconds)

    def elapse(self, seconds: float) -> None:
        self.manual.advance(seconds)

    def wait_for(self, cond: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError("condition was never met")
            self.manual.advance(0.1)
            time.sleep(0.001)


class SqliteEnv(MemoryEnv):
    """SqliteBackend on a file of its own, on a ManualClock: the seed's paused time."""

    name = "sqlite"

    def __init__(self) -> None:
        self.manual = ManualClock()
        self.clock = self.manual
        self._dir = tempfile.mkdtemp(prefix="queuey-sqlite-")
        #: The file's URL: another backend (another process) opens the same queues.
        self.url = f"sqlite:///{self._dir}/queuey.db"
        self.inner = SqliteBackend(self.url, clock=self.manual)
        self.backend = RecordingSqlite(self.inner)
        self.queues = seed_queues()

    def another_backend(self) -> Backend:
        return SqliteBackend(self.url, clock=self.manual)

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


class RabbitEnv(WorkerEnv):
    """A real RabbitMQ in real time; the seed's durations shrink to ``d(x)``."""

    name = "rabbitmq"

    def __init__(self) -> None:
        self.clock = SystemClock()
        self.queues = seed_queues(backoff_initial=0.1)
        self._reset_queues()
        self.inner = RabbitMQBackend(AMQP_URL, heartbeat=10, publish_timeout=10)
        self.backend = RecordingRabbit(self.inner)

    def d(self, seconds: float) -> float:
        return min(seconds / 10, 3.0)

    def sleep(self, seconds: float) -> None:
        # In slices, so that an asynchronous JobTimeout can land between them.
        end = time.monotonic() + self.d(seconds)
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.01))

    def elapse(self, seconds: float) -> None:
        time.sleep(self.d(seconds) + 0.2)

    def another_backend(self) -> Backend:
        return RabbitMQBackend(AMQP_URL, heartbeat=10, publish_timeout=10)

    def wait_for(self, cond: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError("condition was never met")
            time.sleep(0.02)

    def close(self) -> None:
        try:
            probe = RabbitMQBackend(AMQP_URL)
            try:
                deadline = time.monotonic() + 15
                while probe.held_count() and time.monotonic() < deadline:
                    time.sleep(0.1)
            finally:
                probe.close()
        finally:
            self.inner.close()
            self._reset_queues()

    def _reset_queues(self) -> None:
        conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        try:
            ch = conn.channel()
            for name in self.queues:
                ch.queue_delete(name)
                ch.queue_delete(f"{name}.dlq")
        finally:
            conn.close()
