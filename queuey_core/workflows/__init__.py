"""Workflows: chains, groups, callbacks and graphs of jobs that survive crashes.

Build a shape (:func:`chain`, :func:`group`, ``.then(...)``, :class:`Graph`), wrap it in a
:class:`Workflow` and start it with :class:`Workflows`; a worker with a
:class:`WorkflowHook` reports each member's end and enqueues what it makes ready, once
(docs/workflows.md). The state lives in the embedded file or the job store
(:func:`open_workflow_store`).
"""

from __future__ import annotations

from queuey_core.workflows.engine import MemberView, Workflows, WorkflowView, read_workflow
from queuey_core.workflows.hook import WorkflowHook, started_before
from queuey_core.workflows.setup import workflow_hook_for, workflows_for
from queuey_core.workflows.shapes import (
    Chain,
    Graph,
    Group,
    Step,
    Workflow,
    chain,
    group,
    step,
)
from queuey_core.workflows.store import WorkflowStore, open_workflow_store

__all__ = [
    "Chain",
    "Graph",
    "Group",
    "MemberView",
    "Step",
    "Workflow",
    "WorkflowHook",
    "WorkflowStore",
    "WorkflowView",
    "Workflows",
    "chain",
    "group",
    "open_workflow_store",
    "read_workflow",
    "started_before",
    "step",
    "workflow_hook_for",
    "workflows_for",
]
