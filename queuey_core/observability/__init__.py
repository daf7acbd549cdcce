"""Watching a worker: Prometheus metrics and health checks, built on its hooks.

* :mod:`.metrics`: :class:`WorkerMetrics`, the metrics of one worker in a registry of
  its own (a :class:`~queuey_core.WorkerHooks`);
* :mod:`.health`: :class:`WorkerStatus`, the worker's lifecycle and the liveness and
  readiness checks;
* :mod:`.schedules`: :class:`SchedulerMetrics`, schedule firings counted per schedule
  (in a worker's registry, or a scheduler's own with :class:`SchedulerStatus`);
* :mod:`.server`: :class:`MetricsServer`, ``/metrics``, ``/healthz`` and ``/readyz``
  over HTTP.

Not imported by ``queuey_core`` itself: only a program that wants metrics pays for
prometheus_client.

::

    metrics = WorkerMetrics()
    worker = Worker(backend, queues, handlers, hooks=[metrics])
    with MetricsServer(metrics, port=9191):
        worker.run()
"""

from __future__ import annotations

from queuey_core.observability.health import Check, WorkerState, WorkerStatus
from queuey_core.observability.metrics import WorkerMetrics
from queuey_core.observability.schedules import SchedulerMetrics, SchedulerStatus
from queuey_core.observability.server import MetricsServer

__all__ = [
    "Check",
    "MetricsServer",
    "SchedulerMetrics",
    "SchedulerStatus",
    "WorkerMetrics",
    "WorkerState",
    "WorkerStatus",
]
