"""The main thread of a worker process: it runs the worker on a thread, applies what
asks it to stop, and holds the shutdown deadline (:func:`run_until_stopped`).

What stops a worker, and what each does (``docs/operations.md``, "Stopping"):

- the first SIGTERM or SIGINT (or ``queuey workers shutdown``, which counts as one):
  drain, for up to ``shutdown_timeout``; the second: stop at once (exit 130);
- a supervisor's "drain" (it was told to stop) and a supervisor that is gone (socket
  closed, parent-death signal, another parent): drain, however often they come; they
  are never counted as a signal, so they never turn into "stop at once";
- a supervisor's "stop" (it was signalled twice): stop at once;
- the deadline passing while draining: stop at once.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, NoReturn

from queuey_core.errors import ConsumerStoppedError, QueueyError
from queuey_core.process.exits import Exit
from queuey_core.process.stops import StopRequests

if TYPE_CHECKING:
    from queuey_core.process.supervised import SupervisorLink
    from queuey_core.worker import Worker

logger = logging.getLogger("queuey.worker")

#: How long stopping at once waits for the log lines to be written before it exits.
LOG_FLUSH_LIMIT = 0.25
#: How long stopping at once waits for cancelled async jobs to end (their ``finally``).
CANCEL_LIMIT = 0.5
#: How long stopping at once waits for a backend that holds leases to give them back.
GIVE_BACK_LIMIT = 1.0
#: The longest the main loop sleeps between looks at the deadline.
TICK = 0.2

#: Requests that count as a signal: the first drains, the second stops at once.
SIGNALS = frozenset({"SIGTERM", "SIGINT", "shutdown"})


class _Stopping:
    """Where the process is on its way out: signals counted, the deadline."""

    def __init__(self, w: Worker, shutdown_timeout: float, link: SupervisorLink | None) -> None:
        self.w = w
        self.timeout = shutdown_timeout
        self.link = link
        self.signals = 0
        self.deadline = float("inf")

    def apply(self, what: str) -> None:
        """Act on one request (in the main thread)."""
        if what in SIGNALS:
            self.signals += 1
            # A shutdown over the control channel (queuey workers shutdown) is logged as
            # the SIGTERM it stands for: operators and their log searches see one drain.
            name = "SIGTERM" if what == "shutdown" else what
            if self.signals >= 2:
                stop_now(self.w, f"second signal ({name})")
            if self._drain():
                logger.warning(
                    "%s: draining (up to %gs); send it again to stop at once", name, self.timeout
                )
            else:
                logger.warning(
                    "%s: already draining (%.1fs left); send it again to stop at once",
                    name,
                    max(0.0, self.deadline - time.monotonic()),
                )
        elif what == "stop":
            stop_now(self.w, "the supervisor was signalled twice")
        elif what == "drain":
            if self._drain():
                logger.warning("the supervisor asked: draining (up to %gs)", self.timeout)
        elif what in ("orphaned", "SIGHUP"):
            if what == "SIGHUP" and (self.link is None or not self.link.orphaned()):
                logger.info("SIGHUP while the supervisor lives: ignored")
                return
            if self._drain():
                logger.warning("the supervisor is gone: draining (up to %gs)", self.timeout)

    def _drain(self) -> bool:
        """Start draining; False if it already was (nothing changes then)."""
        if self.deadline != float("inf"):
            return False
        self.deadline = time.monotonic() + self.timeout
        self.w.handle.shutdown()
        return True


def run_until_stopped(
    w: Worker,
    broker: Any,
    shutdown_timeout: float,
    burst: bool,
    link: SupervisorLink | None = None,
    stops: StopRequests | None = None,
) -> int:
    """Run ``w`` on a thread while this (main) thread applies stop requests; the exit code.

    ``stops`` may already hold requests (a signal during start-up): they apply at once.
    Without it, SIGTERM and SIGINT are recorded from now on.
    """
    own = stops is None
    requests = stops if stops is not None else StopRequests().install()
    outcome: dict[str, BaseException | None] = {"error": None}
    ended = threading.Event()

    def target() -> None:
        try:
            w.run()
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            ended.set()
            requests.wake()

    thread = threading.Thread(target=target, name="queuey-worker")
    stopping = _Stopping(w, shutdown_timeout, link)
    if link is not None and link.orphaned():
        requests.request("orphaned")
    thread.start()
    if burst:
        threading.Thread(
            target=_burst_watch, args=(w, broker), name="queuey-burst-watch", daemon=True
        ).start()
    try:
        while not ended.is_set():
            for what in requests.take():
                stopping.apply(what)
            if time.monotonic() > stopping.deadline:
                stop_now(w, f"shutdown took longer than {shutdown_timeout:g}s")
            # Woken by any request at once; by the deadline on time.
            requests.wait(min(TICK, max(0.0, stopping.deadline - time.monotonic())))
        thread.join()
    finally:
        if own:
            requests.close()
    settle_failures = w.handle.settle_failures()
    logger.info("worker exited", extra={"settle_failures": settle_failures})
    error = outcome["error"]
    if isinstance(error, ConsumerStoppedError):
        logger.error("lost the broker: %s", error)
        return Exit.BROKER_LOST
    if isinstance(error, QueueyError):
        logger.error("%s", error)
        return Exit.FAILURE
    if error is not None:
        raise error
    return Exit.OK


def stop_now(w: Worker, why: str) -> NoReturn:
    """Exit at once: unsettled deliveries go back to the broker with the connection, or,
    on a backend that :class:`~queuey_core.backends.capabilities.HoldsLeases` (a SQLite
    file), are given back by the backend first, within :data:`GIVE_BACK_LIMIT`.

    Running ``async def`` jobs are cancelled first and given :data:`CANCEL_LIMIT` to
    end, so their ``finally`` blocks run (threads cannot be). The log lines are given
    :data:`LOG_FLUSH_LIMIT` to be written: a handler stuck on a full pipe must not turn
    "at once" into never.
    """
    # Here, not with the module: ``queuey --help`` imports this one, and the
    # capabilities import pydantic (a running worker has them loaded already).
    from queuey_core.backends.capabilities import HoldsLeases  # noqa: PLC0415

    in_flight = w.handle.in_flight()
    w.cancel_async_jobs(CANCEL_LIMIT)
    backend = w.backend
    if isinstance(backend, HoldsLeases):
        fate = backend.give_back_now(timeout=GIVE_BACK_LIMIT)
    else:
        fate = "go back to the broker with the connection"
    logger.error("%s: stopping at once; %d unsettled deliveries %s", why, in_flight, fate)
    flushing = threading.Thread(target=logging.shutdown, name="queuey-log-flush", daemon=True)
    flushing.start()
    flushing.join(LOG_FLUSH_LIMIT)
    os._exit(Exit.FORCED)


def exit_process(code: int) -> NoReturn:
    """End this process with ``code``, now that its worker has stopped.

    The exit hooks run (``atexit``: logging's final flush, an error reporter's), the
    interpreter's teardown does not: with a worker's objects alive, its last garbage
    collection alone took more than a second on a loaded machine, past the promise of
    ``shutdown_timeout`` plus a second. For a process that ends with its worker (the
    command line), never for a caller that goes on.
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _burst_watch(w: Worker, broker: Any) -> None:
    """Shut the worker down once its queues are empty, it holds nothing, no retry or
    deferral is still held in the delay ladder (which any queue shares), and no job waits
    parked behind a concurrency limit. A paused queue counts as empty: its jobs wait for
    the resume, not for this worker."""
    from queuey_core.flow.pause import paused_queues  # noqa: PLC0415

    names = [q.name for q in w.queues]
    quiet = 0
    while not w.handle.is_shutdown():
        time.sleep(0.2)
        try:
            # inspect(): every backend that can count (RabbitMQ, a SQLite file) has it.
            seen = broker.inspect(names)
            paused = paused_queues(broker, names)
            empty = all(
                c is not None and (c.ready == 0 or name in paused)
                for name, c in seen.queues.items()
            )
            empty = empty and not seen.held
            empty = empty and (w.limits is None or w.limits.parked() == 0)
        except QueueyError:
            continue
        quiet = quiet + 1 if empty and w.handle.in_flight() == 0 else 0
        if quiet >= 3:  # three looks in a row: nothing was on its way in between
            waiting = {n: c.ready for n, c in seen.queues.items() if c is not None and c.ready}
            if waiting:  # only a paused queue's: "empty" would hide jobs left behind
                logger.info(
                    "burst: nothing left to run, stopping; paused queues keep their jobs "
                    "for the resume: %s",
                    ", ".join(f"{n} ({ready} ready)" for n, ready in sorted(waiting.items())),
                    extra={"paused_ready": waiting},
                )
            else:
                logger.info("burst: queues empty, stopping")
            w.handle.shutdown()
