"""Jobs, handlers and a worker rig shared by the workflow tests (unit and contract)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from typing import ClassVar

from pydantic import Field

from queuey_core import Fatal
from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import Worker
from queuey_core.backends.capabilities import HoldsUniqueKeys
from queuey_core.errors import JobStoreError
from queuey_core.flow.unique import Unique
from queuey_core.flow.unique_keys import SqlUniqueKeys
from queuey_core.flow.unique_keys import UniqueKeys
from queuey_core.flow.unique_store import open_unique_keys
from queuey_core.workflows import WorkflowHook
from queuey_core.workflows import Workflows
from queuey_core.workflows import WorkflowStore
from queuey_core.workflows import WorkflowView
from queuey_core.workflows import open_workflow_store
from queuey_core.workflows import started_before
from tests.harness import WorkerEnv
from tests.support import ALPHA
from tests.support import BETA
from tests.support import Running
from tests.support import start


class Add(Job):
    """Returns ``x`` plus what the step before returned (``prev``)."""

    NAME: ClassVar[str] = "wf.add"
    QUEUE: ClassVar[str] = ALPHA
    x: int
    prev: int | None = None


class Total(Job):
    """A callback: returns the sum of ``parts`` (its dependencies' results)."""

    NAME: ClassVar[str] = "wf.total"
    QUEUE: ClassVar[str] = ALPHA
    parts: list[int] = Field(default_factory=list)


class Boom(Job):
    """Fails for good (Fatal): dead-lettered at once, unless ``heal`` is set in the rig."""

    NAME: ClassVar[str] = "wf.boom"
    QUEUE: ClassVar[str] = BETA
    x: int = 0


class Invoice(Job):
    """A unique job (its key: ``n``, held while it is queued)."""

    NAME: ClassVar[str] = "wf.invoice"
    QUEUE: ClassVar[str] = ALPHA
    UNIQUE: ClassVar[Unique] = Unique(key=("n",))
    n: int


class Mourn(Job):
    """An error callback: ``failure`` is what the workflow tells it of the failed member."""

    NAME: ClassVar[str] = "wf.mourn"
    QUEUE: ClassVar[str] = ALPHA
    failure: dict[str, Any] | None = None


@dataclass(frozen=True)
class Ran:
    """One run of a handler, as the ledger keeps it."""

    job_type: str
    job_id: uuid.UUID
    payload: dict[str, Any]
    started_before: bool


class Rig:
    """A worker with a :class:`WorkflowHook` on ``h``'s backend, workflows in ``url``,
    and a ledger of every handler run."""

    def __init__(self, h: WorkerEnv, url: str, *, retention: float = 7 * 86400.0) -> None:
        self.h = h
        self.store = open_workflow_store(url)
        # Unique keys where a user's would be: the backend's own, else the job store's.
        self.unique_keys: UniqueKeys | None = None
        if not isinstance(h.backend, HoldsUniqueKeys):
            self.unique_keys = open_unique_keys(url)
        self.flows = Workflows(
            h.backend,
            h.queues,
            self.store,
            clock=h.clock,
            unique_keys=self.unique_keys,
            retention=retention,
        )
        # A short hold: on RabbitMQ a held member's deferral takes real time.
        self.hook = WorkflowHook(self.flows, clock=h.clock, hold_for=0.3)
        self.ledger: list[Ran] = []
        self._lock = threading.Lock()
        self.heal = False
        #: What Boom raises until healed.
        self.boom_error: Exception = Fatal("boom")
        self.before_total: Callable[[], None] = lambda: None
        self.before_add: Callable[[], None] = lambda: None
        self._running: Running | None = None

    def _note(self, job: Job, ctx: JobContext) -> None:
        with self._lock:
            self.ledger.append(
                Ran(ctx.job_type, ctx.job_id, job.model_dump(mode="json"), started_before(ctx))
            )

    def handlers(self) -> list[Handler[Any]]:
        def add(job: Add, ctx: JobContext) -> int:
            self._note(job, ctx)
            self.before_add()
            return job.x + (job.prev or 0)

        def total(job: Total, ctx: JobContext) -> int:
            self._note(job, ctx)
            self.before_total()
            return sum(job.parts)

        def boom(job: Boom, ctx: JobContext) -> int:
            self._note(job, ctx)
            if not self.heal:
                raise self.boom_error
            return job.x

        def mourn(job: Mourn, ctx: JobContext) -> None:
            self._note(job, ctx)

        def invoice(job: Invoice, ctx: JobContext) -> int:
            self._note(job, ctx)
            return job.n

        return [
            Handler(Add, add),
            Handler(Total, total),
            Handler(Boom, boom),
            Handler(Mourn, mourn),
            Handler(Invoice, invoice),
        ]

    def start(self) -> Rig:
        worker = Worker(
            self.h.backend,
            self.h.queues,
            self.handlers(),
            clock=self.h.clock,
            hooks=[self.hook],
            unique_keys=self.unique_keys,
        )
        self._running = start(worker, self.h)
        return self

    def stop(self) -> None:
        if self._running is not None:
            self._running.stop()
            self._running = None
        self.store.close()
        if isinstance(self.unique_keys, SqlUniqueKeys):
            self.unique_keys.close()

    def rows(self, workflow_id: uuid.UUID) -> tuple[int, int, int]:
        """How many rows of ``workflow_id`` the store holds: its own, its members', and
        its edges'."""
        queries = (
            "SELECT count(*) FROM {w} WHERE workflow_id = ?",
            "SELECT count(*) FROM {m} WHERE workflow_id = ?",
            "SELECT count(*) FROM {e} WHERE child IN "
            "(SELECT job_id FROM {m} WHERE workflow_id = ?)",
        )
        counts = []
        with self.store.transaction() as cur:
            for query in queries:
                cur.execute(self.store.sql(query), [str(workflow_id)])
                counts.append(int(cur.fetchone()[0]))
        return counts[0], counts[1], counts[2]

    def view(self, workflow_id: uuid.UUID) -> WorkflowView:
        found = self.flows.get(workflow_id)
        assert found is not None, f"workflow {workflow_id} is in the store"
        return found

    def wait_state(self, workflow_id: uuid.UUID, state: str) -> WorkflowView:
        """The workflow once it is in ``state`` (time passing meanwhile)."""
        self.h.wait_for(lambda: self.view(workflow_id).state == state)
        return self.view(workflow_id)

    def store_down(self, *methods: str) -> StoreDown:
        """Make the store's ``methods`` (``started``, ``ended``) fail as a store out of
        reach does, until the returned switch's :meth:`StoreDown.back`."""
        return StoreDown(self.store, methods)

    def producer(self) -> Producer:
        """A producer on the rig's backend, with its unique keys."""
        return Producer(
            self.h.backend, self.h.queues, clock=self.h.clock, unique_keys=self.unique_keys
        )

    def runs(self, job_type: str) -> list[Ran]:
        with self._lock:
            return [r for r in self.ledger if r.job_type == job_type]


class StoreDown:
    """Some of a workflow store's methods raising JobStoreError, as a store out of reach
    makes them, and the job ids each refused; :meth:`back` brings the store back."""

    def __init__(self, store: WorkflowStore, methods: tuple[str, ...]) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._down = True
        self.refused: list[str] = []
        for name in methods:
            setattr(store, name, self._failing(getattr(store, name)))

    def _failing(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(job_id: str, *args: Any, **kwargs: Any) -> Any:
            with self._lock:
                if self._down:
                    self.refused.append(job_id)
                    raise JobStoreError("workflow store: database is locked")
            return real(job_id, *args, **kwargs)

        return call

    def back(self) -> None:
        with self._lock:
            self._down = False
