"""The metric of unique jobs: enqueues refused as duplicates, by job type.

Owns: :class:`DuplicatesCollector` (``queuey_enqueue_duplicates_total``), read from a
producer's counts when scraped. Registered by the processes queuey runs that enqueue
(the scheduler, beside a worker or on its own); an application registers one for its
own producer. Must never: label a series with a job type the producer did not enqueue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector


class DuplicatesCollector(Collector):
    """``queuey_enqueue_duplicates_total{job_type}`` from ``counts`` (a producer's
    :meth:`~queuey_core.producer.Producer.duplicates`)."""

    def __init__(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        """One series per job type refused at least once."""
        family = CounterMetricFamily(
            "queuey_enqueue_duplicates",
            "Enqueues refused as duplicates: another job held their unique key.",
            labels=["job_type"],
        )
        for job_type, count in sorted(self._counts().items()):
            family.add_metric([job_type], count)
        yield family
