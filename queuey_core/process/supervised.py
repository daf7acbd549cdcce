"""The child's side of ``queuey worker --processes N``: a worker that a supervisor runs.

Owns: the child's worker options (:func:`worker_arguments`), its link to its supervisor
(one end of a socket pair, passed as an inherited file descriptor), what they say to
each other, and the ways the child notices that the supervisor is gone. Must never:
outlive the supervisor, nor take its death for more than one event. Three things tell
a child that the supervisor is gone, each of them a drain however often it comes: the
socket (its other end is held by the supervisor alone, so the kernel closes it when the
supervisor ends, however it ends, and the child reads end-of-file); ``PR_SET_PDEATHSIG``
(Linux), set to SIGHUP, never SIGTERM: the kernel may send it more than once (each time
the child is re-parented while the dying supervisor's threads exit), and a SIGTERM
counted twice would stop the child at once; and ``os.getppid()`` differing from
``$QUEUEY_SUPERVISOR_PID`` (a supervisor that died before the signal was set).

The protocol is one JSON object a line. Child to supervisor: ``{"event": "ready"}``
(consuming), ``{"event": "draining"}``, ``{"event": "recycle", "jobs": M}`` (ran its
``max_jobs_per_child`` jobs: start my replacement), ``{"event": "metrics", "port": P}``
(its own metrics server, on 127.0.0.1) and ``{"event": "stop"}`` (``queuey workers
shutdown`` chose it: do not replace it). Supervisor to child: ``{"event": "drain"}``
(the supervisor was told to stop, or replaces it) and ``{"event": "stop"}`` (told twice:
stop at once). The supervisor asks over the socket rather than with SIGTERM so that a
SIGTERM sent to every process of a unit (systemd's ``KillMode=control-group``) and the
supervisor's own request are one drain, not two signals.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from queuey_core.errors import ConfigError
from queuey_core.worker.hooks import JobInfo, WorkerHooks
from queuey_core.worker.running import RunningWorker

if TYPE_CHECKING:
    from queuey_core.settings import Settings

logger = logging.getLogger("queuey.worker")

#: The environment a supervisor gives each child (``queuey workers`` reports them).
SUPERVISOR_PID_ENV = "QUEUEY_SUPERVISOR_PID"
CHILD_INDEX_ENV = "QUEUEY_CHILD_INDEX"

#: What a supervisor asks of a child: drain (it was told to stop), stop at once (twice).
REQUESTS = frozenset({"drain", "stop"})

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGHUP) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent ends (Linux only).

    Returns whether it was set. The signal comes when the *thread* that forked us ends,
    so the supervisor only ever starts children from its main thread.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class SupervisorLink(WorkerHooks):
    """This child's socket to its supervisor, and the hooks that talk over it.

    Args:
        fd: the inherited end of the socket pair.
        index: this child's slot (``$QUEUEY_CHILD_INDEX``), put on every log line.
        max_jobs: after this many jobs, ask to be replaced (once); None: never.
    """

    def __init__(self, fd: int, *, index: int, max_jobs: int | None) -> None:
        self._sock = socket.socket(fileno=fd)
        self._lock = threading.Lock()
        self._jobs = 0
        self._max_jobs = max_jobs
        self._recycle_asked = False
        self.index = index
        self.supervisor_pid = int(os.environ.get(SUPERVISOR_PID_ENV, "0") or 0)

    # -- what the child tells its supervisor ------------------------------------------

    def send(self, event: str, **fields: Any) -> None:
        """One message to the supervisor; a supervisor that is gone is not an error here
        (the watcher thread notices and drains)."""
        line = (json.dumps({"event": event, **fields}) + "\n").encode()
        with self._lock, contextlib.suppress(OSError):
            self._sock.sendall(line)

    def on_worker_consuming(self, worker: RunningWorker) -> None:
        """See :class:`WorkerHooks`: ready."""
        self.send("ready")

    def on_worker_draining(self, worker: RunningWorker) -> None:
        """See :class:`WorkerHooks`."""
        self.send("draining")

    def on_job_succeeded(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._count()

    def on_job_failed(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._count()

    def on_job_deferred(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._count()

    def on_job_dead_lettered(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._count()

    def _count(self) -> None:
        with self._lock:
            self._jobs += 1
            due = (
                self._max_jobs is not None
                and self._jobs >= self._max_jobs
                and not self._recycle_asked
            )
            if due:
                self._recycle_asked = True
            jobs = self._jobs
        if due:
            logger.info(
                "ran %d jobs (max_jobs_per_child): asking the supervisor for a replacement",
                jobs,
            )
            self.send("recycle", jobs=jobs)

    # -- noticing that the supervisor is gone -----------------------------------------

    def orphaned(self) -> bool:
        """Whether the supervisor that started us is no longer our parent."""
        return self.supervisor_pid != 0 and os.getppid() != self.supervisor_pid

    def watch(
        self, on_gone: Callable[[], None], on_request: Callable[[str], None] | None = None
    ) -> threading.Thread:
        """Call ``on_gone()`` once the supervisor's end of the socket closes, and
        ``on_request(event)`` for each request it sends (``drain``, ``stop``)."""

        def run() -> None:
            buffer = b""
            while True:
                try:
                    data = self._sock.recv(4096)
                except InterruptedError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    on_gone()
                    return
                *lines, buffer = (buffer + data).split(b"\n")
                for line in lines:
                    event = _request(line)
                    if event is not None and on_request is not None:
                        on_request(event)

        thread = threading.Thread(target=run, name="queuey-supervisor-watch", daemon=True)
        thread.start()
        return thread


def _request(line: bytes) -> str | None:
    """The event of one line the supervisor sent, if it is one a child acts on."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    event = message.get("event") if isinstance(message, dict) else None
    return event if event in REQUESTS else None


class ChildFields(logging.Filter):
    """Puts ``child`` (the slot) and ``pid`` on every log record of a child."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self._index = index
        self._pid = os.getpid()

    def filter(self, record: logging.LogRecord) -> bool:
        """See :class:`logging.Filter`."""
        record.child = self._index
        record.pid = self._pid
        return True


def worker_arguments(
    settings: Settings,
    queues: Sequence[str] | None,
    job_timeout: float | None,
    with_scheduler: bool,
    burst: bool = False,
) -> list[str]:
    """The ``worker`` command and its options, as this process resolved them, for each
    child to run (the child adds its own ``--supervised-fd``)."""
    command = ["worker"]
    w = settings.worker
    if queues:
        command += ["--queues", ",".join(queues)]
    if w.concurrency is not None:
        command += ["--concurrency", str(w.concurrency)]
    if job_timeout is not None:
        command += ["--job-timeout", _seconds(job_timeout)]
    if with_scheduler:
        command.append("--with-scheduler")
    if burst:
        command.append("--burst")
    if w.max_jobs_per_child is not None:
        command += ["--max-jobs-per-child", str(w.max_jobs_per_child)]
    if w.metrics_port is not None:
        command += ["--metrics-port", "0"]  # a free port on 127.0.0.1; we serve the real one
    return command


def _seconds(value: float) -> str:
    """``30s`` for 30.0, ``0.25s`` for 0.25: exact, in the form a user writes."""
    text = repr(float(value)).removesuffix(".0")
    return text if "e" in text else f"{text}s"


def attach(fd: int, *, max_jobs: int | None) -> SupervisorLink:
    """Set this process up as a supervisor's child: parent-death signal, log fields, link.

    Raises:
        ConfigError: ``fd`` is not an open socket (someone passed the hidden option).
    """
    try:
        index = int(os.environ.get(CHILD_INDEX_ENV, "0") or 0)
        link = SupervisorLink(fd, index=index, max_jobs=max_jobs)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"--supervised-fd is for the supervisor's own children (use --processes): {exc}"
        ) from None
    die_with_parent()
    for handler in logging.getLogger().handlers:
        handler.addFilter(ChildFields(index))
    return link
