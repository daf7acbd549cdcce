"""The workflow hook's Prometheus metrics: workflows started, finished and failed.

Imported only by a worker that serves metrics (prometheus-client loads with
``--metrics-port``, never for a plain worker).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector


class Counts(Protocol):
    """What the collector reads (a :class:`~queuey_core.workflows.WorkflowHook`)."""

    started: int
    finished: int
    held: int

    @property
    def failed(self) -> int:
        """Workflows failed on this worker."""


class WorkflowCollector(Collector):
    """``queuey_workflows_{started,finished,failed,held}_total``."""

    def __init__(self, hook: Counts) -> None:
        self._hook = hook

    def collect(self) -> Iterator[Metric]:
        hook = self._hook
        yield CounterMetricFamily(
            "queuey_workflows_started",
            "Workflows whose first member started on this worker.",
            value=hook.started,
        )
        yield CounterMetricFamily(
            "queuey_workflows_finished",
            "Workflows whose last member succeeded on this worker.",
            value=hook.finished,
        )
        yield CounterMetricFamily(
            "queuey_workflows_failed",
            "Workflows failed on this worker: a member dead-lettered or cancelled, or "
            "refused for good at its publish (a duplicate, an unroutable job).",
            value=hook.failed,
        )
        yield CounterMetricFamily(
            "queuey_workflows_held",
            "Workflow member starts and ends the store could not record: each member "
            "was deferred, to be recorded when it comes back.",
            value=hook.held,
        )
