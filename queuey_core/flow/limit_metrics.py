"""The metrics of rate and concurrency limits, read from a worker's gate when scraped.

``queuey_limit_jobs_total{limit, event}``: jobs of a limit admitted, deferred
(``waited``: booked under a rate, or a copy of a job still running until that run ends),
parked behind a full concurrency limit,
and parked jobs let go; ``queuey_limit_store_errors_total``: calls to the limits' store
that failed (the jobs they concerned waited: fail closed). Every declared limit has its
four series from the start, at 0, so that a rate over them is defined.

Owns: those names and labels (listed in ``docs/metrics-and-health.md``). Must never:
read the limits' store at a scrape (a scrape must not wait on a database), or label a
series with anything but a declared limit's name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, Metric

if TYPE_CHECKING:
    from queuey_core.flow.limit_gate import LimitGate


class LimitFamilies:
    """The limit families of one scrape: empty, then filled from a gate by :meth:`add`."""

    def __init__(self) -> None:
        self.jobs = CounterMetricFamily(
            "queuey_limit_jobs",
            "Jobs of each limit by event: admitted, waited (deferred until their rate "
            "allows, or a copy of a running job until that run ends), parked (behind a "
            "full concurrency limit), let_go (parked, then published again when a slot "
            "freed).",
            labels=["limit", "event"],
        )
        self.store_errors = CounterMetricFamily(
            "queuey_limit_store_errors",
            "Calls to the limits' store that failed; the jobs they concerned waited.",
        )

    def add(self, gate: LimitGate) -> None:
        """The counts of ``gate``, one series per declared limit and event."""
        # Imported here: a worker without limits never loads the gate's module.
        from queuey_core.flow.limit_gate import EVENTS  # noqa: PLC0415

        counts = gate.counted()
        for spec in gate.book.specs:
            per = counts.by_limit.get(spec.name, {})
            for event in EVENTS:
                self.jobs.add_metric([spec.name, event], per.get(event, 0))
        self.store_errors.add_metric([], counts.store_errors)

    def all(self) -> list[Metric]:
        """Every family, in the order a scrape shows them."""
        return [self.jobs, self.store_errors]
