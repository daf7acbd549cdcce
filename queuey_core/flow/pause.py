"""Paused queues: the capability, pausing and resuming one, and a worker's watch on them.

A paused queue keeps taking jobs (producers enqueue as ever) while no worker starts a
new one of them, until someone resumes it. The pause is state on the backend, never in
a process, so it holds across every worker, every restart of a worker or of the broker:
a row of the embedded file, a durable marker queue on RabbitMQ, a set in the memory
backend's process.

Owns: the library's :func:`pause_queue`, :func:`resume_queue` and :func:`paused_queues` (what the
command line, the dashboard and the HTTP API call), and :class:`PauseWatch`, a worker's
thread that looks at the state and tells the worker what changed. A change also goes
out on the control channel when the backend has one, so live workers look at once
rather than at their next look. Must never: lose, settle, retry or dead-letter a job
because its queue is paused, or take a failed read for "resumed" (the last state read
stands until a read succeeds).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from queuey_core.backends.capabilities import require
from queuey_core.errors import QueueyError, UnknownQueueError

# Re-exported: what a backend answers is a module of its own, beneath the capabilities.
from queuey_core.flow.pause_capability import SupportsPause as SupportsPause  # noqa: PLC0414

logger = logging.getLogger(__name__)

#: Seconds a pause or resume waits for live workers to say they heard of it.
TELL_WINDOW = 0.5
#: Seconds between two warnings of a watch whose reads keep failing.
_WARN_EVERY = 60.0


@dataclass(frozen=True, slots=True)
class PauseChange:
    """What :func:`pause_queue` or :func:`resume_queue` did.

    ``changed`` is False when the queue already was so; ``workers_told`` counts the live
    workers that answered the control channel's notice within :data:`TELL_WINDOW`
    (the others see the change at their next look, within their backend's
    :meth:`~SupportsPause.pause_poll`).
    """

    queue: str
    paused: bool
    changed: bool
    workers_told: int


def pause_queue(
    backend: object,
    queue: str,
    *,
    known: Sequence[str] | None = None,
    secret: str | bytes | None = None,
) -> PauseChange:
    """Pause ``queue``: its jobs wait, and producers keep enqueueing, until resumed.

    Args:
        backend: a backend with :class:`SupportsPause`.
        queue: the queue's name.
        known: the configured queues' names; a name not among them is refused (a typo
            must not pause nothing and say it did).
        secret: ``[control] secret``, to sign the notice to live workers.

    Raises:
        MissingCapabilityError: the backend cannot pause queues.
        UnknownQueueError: ``queue`` is not in ``known``.
        BackendError: the state could not be written.
    """
    return _change(backend, queue, True, known=known, secret=secret)


def resume_queue(
    backend: object,
    queue: str,
    *,
    known: Sequence[str] | None = None,
    secret: str | bytes | None = None,
) -> PauseChange:
    """Resume ``queue``: workers take its jobs again. Raises as :func:`pause_queue`."""
    return _change(backend, queue, False, known=known, secret=secret)


def paused_queues(backend: object, names: Sequence[str]) -> frozenset[str]:
    """Which of ``names`` are paused (none on a backend that cannot pause).

    Raises:
        BackendError: the state could not be read.
    """
    if not isinstance(backend, SupportsPause):
        return frozenset()
    return backend.paused_queues(names)


def _change(
    backend: object,
    queue: str,
    paused: bool,
    *,
    known: Sequence[str] | None,
    secret: str | bytes | None,
) -> PauseChange:
    verb = "pause" if paused else "resume"
    pauses = require(backend, SupportsPause, f"`queuey queues {verb}`")
    if known is not None and queue not in known:
        raise UnknownQueueError(queue, list(known))
    changed = pauses.set_paused(queue, paused)
    told = _tell_workers(backend, secret) if changed else 0
    if changed:
        logger.info("queue %s", "paused" if paused else "resumed", extra={"queue": queue})
    return PauseChange(queue=queue, paused=paused, changed=changed, workers_told=told)


def _tell_workers(backend: object, secret: str | bytes | None) -> int:
    """Ask every live worker to look at the paused queues now; how many answered.

    The state is written already: a worker this does not reach still sees it at its
    next look, so a failure here is logged, never raised.
    """
    from queuey_core.backends.capabilities import SupportsControl  # noqa: PLC0415
    from queuey_core.control.client import ask  # noqa: PLC0415 - pydantic, only now
    from queuey_core.control.documents import Command, Selection  # noqa: PLC0415

    if not isinstance(backend, SupportsControl):
        return 0
    try:
        return len(ask(backend, Command.PAUSES, Selection(), timeout=TELL_WINDOW, secret=secret))
    except QueueyError as exc:
        logger.warning(
            "live workers could not be told at once (%s): they see it at their next look", exc
        )
        return 0


#: Told the paused queues among those watched, after each look but the first (which
#: :meth:`PauseWatch.start` returns).
PauseListener = Callable[[frozenset[str]], None]


class PauseWatch:
    """A worker's watch on the paused queues among ``names``: a thread of its own.

    :meth:`start` reads the state before it returns (the worker consumes none of the
    paused queues from its first moment), then the thread reads again every
    ``backend.pause_poll()`` seconds, or at once when :meth:`look_now` is called (a
    notice on the control channel), and tells ``listener`` what each look read (a
    listener acts on what changed, and retries what failed last time). A read that
    fails keeps the last state (a broker or file out of reach pauses and resumes
    nothing), is logged at most once a minute, and is tried again at the next look.
    """

    def __init__(self, backend: SupportsPause, names: Sequence[str], listener: PauseListener):
        self._backend = backend
        self._names = list(dict.fromkeys(names))
        self._listener = listener
        self._poll = max(backend.pause_poll(), 0.01)
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._state: frozenset[str] = frozenset()
        self._thread = threading.Thread(target=self._run, name="queuey-pauses", daemon=True)
        self._warned_at = -_WARN_EVERY

    @property
    def paused(self) -> frozenset[str]:
        """The paused queues as last read."""
        return self._state

    def start(self) -> frozenset[str]:
        """Read the state (raising what the read raises), start the thread, and return
        the paused queues."""
        self._state = self._backend.paused_queues(self._names)
        self._thread.start()
        return self._state

    def look_now(self) -> None:
        """Look at the state at once rather than at the next poll (never waits)."""
        self._wake.set()

    def close(self) -> None:
        """Stop the thread (idempotent); the listener is not called after this returns
        once the thread has ended."""
        self._closed.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self._poll)
            self._wake.clear()
            if self._closed.is_set():
                return
            try:
                now = self._backend.paused_queues(self._names)
            except Exception as exc:  # the watch outlives any error: it reads again
                self._warn(exc)
                continue
            self._state = now
            try:
                self._listener(now)
            except Exception:
                logger.error("applying the paused queues failed", exc_info=True)

    def _warn(self, exc: Exception) -> None:
        at = time.monotonic()
        if at - self._warned_at >= _WARN_EVERY:
            self._warned_at = at
            logger.warning(
                "paused queues cannot be read (%s): keeping the last state read, %s",
                exc,
                f"paused: {', '.join(sorted(self._state))}" if self._state else "none paused",
            )
