"""The kit's backends: the in-memory one or a SQLite file, with a gate before the worker.

A :class:`Gate` is mixed in front of a real backend class (:class:`GatedMemoryBackend`,
:class:`GatedSqliteBackend`), so the backend keeps every capability it declares (a
worker and a producer ask for those by type) and moves messages exactly as it does
outside tests. The gate changes one thing: a delivery reaches the worker only when the
test lets it through (:meth:`GateState.release`), so a test sees what was enqueued
before anything runs, and runs the job it chooses. It also keeps a ledger of every
message it has seen published, retried or deferred (its job id, attempt, deferrals and
the clock time it is due), which is what :meth:`~queuey_core.testing.QueueyKit.enqueued`
lists, on any backend.

It counts the live consumers of each queue too: a paused queue's consumer is cancelled
(:mod:`.gate_handles`), its held deliveries go back to waiting, and nothing of it is
ready or awaited until a consumer takes it again.

Owns: the ledger and the held deliveries. Must never: settle a delivery itself, or
change what the backend publishes; a delivery it holds stays unsettled on the backend
until the worker settles it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import itertools
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, cast

from queuey_core.backends.base import Backend, ConsumerEnded, Delivery, Sink, Subscription
from queuey_core.backends.capabilities import PublishesEncoded
from queuey_core.backends.memory import MemoryBackend
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.clock import Clock
from queuey_core.envelope import EncodedEnvelope, Envelope
from queuey_core.queues import QueueConfig
from queuey_core.testing.gate_handles import Entry, GatedSubscription, Watched

#: A message's place in the ledger: one attempt of one job, after so many deferrals.
Key = tuple[uuid.UUID, int, int]


class Timing:
    """When a backend holds a delayed message until, reckoned as it reckons it: here on
    the clock's monotonic seconds, as the in-memory backend's timers are (they fire in
    the thread that advances the clock, so a due message is delivered at once)."""

    #: Whether a message is handed out in the very call that makes it due.
    at_once = True

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def now(self) -> float:
        """The time now, in seconds."""
        return self.clock.monotonic()

    def due(self, delay: float) -> float:
        """When a message published now after ``delay`` seconds becomes ready."""
        return self.now() + delay

    def step_to(self, due: float) -> float:
        """Seconds to advance the clock by so that ``due`` has come."""
        return max(0.0, due - self.now())


class FileTiming(Timing):
    """The SQLite file's reckoning: whole milliseconds of wall time
    (``available_at``), claimed by the backend's thread a moment after they pass."""

    at_once = False

    def now(self) -> float:
        """See :meth:`Timing.now`."""
        return self.clock.wall_ms() / 1000

    def due(self, delay: float) -> float:
        """See :meth:`Timing.due` (the file's own rounding)."""
        return (self.clock.wall_ms() + round(delay * 1000)) / 1000

    def step_to(self, due: float) -> float:
        """See :meth:`Timing.step_to`: half a millisecond over, so that the clock's
        whole milliseconds reach ``due`` whatever the float arithmetic rounds to."""
        step = due - self.now()
        return step + 0.0005 if step > 0 else 0.0


def key_of(envelope: Envelope) -> Key:
    """The ledger key of ``envelope``."""
    return (envelope.job_id, envelope.attempt, envelope.deferrals)


class GateState:
    """The ledger and the held deliveries of one gated backend (thread-safe).

    Two messages can share a key (a job published twice under one id): each is an
    entry of its own, matched to deliveries in the order they were published.
    """

    def __init__(self, timing: Timing) -> None:
        self.timing = timing
        self._cond = threading.Condition()
        self._entries: dict[int, Entry] = {}  # by seq: in order of publishing
        # Entries the backend handed out, by (-priority, seq): the next to run on top.
        self._ready: list[tuple[int, int, Entry]] = []
        self._sinks: dict[str, Sink] = {}
        # Live consumers (token -> queue): a queue none consumes (paused) hands nothing
        # out, and a delivery goes out only while the consumer it came by is live (after a
        # resume, the paused one's wait for its close to give them back).
        self._consumers: dict[object, str] = {}
        self._seq = itertools.count()

    # -- what the backend and its deliveries tell the gate ---------------------------

    def expect(self, items: Sequence[tuple[Envelope, float | None]]) -> list[Entry]:
        """Messages about to be published (or republished), each after its delay."""
        made = []
        with self._cond:
            for env, delay in items:
                entry = Entry(env, self.timing.due(delay or 0.0), next(self._seq))
                self._entries[entry.seq] = entry
                made.append(entry)
            self._cond.notify_all()
        return made

    def forget(self, entries: Sequence[Entry]) -> None:
        """A publish that failed: its messages are not coming."""
        with self._cond:
            for entry in entries:
                if entry.delivery is None:
                    self._entries.pop(entry.seq, None)

    def sink_for(self, queue: str, worker_sink: Sink, token: object) -> Sink:
        """The sink the backend is given for ``queue`` by the consumer ``token``: it
        holds each delivery here (and counts the consumer live, until :meth:`ended`)."""
        with self._cond:
            self._sinks[queue] = worker_sink
            self._consumers[token] = queue

        def hold(item: Delivery | ConsumerEnded) -> None:
            if isinstance(item, ConsumerEnded):
                worker_sink(item)
                return
            key = key_of(item.envelope)
            with self._cond:
                entry = next(
                    (
                        e
                        for e in self._entries.values()
                        if e.delivery is None and key_of(e.envelope) == key
                    ),
                    None,
                )
                if entry is None:  # published by someone else (another process, raw bytes)
                    entry = Entry(item.envelope, self.timing.now(), next(self._seq))
                    self._entries[entry.seq] = entry
                entry.delivery = item
                entry.via = token
                heapq.heappush(self._ready, (-entry.envelope.priority, entry.seq, entry))
                self._cond.notify_all()

        return hold

    def ended(self, token: object) -> None:
        """The consumer ``token`` was cancelled: nothing more comes from it, and what
        it handed here waits until its close gives it back."""
        with self._cond:
            self._consumers.pop(token, None)
            self._cond.notify_all()

    def given_back(self, token: object) -> None:
        """The consumer ``token`` is closing: what it handed out and the test has not
        released goes back to the backend, so its entries wait for a delivery again."""
        with self._cond:
            for entry in self._entries.values():
                if entry.via is token and not entry.released:
                    entry.delivery = entry.via = None
            self._ready = [r for r in self._ready if r[2].delivery is not None]
            heapq.heapify(self._ready)
            self._cond.notify_all()

    def consumed(self, queue: str) -> bool:
        """Whether a consumer of ``queue`` is live (not paused, not stopped)."""
        with self._cond:
            return self._taken(queue)

    def deliverable(self, entry: Entry) -> bool:
        """Whether ``entry`` is held here by a consumer still live: the worker may run it."""
        with self._cond:
            return entry.delivery is not None and self._live(entry)

    def held_of(self, queue: str) -> int:
        """Deliveries of ``queue`` held here, not released to the worker."""
        with self._cond:
            return sum(
                1
                for e in self._entries.values()
                if e.delivery is not None and not e.released and e.envelope.queue == queue
            )

    def busy(self) -> bool:
        """Whether the worker holds a delivery it has not settled."""
        with self._cond:
            return any(e.released for e in self._entries.values())

    def settled(self, entry: Entry) -> None:
        """The worker settled the delivery of ``entry``."""
        with self._cond:
            self._entries.pop(entry.seq, None)
            entry.settled = True
            self._cond.notify_all()

    # -- what the kit asks -----------------------------------------------------------

    def waiting(self) -> list[Entry]:
        """Every message not released to the worker, soonest due first (then by
        priority, highest first, then in order of publishing)."""
        with self._cond:
            entries = [e for e in self._entries.values() if not e.released]
        return sorted(entries, key=lambda e: (e.due, -e.envelope.priority, e.seq))

    def entry(self, key: Key) -> Entry | None:
        """The first message of ``key`` not released to the worker, if there is one."""
        with self._cond:
            return next(
                (e for e in self._entries.values() if not e.released and key_of(e.envelope) == key),
                None,
            )

    def next_ready(self) -> Entry | None:
        """The delivery the worker would be given next: highest priority, then oldest,
        of those the backend has handed out."""
        with self._cond:
            while self._ready and self._ready[0][2].released:
                heapq.heappop(self._ready)
            if not self._ready or self._live(self._ready[0][2]):
                return self._ready[0][2] if self._ready else None
            # A paused queue's held deliveries are not the worker's to run: the next
            # of the others (they go back to the backend once its consumer closes).
            live = [r for r in self._ready if not r[2].released and self._live(r[2])]
            return min(live)[2] if live else None

    def _live(self, entry: Entry) -> bool:
        """Whether ``entry`` can go to the worker (lock held): handed out by a consumer
        still live, or, not handed out yet, of a queue a consumer takes."""
        if entry.delivery is not None:
            return entry.via in self._consumers
        return self._taken(entry.envelope.queue)

    def _taken(self, queue: str) -> bool:
        """Whether a live consumer takes ``queue`` (lock held)."""
        return queue in self._consumers.values()

    def due_missing(self) -> int:
        """Messages due by now that the backend has not handed out yet (the SQLite
        file's thread claims them a moment later), of queues a consumer takes."""
        if self.timing.at_once:
            return 0
        now = self.timing.now()
        with self._cond:
            return sum(1 for e in self._coming() if e.due <= now)

    def next_due(self) -> float | None:
        """The clock time the soonest held message is due, if one is held (of the
        queues a consumer takes: a paused queue's wait for its resume, not the clock)."""
        with self._cond:
            dues = [e.due for e in self._coming()]
        return min(dues, default=None)

    def _coming(self) -> list[Entry]:
        """Entries not handed out yet (or handed out by a consumer since cancelled: they
        come again once it closes), whose queue a consumer takes (lock held)."""
        return [
            e
            for e in self._entries.values()
            if not e.released and e.via not in self._consumers and self._taken(e.envelope.queue)
        ]

    def poke(self) -> None:
        """Wake whoever waits in :meth:`wait` (something changed outside the ledger)."""
        with self._cond:
            self._cond.notify_all()

    def wait(self, timeout: float) -> None:
        """Block until anything changes, or ``timeout`` real seconds pass."""
        with self._cond:
            self._cond.wait(timeout)

    def release(self, entry: Entry) -> None:
        """Hand the held delivery of ``entry`` to the worker."""
        delivery = entry.delivery
        if delivery is None or entry.released:
            raise ValueError("that message is not held at the gate")
        with self._cond:
            entry.released = True
            sink = self._sinks[delivery.queue]
        sink(Watched(self, entry, delivery))


class Gate:
    """Mixed in before a backend class: publishes enter the ledger, deliveries stop at
    the gate. ``clock`` must be the one the backend runs on."""

    gate: GateState
    #: How the backend behind reckons delays.
    timing: type[Timing] = Timing

    def __init__(self, *args: Any, clock: Clock, **kwargs: Any) -> None:
        self.gate = GateState(self.timing(clock))
        self._local = threading.local()
        cast(Any, super()).__init__(*args, clock=clock, **kwargs)

    def _backend(self) -> Backend:
        """The backend class this gate stands before (the next in the MRO)."""
        return cast(Backend, super())

    def publish(self, envelope: Envelope, *, delay: float | None = None) -> None:
        """See :meth:`Backend.publish`."""
        with self._publishing([(envelope, delay)]):
            self._backend().publish(envelope, delay=delay)

    def publish_many(self, items: Sequence[tuple[Envelope, float | None]]) -> None:
        """See :meth:`Backend.publish_many`."""
        with self._publishing(items):
            self._backend().publish_many(items)

    def publish_encoded(self, items: Sequence[tuple[EncodedEnvelope, float | None]]) -> None:
        """See :class:`~queuey_core.backends.capabilities.PublishesEncoded`."""
        with self._publishing([(encoded.envelope(), delay) for encoded, delay in items]):
            cast(PublishesEncoded, super()).publish_encoded(items)

    def defer(self, envelope: Envelope, delay: float) -> None:
        """See :meth:`Backend.defer`."""
        with self._publishing([(envelope, delay)]):
            self._backend().defer(envelope, delay)

    def consume(self, queue: QueueConfig, sink: Sink) -> Subscription:
        """See :meth:`Backend.consume`: everything ready comes to the gate (no prefetch
        limit), and waits there for the test."""
        unlimited = dataclasses.replace(queue, prefetch=0)
        token = object()
        held = self.gate.sink_for(queue.name, sink, token)
        try:
            inner = self._backend().consume(unlimited, held)
        except BaseException:
            self.gate.ended(token)
            raise
        return GatedSubscription(inner, self.gate, token)

    @contextlib.contextmanager
    def _publishing(self, items: Sequence[tuple[Envelope, float | None]]) -> Iterator[None]:
        # A publish inside a publish (the memory backend's publish_encoded calls its
        # publish_many) is the same messages: into the ledger once.
        nested = getattr(self._local, "publishing", False)
        if nested:
            yield
            return
        # Into the ledger first: the memory backend delivers during the publish.
        made = self.gate.expect(items)
        self._local.publishing = True
        try:
            yield
        except BaseException:
            self.gate.forget(made)
            raise
        finally:
            self._local.publishing = False


# The gate's consume returns the Subscription protocol, not the backend's own class:
# nothing in the kit needs more of it.
class GatedMemoryBackend(Gate, MemoryBackend):  # type: ignore[misc]
    """:class:`~queuey_core.MemoryBackend` behind the kit's gate."""


class GatedSqliteBackend(Gate, SqliteBackend):  # type: ignore[misc]
    """:class:`~queuey_core.backends.sqlite.SqliteBackend` behind the kit's gate."""

    timing = FileTiming
