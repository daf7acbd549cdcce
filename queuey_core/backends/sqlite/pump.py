"""The embedded backend's one thread: claims for its subscriptions, renews its leases,
serves its control requests, and otherwise sleeps.

It never spins. It wakes when this process publishes or settles (an event), when a
delay or another worker's lease ends (a timer on the injected clock), and every
``poll`` seconds (every :data:`BUSY_POLL` for a second after it last claimed) to
``stat`` the WAL file, which every commit of any process writes
to; ``PRAGMA data_version`` (which changes only when another connection committed) is
read when the WAL changed, and at least every :data:`VERSION_EVERY` seconds in case a
commit left the WAL's size and time as they were. An idle worker costs one ``stat``
per poll. Owns: when to look
and when to renew. Must never: hold a delivery's lease past its renewal time while
alive, or take the file's lock longer than one short transaction.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from queuey_core.backends.sqlite.database import Database
from queuey_core.clock import Clock, Timer
from queuey_core.errors import BackendError

logger = logging.getLogger(__name__)

#: The longest (s) between two reads of ``PRAGMA data_version`` when the WAL looks
#: unchanged.
VERSION_EVERY = 1.0
#: After this long (s) of the file failing every look, the consumers end.
GIVE_UP_AFTER = 60.0
#: Seconds between looks while the worker is busy: for :data:`BUSY_FOR` seconds after a
#: look claimed a job, the thread looks this often
#: rather than every ``poll``, so that a job another process enqueues into a busy queue
#: starts within milliseconds; an idle worker still wakes only every ``poll``.
BUSY_POLL = 0.004
#: Seconds a worker counts as busy after its last claim.
BUSY_FOR = 1.0


class Pumped(Protocol):
    """What the thread needs of its backend (:class:`SqliteBackend` is one): declared
    here so that this module never imports the backend's."""

    @property
    def closed(self) -> bool:
        """Whether the backend was closed (a failed look then ends the thread)."""

    def _renew(self) -> None:
        """Extend the backend's leases and record its consumers as alive."""

    def _claim_all(self, now: int) -> tuple[bool, int | None]:
        """Claim for every subscription; whether any row came, and when the next is due."""

    def _serve_control(self, now: int) -> None:
        """Answer the control requests waiting in the file."""

    def _end_consumers(self, exc: BackendError) -> None:
        """The file has failed for too long: end every consumer with ``exc``."""


class Pump:
    """The thread of one backend (:class:`Pumped`), started with its first consumer."""

    def __init__(
        self, backend: Pumped, db: Database, clock: Clock, *, poll: float, lease: float
    ) -> None:
        self._backend = backend
        self._db = db
        self._clock = clock
        self._poll = poll
        # Renew well before the lease runs out: a few renewals may fail (a busy file)
        # before another worker could take a job this one still runs.
        self._renew_every = lease / 4
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._timer: Timer | None = None
        self._timer_due: int | None = None
        self._due: int | None = None
        self._version: int | None = None
        self._wal: tuple[int, int, int] | None = None
        self._next_version = 0.0
        self._next_renewal = 0.0
        self._failing_since: float | None = None
        self._active_at = float("-inf")  # monotonic time of the last claim

    def start(self) -> None:
        """Start the thread if it is not running; idempotent."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="queuey-sqlite", daemon=True)
                self._thread.start()
        self.wake()

    def wake(self) -> None:
        """Look at the file now (this process wrote to it, or credit came back)."""
        self._wake.set()

    def renew_soon(self) -> None:
        """Renew (and record consumers) at the next look."""
        self._next_renewal = 0.0
        self._wake.set()

    def stop(self) -> bool:
        """Stop the thread and wait for it (not from the thread itself); whether it was
        running (if not, this backend never claimed a row nor served control)."""
        self._stopping.set()
        self._wake.set()
        with self._lock:
            thread, self._thread = self._thread, None
            if self._timer is not None:
                self._timer.cancel()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        return thread is not None

    def _run(self) -> None:
        busy = False
        while not self._stopping.is_set():
            # A look that claimed something looks again at once, as if woken: rows it
            # dead-lettered unrun, or a full batch, leave more to claim, and no event or
            # other process's commit will say so.
            woken = self._wake.is_set() or busy
            self._wake.clear()
            try:
                busy = self._step(woken)
                self._failing_since = None
            except BackendError as exc:
                busy = False
                if self._backend.closed:
                    return
                if self._failing(exc):
                    return
            if not busy:
                self._wake.wait(self.interval(time.monotonic()))

    def interval(self, now: float) -> float:
        """Seconds to wait before the next look, at monotonic time ``now``: ``poll``, or
        :data:`BUSY_POLL` within :data:`BUSY_FOR` of the last claim."""
        if now - self._active_at < BUSY_FOR:
            return min(self._poll, BUSY_POLL)
        return self._poll

    def _step(self, woken: bool) -> bool:
        """One look; True when it claimed something (look again at once)."""
        backend = self._backend
        if time.monotonic() >= self._next_renewal:
            self._next_renewal = time.monotonic() + self._renew_every
            backend._renew()
        changed = False
        wal = self._db.wal_signature()
        if wal is None or wal != self._wal or time.monotonic() >= self._next_version:
            self._wal = wal
            self._next_version = time.monotonic() + VERSION_EVERY
            version = self._db.data_version()
            changed = version != self._version
            self._version = version
        now = self._clock.wall_ms()
        due = self._due is not None and now >= self._due
        if not (woken or changed or due):
            return False
        if changed or woken:
            backend._serve_control(now)
        claimed, self._due = backend._claim_all(now)
        self._arm(self._due, now)
        if claimed:
            # Only a claim: other workers' lease renewals change the file every second
            # or so, and would keep an idle worker looking every few milliseconds.
            self._active_at = time.monotonic()
        return claimed

    def _arm(self, due: int | None, now: int) -> None:
        """A timer on the clock for ``due`` (ms), so that a delay's end is seen at once
        (and, on a manual clock, when the test advances it)."""
        if due is None or due == self._timer_due:
            return
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_due = due
            self._timer = self._clock.call_later(max(0, due - now) / 1000, self.wake)

    def _failing(self, exc: BackendError) -> bool:
        """Log a failed look; True when it has failed for too long (consumers ended)."""
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
            logger.warning("the queue file cannot be read: %s; trying again", exc)
        elif now - self._failing_since > GIVE_UP_AFTER:
            logger.error("the queue file failed for %.0fs: %s", GIVE_UP_AFTER, exc)
            self._backend._end_consumers(exc)
            return True
        return False
