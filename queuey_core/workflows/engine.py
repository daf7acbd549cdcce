"""Starting, publishing, sweeping and cancelling workflows: :class:`Workflows`.

Owns: turning a :class:`~.shapes.Workflow` into member rows (each member an ordinary
job with a job id fixed at the start, its unique keys marked, and the workflow's id in
its envelope), publishing what a transaction put in the outbox (:mod:`.outbox`), the
sweep that re-publishes what a crash left unsent, and cancelling. Must never: publish inside a store
transaction, nor publish a member the store has not made ready first (the store
decides; this module only carries envelopes out).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from queuey_core.backends.base import Backend
from queuey_core.backends.capabilities import SupportsCancellation
from queuey_core.clock import Clock, SystemClock
from queuey_core.errors import BackendError
from queuey_core.first_attempts import make_envelope
from queuey_core.flow.unique import Unique
from queuey_core.flow.unique_claims import UniqueClaims
from queuey_core.flow.unique_keys import UniqueKeys
from queuey_core.queues import QueueSet
from queuey_core.results.store import DEFAULT_RETENTION
from queuey_core.uuid7 import uuid7
from queuey_core.workflows import tables
from queuey_core.workflows.outbox import Outbox
from queuey_core.workflows.shapes import Planned, Workflow
from queuey_core.workflows.sql import NewMember
from queuey_core.workflows.store import WorkflowStore

logger = logging.getLogger(__name__)

#: Seconds an outbox row waits before a sweep re-publishes it: longer than a publish
#: takes, so that a sweep seldom doubles one that is on its way.
SWEEP_AFTER = 5.0


@dataclass(frozen=True, slots=True)
class MemberView:
    """One member as ``queuey workflow show`` and the dashboard draw it."""

    job_id: str
    position: int
    role: str
    job_type: str
    state: str
    starts: int
    error: str
    result: Any
    after: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WorkflowView:
    """A workflow and its members, read in one transaction."""

    workflow_id: str
    name: str
    state: str
    on_failure: str
    members: int
    succeeded: int
    failed: int
    error: str
    created_at: int
    started_at: int | None
    updated_at: int
    nodes: tuple[MemberView, ...]


class Workflows:
    """Starts and cancels workflows on ``backend``, their state in ``store``.

    :meth:`start` is one transaction: when it returns, the workflow exists and its first
    members are in the outbox; they are published at once, and should that fail, by the
    sweep of any worker recording workflows (:data:`SWEEP_AFTER`). Finished workflows
    are deleted after ``retention`` seconds unchanged (:meth:`expire`; the job store's
    ``[results] retention`` when made from the settings).
    """

    def __init__(
        self,
        backend: Backend,
        queues: QueueSet,
        store: WorkflowStore,
        *,
        clock: Clock | None = None,
        declare: bool = True,
        unique_keys: UniqueKeys | None = None,
        unique: Mapping[str, Unique] | None = None,
        retention: float = DEFAULT_RETENTION,
    ) -> None:
        self._backend = backend
        self._queues = queues
        self.store = store
        self._clock: Clock = clock or SystemClock()
        # Members obey unique jobs as a producer's jobs do (the backend's own keys, else
        # ``unique_keys``): claimed as each is published.
        self._unique = UniqueClaims.of(backend, unique_keys, unique)
        self._outbox = Outbox(backend, store, self._unique, self._clock)
        self.retention = retention
        if declare:
            backend.declare(list(queues.values()))

    def start(self, workflow: Workflow) -> uuid.UUID:
        """Create ``workflow`` and publish its first members; its id.

        Raises:
            ValueError, TypeError, ConfigError: a workflow that cannot run (nothing is
                written).
            JobStoreError: the store could not be written (nothing is published).
        """
        plan = workflow.plan()
        now = self._clock.wall_ms()
        workflow_id = uuid7(now)
        ids = [uuid7(now) for _ in plan.members]
        rows = [
            self._member(p, ids[i], i, tables.MEMBER, workflow_id, now, [ids[d] for d in p.after])
            for i, p in enumerate(plan.members)
        ]
        if plan.on_error is not None:
            rows.append(
                self._member(
                    plan.on_error, uuid7(now), len(rows), tables.ON_ERROR, workflow_id, now, []
                )
            )
        ready = self.store.create(str(workflow_id), plan.name, plan.on_failure, rows, now)
        self.publish(ready)
        return workflow_id

    def _member(
        self,
        planned: Planned,
        job_id: uuid.UUID,
        position: int,
        role: str,
        workflow_id: uuid.UUID,
        now: int,
        after: list[uuid.UUID],
    ) -> NewMember:
        env = make_envelope(planned.job, self._queues, enqueued_at=now, job_id=job_id)
        env = self._unique.mark(env, type(planned.job), None)
        env = env.model_copy(update={"workflow": workflow_id})
        return NewMember(
            str(job_id),
            position,
            role,
            env.job_type,
            tuple(map(str, after)),
            planned.receives,
            planned.takes,
            env.model_dump_json(),
        )

    def publish(self, ready: Sequence[tuple[str, str]]) -> int:
        """Publish outbox rows and mark them sent; how many went out. A member no
        publish can send (a duplicate, an unroutable job) fails; one not sent now is left
        in the outbox for the sweep (:class:`~.outbox.Outbox`). Never raises: the store
        already holds the truth."""
        return self._outbox.publish(ready)

    @property
    def failed_at_publish(self) -> int:
        """Workflows this object failed by a member no publish could send (a duplicate,
        an unroutable job): counted with those a member's end failed."""
        return self._outbox.failed_workflows

    def sweep(self, older_than: float = SWEEP_AFTER) -> int:
        """Re-publish outbox rows older than ``older_than`` seconds; how many."""
        before = self._clock.wall_ms() - int(older_than * 1000)
        return self.publish(self.store.unsent(before))

    def expire(self, older_than: float | None = None) -> int:
        """Delete finished workflows (succeeded, failed, cancelled) unchanged for
        ``older_than`` seconds (default: :attr:`retention`), with their members; how many.
        In batches: a call deletes at most 5,000 (a worker's sweep calls it again)."""
        age = self.retention if older_than is None else older_than
        return self.store.expire(self._clock.wall_ms() - int(age * 1000))

    def cancel(self, workflow_id: uuid.UUID | str) -> int | None:
        """Cancel every member not started yet; how many were published already (and are
        cancelled on the broker too, where it records cancels). None: unknown workflow."""
        published = self.store.cancel(str(workflow_id), self._clock.wall_ms())
        if published is None:
            return None
        if published and isinstance(self._backend, SupportsCancellation):
            try:
                self._backend.cancel_jobs([uuid.UUID(j) for j in published])
            except BackendError as exc:
                logger.warning(
                    "workflow %s: cancels not recorded on the broker: %s", workflow_id, exc
                )
        return len(published)

    def get(self, workflow_id: uuid.UUID | str) -> WorkflowView | None:
        """The workflow and its members; None if unknown."""
        return read_workflow(self.store, workflow_id)


def read_workflow(store: WorkflowStore, workflow_id: uuid.UUID | str) -> WorkflowView | None:
    """The workflow ``workflow_id`` in ``store`` with its members; None if unknown."""
    found = store.read(str(workflow_id))
    if found is None:
        return None
    row, members = found
    nodes = tuple(
        MemberView(
            str(job_id),
            int(position),
            str(role),
            str(job_type),
            str(state),
            int(starts),
            str(error),
            None if result is None else _json(result),
            after,
        )
        for job_id, position, role, job_type, state, starts, error, result, after in members
    )
    wid, name, state, on_failure, count, succeeded, dead, error, created, began, updated = row
    return WorkflowView(
        str(wid),
        str(name),
        str(state),
        str(on_failure),
        int(count),
        int(succeeded),
        int(dead),
        str(error),
        int(created),
        None if began is None else int(began),
        int(updated),
        nodes,
    )


def _json(text: str) -> Any:
    import json  # noqa: PLC0415 - only readers of results need it

    return json.loads(text)
