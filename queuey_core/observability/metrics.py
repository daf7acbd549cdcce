"""Prometheus metrics of one worker, built on its hooks, in a registry of its own.

Job counts and timings come from the job hooks as jobs run; gauges (concurrency, jobs in
flight, stuck threads, settle failures, connections) are read from the worker and its
backend when Prometheus scrapes. Every name and label is listed in
``docs/operations.md``.

Owns: the metric names, their labels and buckets. Must never: use the global registry
(tests and several workers in one process would clash), or label a series with a job type
that has no handler: those come from messages, and a hostile sender could create any
number of series; they all count under ``job_type="unknown"``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from queuey_core.backends.capabilities import KeepsDeadLettersInStore
from queuey_core.flow.limit_metrics import LimitFamilies
from queuey_core.observability.health import WorkerState, WorkerStatus
from queuey_core.worker.hooks import JobInfo, WorkerHooks
from queuey_core.worker.running import RunningWorker

#: The label value of every job type this worker has no handler for.
UNKNOWN = "unknown"

#: The outcomes ``queuey_jobs_total`` counts: exactly one per delivery.
OUTCOMES = ("succeeded", "retried", "deferred", "dead_lettered", "cancelled")

#: Handler run times: from 5 ms to the default job timeout (5 min) and beyond.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
#: Enqueue to start: a millisecond on an idle worker, hours behind a backlog.
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
    900,
    3600,
)


class WorkerMetrics(WorkerHooks):
    """The metrics of one worker: give it to ``Worker(..., hooks=[metrics])``.

    Serve them with :class:`~queuey_core.observability.MetricsServer` (``/metrics``,
    with ``/healthz`` and ``/readyz`` from :attr:`status`), or read :attr:`registry`.

    Args:
        registry: where the metrics go (default: a new registry of this worker's own).
        process_metrics: also collect the process's own metrics (CPU, memory, open
            files, garbage collection, Python version), as prometheus_client's global
            registry does.
    """

    def __init__(
        self, *, registry: CollectorRegistry | None = None, process_metrics: bool = True
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.status = WorkerStatus()
        self._known: frozenset[str] = frozenset()
        # The series of each label value, looked up once: labels() costs more than the
        # increment itself, several times a job.
        self._series: dict[str, _Series] = {}
        r = self.registry
        self._jobs = Counter(
            "queuey_jobs",
            "Deliveries by job type and outcome: succeeded, retried, deferred, dead_lettered, "
            "cancelled.",
            ["job_type", "outcome"],
            registry=r,
        )
        self._timeouts = Counter(
            "queuey_job_timeouts",
            "Jobs that outlived their timeout (each is also counted as retried or "
            "dead_lettered in queuey_jobs_total).",
            ["job_type"],
            registry=r,
        )
        self._duration = Histogram(
            "queuey_job_duration_seconds",
            "How long handlers ran, by job type (every run, whatever its outcome).",
            ["job_type"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self._latency = Histogram(
            "queuey_job_start_latency_seconds",
            "From enqueue (envelope.enqueued_at) to the handler's start, for first attempts "
            "that were never deferred (a retry or deferral waits on purpose).",
            ["job_type"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self._running = Gauge(
            "queuey_jobs_running", "Handlers running now, by job type.", ["job_type"], registry=r
        )
        r.register(_WorkerCollector(self.status))
        if process_metrics:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)

    def label(self, job_type: str) -> str:
        """The ``job_type`` label for ``job_type``: itself if it has a handler here."""
        return job_type if job_type in self._known else UNKNOWN

    def _of(self, job_type: str) -> _Series:
        label = self.label(job_type)
        series = self._series.get(label)
        if series is None:
            series = self._series.setdefault(label, _Series(self, label))
        return series

    # -- worker events -----------------------------------------------------------------

    def on_worker_starting(self, worker: RunningWorker) -> None:
        """See :class:`WorkerHooks`: learns the job types, and starts their series at 0."""
        self._known = worker.job_types
        for job_type in sorted(self._known | {UNKNOWN}):
            self._of(job_type)
        self.status.on_worker_starting(worker)

    def on_worker_consuming(self, worker: RunningWorker) -> None:
        """See :class:`WorkerHooks`."""
        self.status.on_worker_consuming(worker)

    def on_worker_draining(self, worker: RunningWorker) -> None:
        """See :class:`WorkerHooks`."""
        self.status.on_worker_draining(worker)

    def on_worker_stopped(self, worker: RunningWorker) -> None:
        """See :class:`WorkerHooks`."""
        self.status.on_worker_stopped(worker)

    # -- job events --------------------------------------------------------------------

    def on_job_started(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        series = self._of(job.job_type)
        series.running.inc()
        if series.latency is not None and job.attempt == 1 and job.deferrals == 0:
            series.latency.observe(job.age)

    def on_job_succeeded(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._ended(job, "succeeded")

    def on_job_failed(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._ended(job, "retried")

    def on_job_deferred(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._ended(job, "deferred")

    def on_job_dead_lettered(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._ended(job, "dead_lettered")

    def on_job_timed_out(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._of(job.job_type).timeouts.inc()

    def on_job_cancelled(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._ended(job, "cancelled")

    def _ended(self, job: JobInfo, outcome: str) -> None:
        series = self._of(job.job_type)
        series.jobs[outcome].inc()
        if job.duration is not None:  # it ran (and was counted running)
            series.running.dec()
            series.duration.observe(job.duration)


class _Series:
    """The children of every job metric for one ``job_type`` label value."""

    def __init__(self, metrics: WorkerMetrics, label: str) -> None:
        self.jobs = {outcome: metrics._jobs.labels(label, outcome) for outcome in OUTCOMES}
        self.timeouts = metrics._timeouts.labels(label)
        self.duration = metrics._duration.labels(label)
        self.running = metrics._running.labels(label)
        # A job without a handler never starts: "unknown" gets no latency series.
        self.latency = metrics._latency.labels(label) if label != UNKNOWN else None


class _WorkerCollector(Collector):
    """What is read from the worker and its backend at each scrape."""

    def __init__(self, status: WorkerStatus) -> None:
        self._status = status

    def describe(self) -> Iterator[Metric]:
        # The names, so the registry can refuse a clash without calling collect().
        return iter(_Families().all())

    def collect(self) -> Iterator[Metric]:
        f = _Families()
        current = self._status.state
        for state in WorkerState:
            f.state.add_metric([state.value], 1 if state is current else 0)
        worker = self._status.worker
        if worker is not None:
            handle = worker.handle
            held = handle.in_flight()
            f.concurrency.add_metric([], worker.concurrency)
            # A job thread takes a delivery only when it is free, so deliveries wait in
            # the worker only while every thread is busy: busy = min(held, threads).
            f.in_use.add_metric([], min(held, worker.concurrency))
            f.in_flight.add_metric([], held)
            f.stuck.add_metric([], handle.stuck_jobs())
            f.settle_failures.add_metric([], handle.settle_failures())
            backend = worker.backend
            if isinstance(backend, KeepsDeadLettersInStore) and backend.has_dead_letter_store():
                f.dead_letter_fallbacks.add_metric([], backend.dead_letter_fallbacks)
            if worker.limits is not None:
                f.limits.add(worker.limits)
        for role, link in sorted(self._status.connections().items()):
            f.connection_up.add_metric([role], 1 if link.state == "open" else 0)
            f.reconnects.add_metric([role], link.reconnects)
        return iter(f.all())


class _Families:
    """The families of one scrape, empty."""

    def __init__(self) -> None:
        self.state = GaugeMetricFamily(
            "queuey_worker_state",
            "1 for the state the worker is in: starting, consuming, draining or stopped.",
            labels=["state"],
        )
        self.concurrency = GaugeMetricFamily(
            "queuey_worker_concurrency", "Jobs the worker may run at once."
        )
        self.in_use = GaugeMetricFamily(
            "queuey_worker_concurrency_in_use",
            "Job threads busy with a delivery (running it, settling it, or stuck in it).",
        )
        self.in_flight = GaugeMetricFamily(
            "queuey_worker_deliveries_in_flight",
            "Deliveries pulled from the broker and not settled yet (busy or waiting).",
        )
        self.stuck = GaugeMetricFamily(
            "queuey_worker_stuck_job_threads",
            "Job threads still running although their job timed out and was settled.",
        )
        self.settle_failures = CounterMetricFamily(
            "queuey_worker_settle_failures",
            "Acks, retries, deferrals and dead letters the broker did not take (each such "
            "message is redelivered).",
        )
        self.connection_up = GaugeMetricFamily(
            "queuey_broker_connection_up",
            "1 while the connection is open; 0 while connecting, reconnecting, dead or closed.",
            labels=["connection"],
        )
        self.reconnects = CounterMetricFamily(
            "queuey_broker_reconnects",
            "Connections regained after a loss.",
            labels=["connection"],
        )

        self.dead_letter_fallbacks = CounterMetricFamily(
            "queuey_dead_letter_store_fallbacks",
            "Dead letters sent to <queue>.dlq because the job store failed or was slow "
            "(imported by the next queuey dlq command; only with a job store on RabbitMQ).",
        )
        self.limits = LimitFamilies()

    def all(self) -> list[Metric]:
        return [
            self.state,
            self.concurrency,
            self.in_use,
            self.in_flight,
            self.stuck,
            self.settle_failures,
            self.connection_up,
            self.reconnects,
            self.dead_letter_fallbacks,
            *self.limits.all(),
        ]
