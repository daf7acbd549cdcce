"""The child's side of ``queuey worker --processes N``: a worker that a supervisor runs.

Owns: the child's command line (:func:`child_command`), its link to its supervisor (one
end of a socket pair, passed as an inherited file descriptor), what it tells the
supervisor (ready, draining, recycle, its metrics port), and the two ways it notices
that the supervisor is gone. Must never: outlive the supervisor. ``PR_SET_PDEATHSIG``
(Linux) turns the supervisor's death into a SIGTERM, which drains the worker as usual;
it is set after the fork, so a supervisor that died in between is caught by comparing
``os.getppid()`` with ``$QUEUEY_SUPERVISOR_PID``, and by the socket: its other end is
held by the supervisor alone, so the kernel closes it when the supervisor ends, however
it ends, and the child reads end-of-file.

The protocol is one JSON object a line, child to supervisor only:
``{"event": "ready"}`` (consuming), ``{"event": "draining"}``, ``{"event": "recycle",
"jobs": M}`` (ran its ``max_jobs_per_child`` jobs: start my replacement) and
``{"event": "metrics", "port": P}`` (its own metrics server, on 127.0.0.1) and
``{"event": "stop"}`` (``queuey workers shutdown`` chose it: do not replace it).
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
from typing import TYPE_CHECKING, Any

import typer

from queuey_core.errors import ConfigError
from queuey_core.worker.hooks import JobInfo, RunningWorker, WorkerHooks

if TYPE_CHECKING:
    from queuey_core.settings import Settings

logger = logging.getLogger("queuey.worker")

#: The environment a supervisor gives each child (``queuey workers`` reports them).
SUPERVISOR_PID_ENV = "QUEUEY_SUPERVISOR_PID"
CHILD_INDEX_ENV = "QUEUEY_CHILD_INDEX"

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
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

    def watch(self, on_gone: Any) -> threading.Thread:
        """Call ``on_gone()`` once the supervisor's end of the socket closes."""

        def run() -> None:
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

        thread = threading.Thread(target=run, name="queuey-supervisor-watch", daemon=True)
        thread.start()
        return thread


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


def child_command(
    ctx: typer.Context,
    settings: Settings,
    consume: list[str] | None,
    job_timeout: str | None,
    with_scheduler: bool,
) -> list[str]:
    """The command each child runs: this ``queuey worker``, with the same global options
    and the worker options as this process resolved them (the child adds its own
    ``--supervised-fd``)."""
    root = ctx.find_root().params
    command = [sys.executable, "-m", "queuey_cli"]
    for path in root.get("config_path") or []:
        command += ["--config", str(path)]
    log_format = root.get("log_format")
    if log_format is not None:
        command += ["--log-format", str(getattr(log_format, "value", log_format))]
    if root.get("log_level"):
        command += ["--log-level", str(root["log_level"])]
    command.append("worker")
    w = settings.worker
    if consume:
        command += ["--queues", ",".join(consume)]
    if w.concurrency is not None:
        command += ["--concurrency", str(w.concurrency)]
    if job_timeout is not None:
        command += ["--job-timeout", job_timeout]
    if with_scheduler:
        command.append("--with-scheduler")
    if w.max_jobs_per_child is not None:
        command += ["--max-jobs-per-child", str(w.max_jobs_per_child)]
    if w.metrics_port is not None:
        command += ["--metrics-port", "0"]  # a free port on 127.0.0.1; we serve the real one
    return command


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
