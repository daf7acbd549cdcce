"""Workflows in the kit: the library's :class:`~queuey_core.workflows.Workflows` and its
worker hook, with their store in the kit (its SQLite file, or a file of the kit's own
beside the in-memory backend), on the kit's clock.

A workflow started in a test is written and its first members published as
``Workflows.start`` does it; each member's end, reported by the worker's
:class:`~queuey_core.workflows.WorkflowHook` before its settle, publishes what it makes
ready, so :meth:`~queuey_core.testing.QueueyKit.drain` runs the members and callbacks in
the order their dependencies allow. One thing differs: the hook sweeps no outbox (in
one process, every member made ready is published before its maker's settle; a sweep
would only be a thread more).

Owns: the kit's workflow store and hook. Must never: move a workflow itself (the hook
and the store do).
"""

from __future__ import annotations

import uuid

from queuey_core.backends.base import Backend
from queuey_core.clock import Clock
from queuey_core.errors import KitError
from queuey_core.jobs import Job
from queuey_core.queues import QueueSet
from queuey_core.worker.running import RunningWorker
from queuey_core.workflows import (
    Graph,
    Workflow,
    WorkflowHook,
    Workflows,
    WorkflowView,
    open_workflow_store,
)
from queuey_core.workflows.shapes import Node

#: What :meth:`KitWorkflows.start` takes: a workflow, or a shape to make one of.
Startable = Workflow | Node | Graph | Job


class KitHook(WorkflowHook):
    """The worker's workflow hook without its outbox sweep (see the module docstring)."""

    def on_worker_consuming(self, worker: RunningWorker) -> None:
        """No sweep to schedule."""

    def on_worker_draining(self, worker: RunningWorker) -> None:
        """No sweep to cancel."""


class KitWorkflows:
    """The kit's workflows, kept in the SQLite file ``url`` names."""

    def __init__(self, backend: Backend, queues: QueueSet, url: str, *, clock: Clock) -> None:
        self.workflows = Workflows(
            backend, queues, open_workflow_store(url), clock=clock, declare=False
        )
        self.hook = KitHook(self.workflows, clock=clock)

    def start(self, workflow: Startable) -> uuid.UUID:
        """Start ``workflow`` (or a workflow of the shape given); its id."""
        if not isinstance(workflow, Workflow):
            workflow = Workflow(workflow)
        return self.workflows.start(workflow)

    def view(self, workflow_id: uuid.UUID | str) -> WorkflowView:
        """The workflow's state and each member's.

        Raises:
            KitError: no workflow has that id.
        """
        found = self.workflows.get(workflow_id)
        if found is None:
            raise KitError(f"no workflow {workflow_id} was started in this kit")
        return found

    def close(self) -> None:
        """Close the store."""
        self.workflows.store.close()
