"""Rate and concurrency limits in the kit: the worker's own :class:`LimitGate`, with its
heartbeat on the kit's clock and its answers kept for the test.

The kit builds its gate from the same pieces ``queuey worker`` does
(:func:`~queuey_core.flow.limit_setup.limit_book`,
:func:`~queuey_core.flow.limit_setup.limit_state_for`): ``[limits.*]`` of the config the
kit reads and ``Job.LIMITS`` of its handlers' job types, the state in process (the
in-memory backend) or in the kit's SQLite file. Admission, booking, parking and letting
go are the library's; :class:`KitLimits` changes two things only:

- its heartbeat (renewing slots, taking back expired ones, letting go what they free)
  runs once each time the kit's clock moves (:class:`KitClock`), in the thread that
  moves it, instead of every second of real time on a thread of its own: what it
  publishes is in the ledger when the move returns, and a slot's lease runs on the
  clock the test moves;
- it keeps what it answered each job (waited on a rate, parked) for the job's outcome,
  and which jobs still have a settle's follow-up to do (a let-go publish after a park,
  a give-back after a run), so that the kit waits for it before it looks again.

Owns: those two. Must never: decide an admission itself.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from queuey_core.clock import ManualClock
from queuey_core.envelope import Envelope
from queuey_core.errors import QueueyError
from queuey_core.flow.limit_gate import STORE_DOWN_DELAY, LimitGate
from queuey_core.flow.limit_setup import limit_book, limit_state_for
from queuey_core.flow.limit_spec import LimitSpec
from queuey_core.flow.limit_state import Admission, LetGo, Verdict
from queuey_core.jobs import Job
from queuey_core.settings import Settings
from queuey_core.testing.gate import Key, key_of


@dataclass(frozen=True, slots=True)
class Held:
    """What the gate told a job it did not let start: parked, or waits ``delay``
    seconds (a rate's booking, or a store out of reach), and why."""

    parked: bool
    limit: str
    reason: str
    delay: float


class KitClock(ManualClock):
    """The kit's manual clock: after each :meth:`advance`, what follows the clock (the
    limits' heartbeat) runs, in the advancing thread."""

    def __init__(self) -> None:
        super().__init__()
        self._after: list[Callable[[], None]] = []

    def follow(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` after every move of the clock."""
        self._after.append(callback)

    def advance(self, seconds: float) -> None:
        """See :meth:`ManualClock.advance`; then what follows the clock runs."""
        super().advance(seconds)
        for callback in self._after:
            callback()


class KitLimits(LimitGate):
    """The worker's :class:`LimitGate`, as the kit runs it (see the module docstring)."""

    def __init__(self, *args: Any, done: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_done = done  # wakes the kit, which waits for a job's follow-up
        self._kept: dict[Key, Held] = {}
        self._busy: collections.Counter[str] = collections.Counter()
        self._parking = threading.local()
        self._kept_lock = threading.Lock()

    def start(self) -> None:
        """No thread: the kit's clock runs the heartbeat (:meth:`LimitGate.sweep`)."""

    def ask(self, envelope: Envelope, specs: Iterable[LimitSpec], job: Any) -> Admission:
        """See :meth:`LimitGate.ask`; the answer is kept for the job's outcome."""
        key = key_of(envelope)
        try:
            answer = super().ask(envelope, specs, job)
        except QueueyError as exc:
            reason = f"waited: the limits' store is out of reach ({exc})"
            self._keep(key, Held(False, "", reason, STORE_DOWN_DELAY))
            raise
        if answer.verdict is Verdict.WAIT:
            # As the dispatcher reckons the deferral's delay.
            delay = max(0.001, (answer.until_ms - self.clock.wall_ms()) / 1000)
            reason = (
                f"waited on limit {answer.limit} for {delay:g}s"
                if answer.limit  # else it came back before the start it had booked
                else f"waited for its booked start, {delay:g}s away"
            )
            self._keep(key, Held(False, answer.limit, reason, delay))
        elif answer.verdict is Verdict.PARKED:
            reason = f"parked behind concurrency limit {answer.limit}"
            self._keep(key, Held(True, answer.limit, reason, 0.0))
        if answer.verdict is not Verdict.WAIT:  # a give-back or a let-go publish follows
            with self._kept_lock:
                self._busy[str(envelope.job_id)] += 1
            if answer.verdict is Verdict.PARKED:
                self._parking.job_id = str(envelope.job_id)
        return answer

    def publish_let_go(self, let_go: Iterable[LetGo]) -> None:
        """See :meth:`LimitGate.publish_let_go`; after a park, the parked job is done."""
        try:
            super().publish_let_go(let_go)
        finally:
            parked = getattr(self._parking, "job_id", None)
            if parked is not None:  # the dispatcher's call right after the park's ack
                self._parking.job_id = None
                self._done(parked)

    def release(self, job_id: str) -> None:
        """See :meth:`LimitGate.release`; then the job that ran is done."""
        try:
            super().release(job_id)
        finally:
            self._done(job_id)

    def take_held(self, key: Key) -> Held | None:
        """What the gate told the attempt ``key`` if it did not let it start (taken:
        the same attempt let go later asks again)."""
        with self._kept_lock:
            return self._kept.pop(key, None)

    def settling(self, job_id: str) -> bool:
        """Whether the job still has its park's let-go publish or its give-back to do."""
        with self._kept_lock:
            return self._busy[job_id] > 0

    def _keep(self, key: Key, held: Held) -> None:
        with self._kept_lock:
            self._kept[key] = held

    def _done(self, job_id: str) -> None:
        with self._kept_lock:
            if self._busy[job_id] > 0:
                self._busy[job_id] -= 1
        self._on_done()


def kit_limits(
    settings: Settings,
    job_types: Sequence[type[Job]],
    queues: Iterable[str],
    *,
    state_url: str,
    clock: KitClock,
    done: Callable[[], None],
) -> KitLimits | None:
    """The kit's gate for the limits ``settings`` and ``job_types`` declare, its state
    at ``state_url`` (``memory:`` or the kit's file); None when there are none.
    ``done`` is called each time a job's follow-up after its settle is done.

    Raises:
        ConfigError: a limit that cannot work, or names a job type or queue the kit
            does not have (one line, as ``queuey worker`` says it).
    """
    book = limit_book(settings, job_types)
    if not book:
        return None
    book.check_known((job.NAME for job in job_types), queues)
    gate = KitLimits(book, limit_state_for(state_url, book), clock=clock, done=done)
    clock.follow(gate.sweep)
    return gate
