"""The job recorder's Prometheus metrics: what it wrote, and what it could not.

Imported only by a worker that serves metrics (prometheus-client loads with
``--metrics-port``, never for a plain worker).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector


class Counts(Protocol):
    """What the collector reads (a :class:`~queuey_core.results.JobRecorder`)."""

    @property
    def written(self) -> int: ...
    @property
    def unrecorded(self) -> int: ...


class RecorderCollector(Collector):
    """``queuey_results_recorded_total`` and ``queuey_results_unrecorded_total``."""

    def __init__(self, recorder: Counts) -> None:
        self._recorder = recorder

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "queuey_results_recorded",
            "Job events written to the job store.",
            value=self._recorder.written,
        )
        yield CounterMetricFamily(
            "queuey_results_unrecorded",
            "Job events lost on the way to the job store (a full queue, a store that "
            "refused or was down); their jobs were settled as usual.",
            value=self._recorder.unrecorded,
        )
