"""The worker's side of limits: ask before a limited job runs, give back at its settle,
and a heartbeat that keeps slots leased and lets parked jobs go.

The dispatcher calls :meth:`LimitGate.ask` for a job type that has limits (a job type
without one never reaches this module: its route carries no limits), and acts on the
answer: run it; defer it, priority kept, until its rate reservation is due; or ack it,
parked. After the settle of a job that ran it calls :meth:`LimitGate.release`. The
gate's thread ``queuey-limits`` renews this worker's slots every
:data:`~.limit_state.SWEEP_EVERY_MS`, takes back slots whose lease ran out (a worker
killed with ``kill -9``), and publishes the parked jobs that frees.

A store that cannot be reached fails closed: a limited job is deferred by
:data:`STORE_DOWN_DELAY` (priority kept, no attempt spent), never run outside its limit;
a release that fails is tried again by the heartbeat (the slot stays taken meanwhile, at
most for its lease if the heartbeat cannot reach the store either).

Owns: the holder id of this worker, the let-go jobs' publishes, the heartbeat thread.
Must never: run a job, or settle one (the dispatcher does).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from queuey_core.clock import Clock
from queuey_core.envelope import Envelope
from queuey_core.errors import QueueyError
from queuey_core.flow.limit_spec import LimitBook, LimitSpec, key_of
from queuey_core.flow.limit_state import (
    SLOT_LEASE_MS,
    SWEEP_EVERY_MS,
    Admission,
    Claim,
    KeyCount,
    LetGo,
    LimitState,
    Verdict,
)
from queuey_core.flow.parked_body import parked_body, parked_envelope

logger = logging.getLogger(__name__)

#: Seconds a limited job waits when the limits' store cannot be reached (fail closed).
STORE_DOWN_DELAY = 5.0


#: What the gate counts per limit: a job asking was admitted, deferred (until its rate
#: allows, or a copy of a running job until that run ends), or parked behind a
#: concurrency limit; a parked job was let go.
EVENTS = ("admitted", "waited", "parked", "let_go")


@dataclass
class GateCounts:
    """What the gate did, for metrics and tests: in all, and per limit name
    (``by_limit[name][event]``, an event of :data:`EVENTS`).

    A job bound by several limits counts once in all and once under each limit its
    answer concerns: an admission under every one, a wait under its rate limits (or,
    for a copy of a job still running, under its concurrency limits), a park
    under the concurrency limit that was full. ``store_errors`` counts every call to
    the store that failed (asks, give-backs, heartbeats), in all only.
    """

    admitted: int = 0
    waited: int = 0
    parked: int = 0
    let_go: int = 0
    store_errors: int = 0
    by_limit: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, event: str, limits: Iterable[str], n: int = 1) -> None:
        """Count ``n`` of ``event`` in all and under each of ``limits`` (the caller
        holds the gate's lock)."""
        setattr(self, event, getattr(self, event) + n)
        for name in limits:
            per = self.by_limit.setdefault(name, dict.fromkeys(EVENTS, 0))
            per[event] += n


class LimitGate:
    """One worker's admissions under the limits of ``book``, kept in ``state``."""

    def __init__(self, book: LimitBook, state: LimitState, *, clock: Clock) -> None:
        self.book = book
        self.state = state
        self.clock = clock
        #: This worker's name on the slots it holds (renewed by its heartbeat).
        self.holder = uuid.uuid4().hex
        self.counts = GateCounts()
        self._publish: Callable[[Envelope], None] | None = None
        self._unreleased: set[str] = set()
        #: Parked jobs let go whose publish failed here: published again at the next
        #: heartbeat (the store's own republish, after REPUBLISH_AFTER_MS, is for a
        #: worker that died before it could).
        self._unpublished: dict[str, LetGo] = {}
        #: Jobs admitted here and not given back yet: running in this worker.
        self._running: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def bind(self, publish: Callable[[Envelope], None]) -> None:
        """Where parked jobs that are let go are published (the worker's backend)."""
        self._publish = publish

    def limits_of(self, job_type: str, queue: str) -> tuple[LimitSpec, ...] | None:
        """The limits a job type on ``queue`` counts against; None if none (a route
        without limits costs its jobs nothing)."""
        return self.book.binding(job_type, queue) or None

    def ask(self, envelope: Envelope, specs: Iterable[LimitSpec], job: Any) -> Admission:
        """Whether the job of ``envelope`` (decoded as ``job``) may start now.

        Raises:
            LimitStateError: the store cannot be reached (the caller fails closed).
        """
        claims = tuple(Claim(spec, key_of(spec, job)) for spec in specs)
        job_id = str(envelope.job_id)
        with self._lock:
            here = job_id in self._running
        if here:  # a copy of a job this worker runs (delivered again after a reconnect)
            names = [c.spec.name for c in claims if c.spec.concurrency is not None]
            if names:
                self._count("waited", names)
                return Admission(
                    Verdict.WAIT, until_ms=self.clock.wall_ms() + SLOT_LEASE_MS, limit=names[0]
                )
        try:
            answer = self.state.acquire(
                job_id,
                claims,
                holder=self.holder,
                now_ms=self.clock.wall_ms(),
                queue=envelope.queue,
                priority=envelope.priority,
                enqueued_at=envelope.enqueued_at,
                body=lambda: parked_body(envelope),
            )
        except QueueyError:
            self._count("store_errors", ())
            raise
        if answer.verdict is Verdict.ADMITTED:
            with self._lock:
                self._running.add(job_id)
            self._count("admitted", (c.spec.name for c in claims))
        elif answer.verdict is Verdict.WAIT:
            named = answer.limit.split(",") if answer.limit else None
            self._count("waited", named or (c.spec.name for c in claims if c.spec.rate))
        else:
            named = [answer.limit] if answer.limit else None
            self._count("parked", named or (c.spec.name for c in claims if c.spec.concurrency))
        return answer

    def _count(self, event: str, limits: Iterable[str], n: int = 1) -> None:
        with self._lock:
            self.counts.add(event, limits, n)

    def counted(self) -> GateCounts:
        """A copy of the counts, consistent at one instant (for a scrape)."""
        with self._lock:
            by_limit = {name: dict(per) for name, per in self.counts.by_limit.items()}
            c = self.counts
            return GateCounts(c.admitted, c.waited, c.parked, c.let_go, c.store_errors, by_limit)

    def release(self, job_id: str) -> None:
        """Give back the slots of ``job_id`` (after its settle) and publish the parked
        jobs that lets go; a store that fails is tried again by the heartbeat."""
        with self._lock:
            self._running.discard(job_id)
        try:
            let_go = self.state.release(job_id, now_ms=self.clock.wall_ms())
        except QueueyError as exc:
            self._count("store_errors", ())
            logger.warning("could not give back a limit's slot (retried): %s", exc)
            with self._lock:
                self._unreleased.add(job_id)
            return
        self.publish_let_go(let_go)

    def publish_let_go(self, let_go: Iterable[LetGo]) -> None:
        """Publish parked jobs let go, then forget them (publish first: a crash in
        between publishes again, never loses). One whose publish fails is tried again
        at the next heartbeat: the slot reserved for it holds its key meanwhile."""
        published: list[LetGo] = []
        for item in let_go:
            if self._publish is None:
                break
            try:
                self._publish(parked_envelope(item.body))
            except QueueyError as exc:
                logger.warning(
                    "could not publish a parked job let go (tried again in %gs): %s",
                    SWEEP_EVERY_MS / 1000,
                    exc,
                    extra={"job_id": item.job_id, "queue": item.queue},
                )
                with self._lock:
                    self._unpublished[item.job_id] = item
                continue
            with self._lock:
                self._unpublished.pop(item.job_id, None)
            published.append(item)
        if published:
            for item in published:
                self._count("let_go", [item.limit] if item.limit else ())
            try:
                self.state.forget([item.job_id for item in published])
            except QueueyError as exc:
                logger.warning("could not forget parked jobs let go: %s", exc)

    def sweep(self) -> None:
        """One heartbeat: give back what failed to be given back, publish again what
        failed to be published, renew this worker's slots, take back expired ones and
        publish the jobs that lets go."""
        with self._lock:
            pending, self._unreleased = self._unreleased, set()
            unpublished = dict(self._unpublished)
        for job_id in pending:
            self.release(job_id)
        try:
            let_go = self.state.sweep(self.holder, now_ms=self.clock.wall_ms())
        except QueueyError as exc:
            self._count("store_errors", ())
            logger.warning("limits' heartbeat could not reach its store: %s", exc)
            let_go = ()
        # A job the store also finds stale (its publish failed long ago) goes out once.
        self.publish_let_go({**unpublished, **{item.job_id: item for item in let_go}}.values())

    def parked(self) -> int:
        """Jobs parked now, by every worker on this store (``--burst`` waits for 0)."""
        return sum(count.parked for count in self.key_counts())

    def key_counts(self) -> list[KeyCount]:
        """Every limit and key in use now (``queuey limits``)."""
        return self.state.counts(now_ms=self.clock.wall_ms())

    def start(self) -> None:
        """Start the heartbeat thread ``queuey-limits``; idempotent."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="queuey-limits", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(SWEEP_EVERY_MS / 1000):
            try:
                self.sweep()
            except Exception:  # never let the heartbeat die: slots would expire
                logger.exception("limits' heartbeat failed")

    def stop(self) -> None:
        """Stop the heartbeat, after one last give-back of what is pending."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with self._lock:
            pending, self._unreleased = self._unreleased, set()
        for job_id in pending:
            self.release(job_id)

    def close(self) -> None:
        """Stop, and close the store."""
        self.stop()
        self.state.close()
