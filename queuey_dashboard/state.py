"""What one dashboard works with: the settings, its backends, the schedules, the job
store, the history, and the options it was started with.

Three backends opened from the settings, one a duty: counting (and enqueueing), dead
letters, and the control channel. On RabbitMQ each holds one admin connection behind a
lock; asking the workers holds it for the whole reply window, and a deep page of dead
letters reads every message before it: on one connection, either would hold up every
count of the overview. Each is opened on first use (a dashboard mounted in another
application gets no lifespan of its own) and closed by :meth:`Dashboard.close`. A
backend given to the dashboard serves every duty the caller did not give another for.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from queuey_core.backends.capabilities import backend_name
from queuey_core.backends.open import open_backend
from queuey_core.control import Selection, WorkerStatus, worker_statuses
from queuey_core.errors import QueueyError
from queuey_core.results.setup import with_dead_letter_store
from queuey_core.settings import Settings
from queuey_dashboard.history import Series, Throughput
from queuey_dashboard.security import Csrf

logger = logging.getLogger(__name__)

#: Seconds to gather the workers' replies: a live worker answers within milliseconds.
WORKER_WINDOW = 0.5


class Dashboard:
    """The state behind one dashboard app (see :func:`queuey_dashboard.create_app`)."""

    def __init__(
        self,
        settings: Settings,
        *,
        backend: Any = None,
        control_backend: Any = None,
        read_only: bool | None = None,
        token: str | None = None,
        schedules: Sequence[Any] | None = None,
        job_store: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.read_only = settings.dashboard.read_only if read_only is None else read_only
        configured = settings.dashboard.token
        self.token = (
            token
            if token is not None
            else (configured.get_secret_value() if configured is not None else None)
        )
        self.refresh = settings.dashboard.refresh
        self.queue_names = list(settings.queue_set())
        self.clock = clock
        self.csrf = Csrf()
        self.depths = Series()
        self.throughput = Throughput()
        self._job_store = job_store
        self._workflows: Any = None
        self._schedules = None if schedules is None else list(schedules)
        self._job_types: list[Any] | None = None
        self._lock = threading.Lock()
        self._backend = backend
        self._control = control_backend if control_backend is not None else backend
        self._dead = backend
        self._owned: list[Any] = []
        self._workers: tuple[float, list[WorkerStatus]] | None = None
        self._workers_lock = threading.Lock()

    def __repr__(self) -> str:  # never the token
        return f"Dashboard(read_only={self.read_only}, token={'set' if self.token else 'none'})"

    # -- backends ------------------------------------------------------------------------

    def backend(self) -> Any:
        """The backend for counts, dead letters and enqueueing (opened on first use).

        Raises:
            BackendError: the broker cannot be reached.
        """
        with self._lock:
            if self._backend is None:
                self._backend = self._open()
            return self._backend

    def dead_letter_backend(self) -> Any:
        """The backend dead letters are read and moved through (opened on first use)."""
        with self._lock:
            if self._dead is None:
                self._dead = self._open()
            return self._dead

    def control_backend(self) -> Any:
        """The backend the workers are asked through (opened on first use)."""
        with self._lock:
            if self._control is None:
                self._control = self._open()
            return self._control

    def _open(self) -> Any:
        opened = with_dead_letter_store(open_backend(self.settings.broker), self.settings)
        self._owned.append(opened)
        return opened

    def backend_name(self) -> str:
        """``rabbitmq``, ``sqlite``, ``memory``: the settings' when nothing is open yet."""
        if self._backend is not None:
            return backend_name(self._backend)
        return "sqlite" if self.settings.broker.is_embedded() else "rabbitmq"

    def broker_shown(self) -> str:
        """The broker URL as a page may show it: the password masked."""
        url = self.settings.redacted()["broker"]["url"]
        return url if isinstance(url, str) else ", ".join(url)

    def close(self) -> None:
        """Close the backends this dashboard opened (those given to it stay open)."""
        with self._lock:
            owned, self._owned = self._owned, []
        for backend in owned:
            try:
                backend.close()
            except QueueyError as exc:
                logger.warning("closing the dashboard's backend: %s", exc)

    # -- workers -------------------------------------------------------------------------

    def control_secret(self) -> str | None:
        """``[control] secret``, to sign requests to workers that require it."""
        secret = self.settings.control.secret
        return secret.get_secret_value() if secret is not None else None

    def workers(self, *, fresh: bool = False) -> list[WorkerStatus]:
        """The live workers, asked at most once per refresh interval (pages that poll
        together share one broadcast).

        Raises:
            MissingCapabilityError: the backend has no control channel.
            BackendError: the broker cannot be reached.
        """
        with self._workers_lock:
            now = time.monotonic()
            cached = self._workers
            if not fresh and cached is not None and now - cached[0] < self.refresh / 2:
                return cached[1]
            found = worker_statuses(
                self.control_backend(),
                Selection(),
                timeout=WORKER_WINDOW,
                secret=self.control_secret(),
            )
            self._workers = (time.monotonic(), found)
        self.throughput.add(self.clock(), {s.id: s.succeeded + s.failed for s in found})
        return found

    def forget_workers(self) -> None:
        """Ask again next time (after a drain)."""
        with self._workers_lock:
            self._workers = None

    # -- the job store -------------------------------------------------------------------

    def job_store(self) -> Any:
        """The job store: the one given, else the one ``[results]`` names (opened on
        first use), else None.

        Raises:
            JobStoreError: the configured store cannot be reached.
        """
        with self._lock:
            if self._job_store is None:
                from queuey_core.results import open_job_store  # noqa: PLC0415
                from queuey_core.results.setup import results_url  # noqa: PLC0415

                url = results_url(self.settings)
                if url is not None:
                    opened = open_job_store(url, retention=self.settings.results.retention)
                    self._owned.append(opened)
                    self._job_store = opened
            return self._job_store

    def workflow_store(self) -> Any:
        """The store that holds workflows (the embedded file, or ``[results] url`` on
        SQLite or PostgreSQL), opened on first use; None when there is none."""
        with self._lock:
            if self._workflows is None:
                from queuey_core.workflows import open_workflow_store  # noqa: PLC0415
                from queuey_core.workflows.setup import workflow_url  # noqa: PLC0415

                url = workflow_url(self.settings)
                if url is not None:
                    self._workflows = open_workflow_store(url)
                    self._owned.append(self._workflows)
            return self._workflows

    def job_types(self) -> list[Any]:
        """The job classes plugins register (loaded once): limits declared on a class
        count as those of ``[limits]`` do.

        Raises:
            ConfigError: a plugin that does not load.
        """
        with self._lock:
            if self._job_types is None:
                from queuey_core.handlers import discover  # noqa: PLC0415

                self._job_types = [d.handler.job_type for d in discover()]
            return list(self._job_types)

    # -- schedules -----------------------------------------------------------------------

    def schedules(self) -> list[Any]:
        """The configured schedules, their payloads checked against the handlers found
        (loaded once).

        Raises:
            ConfigError: a schedule whose job or payload does not fit.
        """
        with self._lock:
            if self._schedules is None:
                from queuey_core.handlers import discover, split_by_queue  # noqa: PLC0415
                from queuey_core.process.scheduler import load_schedules  # noqa: PLC0415

                if not self.settings.schedules:
                    self._schedules = []
                else:
                    found, _ = split_by_queue(discover(), self.settings.queue_set())
                    handlers = [d.handler for d in found]
                    self._schedules = load_schedules(self.settings, handlers, where="configuration")
            return list(self._schedules)
