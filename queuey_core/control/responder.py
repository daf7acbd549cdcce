"""A worker's side of the control channel: counting what it did, and answering requests.

:class:`JobCounts` is a :class:`WorkerHooks` (as the metrics are) that counts outcomes and
follows the worker's state; :class:`ControlResponder` turns a request's bytes into a
reply's bytes, for the backend to send back. The worker starts both in ``run()`` (see
:mod:`queuey_core.worker.runner`).

Owns: the worker's identity on the control channel (``host:pid:random``) and what a
status says. Must never: raise into the backend's thread, block it (a status reads
counters; a shutdown only asks the worker to stop), or act on a request that does not
parse: it is logged (at most once a minute, so a flood cannot fill the logs) and ignored.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from queuey_core._version import __version__
from queuey_core.clock import Clock
from queuey_core.control.documents import (
    VERSION,
    Command,
    ControlReply,
    ControlRequest,
    WorkerStatus,
)
from queuey_core.control.signing import Verifier, unwrap
from queuey_core.errors import DecodeError
from queuey_core.worker.hooks import JobInfo, WorkerHooks
from queuey_core.worker.running import RunningWorker

logger = logging.getLogger(__name__)

#: Set by ``queuey worker --processes N`` in each child's environment.
SUPERVISOR_ENV = "QUEUEY_SUPERVISOR_PID"
CHILD_ENV = "QUEUEY_CHILD_INDEX"

#: Seconds between two logged complaints about bad requests.
_COMPLAIN_EVERY = 60.0


class JobCounts(WorkerHooks):
    """Outcomes since the worker started, and its state, as its hooks report them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.state = "starting"
        self._running = 0
        self.succeeded = 0
        self.failed = 0
        self.retried = 0
        self.deferred = 0
        self.dead_lettered = 0
        self.timed_out = 0

    @property
    def running(self) -> int:
        """Jobs started whose outcome has not been reported yet."""
        return self._running

    def on_worker_starting(self, worker: RunningWorker) -> None:
        """See :class:`WorkerHooks`."""
        self.state = "starting"

    def on_worker_consuming(self, worker: RunningWorker) -> None:
        """See :class:`WorkerHooks`."""
        self.state = "consuming"

    def on_worker_draining(self, worker: RunningWorker) -> None:
        """See :class:`WorkerHooks`."""
        self.state = "draining"

    def on_worker_stopped(self, worker: RunningWorker) -> None:
        """See :class:`WorkerHooks`."""
        self.state = "stopped"

    def on_job_started(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self.count("started", ran=True)

    def on_job_succeeded(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self.count("succeeded", ran=job.duration is not None)

    def on_job_failed(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`: a failed run that is retried."""
        self.count("failed", ran=job.duration is not None)

    def on_job_deferred(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self.count("deferred", ran=job.duration is not None)

    def on_job_dead_lettered(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`: one that ran (fatal, out of attempts) also failed."""
        self.count("dead_lettered", ran=job.duration is not None)

    def on_job_timed_out(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self.count("timed_out", ran=job.duration is not None)

    def count(self, event: str, *, ran: bool) -> None:
        """Count one job event (a hook method's name without ``on_job_``); ``ran``: its
        handler ran (only such a job was counted running).

        The worker calls this directly, without the :class:`JobInfo` a hook gets: it
        counts every job.
        """
        with self._lock:
            if event == "started":
                self._running += 1
                return
            if event == "timed_out":
                self.timed_out += 1
                return
            if event == "succeeded":
                self.succeeded += 1
            elif event == "failed":
                self.failed += 1
                self.retried += 1
            elif event == "deferred":
                self.deferred += 1
            elif event == "dead_lettered":
                self.dead_lettered += 1
                if ran:
                    self.failed += 1
            elif event != "cancelled":  # counted by the metrics and the job store
                raise ValueError(f"no such job event: {event!r}")
            if ran:
                self._running -= 1


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a worker is on the control channel."""

    id: str
    host: str
    pid: int
    version: str
    supervisor_pid: int | None
    child: int | None

    @classmethod
    def here(cls) -> Identity:
        """This process (read now: a forked child is another process)."""
        host, pid = socket.gethostname(), os.getpid()
        return cls(
            id=f"{host}:{pid}:{uuid.uuid4().hex[:6]}",
            host=host,
            pid=pid,
            version=__version__,
            supervisor_pid=_env_int(SUPERVISOR_ENV),
            child=_env_int(CHILD_ENV),
        )


class ControlResponder:
    """Answers the control requests meant for one worker (a ``ControlHandler``).

    Args:
        worker: the worker it speaks for.
        counts: the :class:`JobCounts` among the worker's hooks.
        clock: the worker's clock (uptime, start time).
        on_shutdown: what a shutdown request does (the worker's handle's
            ``shutdown()``; ``queuey worker`` drains exactly as on SIGTERM). It is
            called on the backend's thread, so it must only ask, never wait.
        secret: when given (``[control] secret``), only requests signed with it, within
            a minute of this worker's clock and not seen before, are answered; the
            others are refused, counted (:attr:`refused`) and never answered (see
            :mod:`queuey_core.control.signing`).
        on_pauses: what a notice that the paused queues changed does (the worker's
            :class:`~queuey_core.flow.pause.PauseWatch`'s ``look_now``); it must only
            ask, never wait.
        paused: the worker's queues paused now, for its status.
    """

    def __init__(
        self,
        worker: RunningWorker,
        counts: JobCounts,
        *,
        clock: Clock,
        on_shutdown: Callable[[], None],
        secret: str | bytes | None = None,
        on_pauses: Callable[[], None] | None = None,
        paused: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        self.identity = Identity.here()
        self._verifier = Verifier(secret) if secret is not None else None
        self.refused = 0
        """Requests refused for want of a good signature (only with a secret)."""
        self._worker = worker
        self._counts = counts
        self._clock = clock
        self._on_shutdown = on_shutdown
        self._on_pauses = on_pauses
        self._paused = paused
        self._started_mono = clock.monotonic()
        started = datetime.datetime.fromtimestamp(clock.wall_ms() / 1000, datetime.UTC)
        self._started_at = started.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        self._shutdown_asked = False
        self._complained_at = -_COMPLAIN_EVERY
        self._unlogged = 0

    def __call__(self, wire: bytes) -> bytes | None:
        """The reply to ``wire``, or None when it is not for this worker, is bad, or (with
        a secret) is not signed as it must be."""
        if self._verifier is not None:
            try:
                body = self._verifier.verify(wire, now_ms=self._clock.wall_ms())
            except DecodeError as exc:
                self.refused += 1
                self._complain(f"refused ({exc}): this worker requires signed requests")
                return None
        else:
            try:
                body = unwrap(wire)  # signed or not: without a secret, either is accepted
            except DecodeError as exc:
                self._complain(f"not a control request ({exc})")
                return None
        try:
            request = ControlRequest.decode(body)
        except DecodeError as exc:
            self._complain(f"not a control request ({exc})")
            return None
        except Exception as exc:  # never expected; the backend's thread must live on
            self._complain(f"a control request could not be read ({type(exc).__name__})")
            return None
        me = self.identity
        if not request.select.matches(me.id, me.host, me.pid):
            return None
        if request.command is Command.PAUSES and self._on_pauses is not None:
            self._on_pauses()  # only asks its watch to look: never waits
        if request.command is Command.SHUTDOWN:
            if request.select.is_everyone and not request.select.all:
                self._complain('a shutdown request chose no worker and did not say "all"')
                return None
            if self._shutdown_asked or self._worker.handle.is_shutdown():
                # Already draining: asking again must not become a second SIGTERM,
                # which would stop it at once.
                return ControlReply(
                    v=VERSION, command=request.command, worker=self.status()
                ).encode()
            self._shutdown_asked = True
            logger.warning(
                "shutdown requested over the control channel (%s)",
                request.select.describe(),
                extra={"worker_id": me.id},
            )
            try:
                self._on_shutdown()
            except Exception:
                logger.error("the shutdown request failed", exc_info=True)
                return ControlReply(
                    v=VERSION, command=request.command, accepted=False, worker=self.status()
                ).encode()
        return ControlReply(v=VERSION, command=request.command, worker=self.status()).encode()

    def status(self) -> WorkerStatus:
        """What this worker is doing now."""
        me, c, w = self.identity, self._counts, self._worker
        handle = w.handle
        return WorkerStatus(
            id=me.id,
            host=me.host,
            pid=me.pid,
            version=me.version,
            state=c.state,
            queues=tuple(q.name for q in w.queues),
            job_types=tuple(sorted(w.job_types)),
            concurrency=w.concurrency,
            running=max(0, c.running),
            in_flight=handle.in_flight(),
            succeeded=c.succeeded,
            failed=c.failed,
            retried=c.retried,
            deferred=c.deferred,
            dead_lettered=c.dead_lettered,
            timed_out=c.timed_out,
            settle_failures=handle.settle_failures(),
            stuck_job_threads=handle.stuck_jobs(),
            started_at=self._started_at,
            uptime=round(max(0.0, self._clock.monotonic() - self._started_mono), 3),
            supervisor_pid=me.supervisor_pid,
            child=me.child,
            paused=tuple(self._paused()) if self._paused is not None else (),
        )

    def _complain(self, why: str) -> None:
        now = time.monotonic()
        if now - self._complained_at < _COMPLAIN_EVERY:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more since the last one)" if self._unlogged else ""
        logger.warning("control request ignored: %s%s", why, more)
        self._complained_at = now
        self._unlogged = 0


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() else None
