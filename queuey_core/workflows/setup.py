"""The workflows of a process, from the settings: where ``queuey worker``, the commands
and the dashboard find them.

Owns: :func:`workflows_for` (a :class:`~.engine.Workflows` on the store the settings
name, or a ConfigError with the one line that says how to configure one) and
:func:`workflow_hook_for` (the worker's hook, or None when no store can hold workflows).
"""

from __future__ import annotations

from queuey_core.backends.base import Backend
from queuey_core.errors import ConfigError
from queuey_core.flow.unique_setup import producer_options
from queuey_core.results.setup import results_url
from queuey_core.settings import Settings
from queuey_core.workflows.engine import Workflows
from queuey_core.workflows.hook import WorkflowHook
from queuey_core.workflows.store import open_workflow_store

#: What to do when no store can hold workflows.
NO_WORKFLOW_STORE = (
    "workflows need a job store on SQLite or PostgreSQL: the embedded backend's own file, "
    "or [results] url (QUEUEY_RESULTS__URL)"
)


def workflow_url(settings: Settings) -> str | None:
    """The store that holds workflows under ``settings``; None if there is none."""
    url = results_url(settings)
    if url is None or not url.lower().startswith(("sqlite:", "postgres")):
        return None
    return url


def workflows_for(settings: Settings, backend: Backend, *, declare: bool = True) -> Workflows:
    """Workflows on ``backend`` with the store ``settings`` name (connected on first use).

    Raises:
        ConfigError: no store can hold workflows (:data:`NO_WORKFLOW_STORE`).
    """
    url = workflow_url(settings)
    if url is None:
        raise ConfigError(NO_WORKFLOW_STORE)
    # Members obey unique jobs as the producer's do: the same keys, the same declarations.
    unique = producer_options(backend, settings)
    store = open_workflow_store(url)
    return Workflows(
        backend,
        settings.queue_set(),
        store,
        declare=declare,
        retention=settings.results.retention,
        **unique,
    )


def workflow_hook_for(settings: Settings, backend: Backend) -> WorkflowHook | None:
    """The hook of a worker run with ``settings`` on ``backend``; None without a store
    that can hold workflows (members then end unreported: docs/workflows.md)."""
    if workflow_url(settings) is None:
        return None
    return WorkflowHook(workflows_for(settings, backend, declare=False))
