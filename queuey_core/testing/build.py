"""What a :class:`~queuey_core.testing.QueueyKit` is made of, opened and closed together:
its gated backend, the producer, the limits' gate, the workflows and the worker.

Each is made as ``queuey worker`` and ``queuey enqueue`` make theirs from the settings
(unique jobs' ``[unique.*]``, ``[limits.*]`` and ``Job.LIMITS``), with every store in
the kit: the in-memory backend keeps its keys and its limits' state in process (its
workflows in a file of the kit's temporary directory), the kit's SQLite file keeps
everything.

Owns: opening those parts and closing them (the temporary directory last). Must never:
start the worker (the kit does, on its thread).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from queuey_core.errors import KitError
from queuey_core.flow.unique_setup import producer_options
from queuey_core.handlers import JobHandler
from queuey_core.producer import Producer
from queuey_core.queues import QueueSet
from queuey_core.settings import Settings
from queuey_core.testing.gate import GatedMemoryBackend, GatedSqliteBackend
from queuey_core.testing.limits import KitClock, KitLimits, kit_limits
from queuey_core.testing.workflows import KitWorkflows
from queuey_core.worker import Worker, WorkerHooks

BackendName = Literal["memory", "sqlite"]


class KitParts:
    """The kit's backend (``memory`` or a ``sqlite`` file in ``path``, by default in a
    temporary directory), producer, limits, workflows and worker, on ``clock``.

    Raises:
        KitError: an unknown backend name.
        ConfigError: a limit or a unique key that cannot work.
    """

    def __init__(
        self,
        backend: BackendName,
        path: str | Path | None,
        *,
        settings: Settings,
        queues: QueueSet,
        handlers: Sequence[JobHandler],
        run: Sequence[JobHandler],
        clock: KitClock,
        hooks: Iterable[WorkerHooks],
        job_timeout: float | None,
    ) -> None:
        self._dir: str | None = None
        self.limits: KitLimits | None = None
        try:
            self.backend, state_url, flows_url = self._open(backend, path, clock)
        except BaseException:  # a file that cannot be made: no directory left behind
            self._remove_dir()
            raise
        # Nothing is opened yet: the store connects on first use.
        self.flows = KitWorkflows(self.backend, queues, flows_url, clock=clock)
        try:
            options = producer_options(self.backend, settings)
            self.producer = Producer(self.backend, queues, clock=clock, **options)
            job_types = [h.job_type for h in handlers]
            self.limits = kit_limits(
                settings,
                job_types,
                queues,
                state_url=state_url,
                clock=clock,
                done=self.backend.gate.poke,
            )
            self.worker = Worker(
                self.backend,
                queues,
                run,
                # Jobs run one at a time (the gate releases one, or two with running());
                # the others are for threads a timed-out job still holds.
                concurrency=4,
                job_timeout=job_timeout,
                clock=clock,
                hooks=[*hooks, self.flows.hook],
                control=False,
                loop_block_warning=None,
                limits=self.limits,
            )
        except BaseException:  # a handler on an unknown queue, say: no file left behind
            self.close()
            raise

    def _open(
        self, backend: BackendName, path: str | Path | None, clock: KitClock
    ) -> tuple[GatedMemoryBackend | GatedSqliteBackend, str, str]:
        """The gated backend, where its limits' state lives and where its workflows do."""
        if backend == "memory":
            flows_url = f"sqlite:///{Path(self._scratch()) / 'flows.db'}"
            return GatedMemoryBackend(clock=clock), "memory:", flows_url
        if backend == "sqlite":
            url = f"sqlite:///{Path(path or self._scratch()) / 'queuey.db'}"
            return GatedSqliteBackend(url, clock=clock), url, url
        raise KitError(f"unknown kit backend {backend!r}: 'memory' or 'sqlite'")

    def _remove_dir(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def _scratch(self) -> str:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="queuey-kit-")
        return self._dir

    def close(self) -> None:
        """Close the stores and the backend, and remove the temporary directory."""
        try:
            if self.limits is not None:
                self.limits.close()
            self.flows.close()
            self.backend.close()
        finally:
            self._remove_dir()
