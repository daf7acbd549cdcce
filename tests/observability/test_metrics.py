"""Metrics and health of a worker, in memory on the manual clock, and over HTTP.

The counts are checked against what the handlers did; the HTTP endpoints are served on
127.0.0.1 at a port the system picks. A real RabbitMQ run is in
``tests/integration/test_observability.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass

import prometheus_client
import pytest

from queuey_core import BackendError
from queuey_core import ConfigError
from queuey_core import Delivery
from queuey_core import Envelope
from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core.observability import MetricsServer
from queuey_core.observability import WorkerMetrics
from queuey_core.observability import WorkerState
from tests.harness import PassingDelivery
from tests.harness import Wrapping
from tests.support import ALPHA
from tests.support import GAMMA
from tests.support import Greet
from tests.support import Nudge
from tests.support import Orphan
from tests.support import act_out
from tests.support import start
from tests.support import two_slot_worker
from tests.support import wait_for


def value(metrics: WorkerMetrics, name: str, **labels: str) -> float:
    """A sample's value; 0 when the series does not exist."""
    found = metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def jobs(metrics: WorkerMetrics, job_type: str, outcome: str) -> float:
    return value(metrics, "queuey_jobs_total", job_type=job_type, outcome=outcome)


def get(url: str) -> tuple[int, str, str]:
    """(status, content type, body) of a GET, 503s included."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


@pytest.fixture
def server_of() -> Iterator[Callable[[WorkerMetrics], MetricsServer]]:
    servers: list[MetricsServer] = []

    def make(metrics: WorkerMetrics) -> MetricsServer:
        # These tests read the page across changes made milliseconds apart: no cache age
        # (the cache has tests of its own, in tests/observability/test_metrics_server.py).
        server = MetricsServer(metrics, port=0, host="127.0.0.1", max_age=0).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def test_jobs_are_counted_by_type_and_outcome_with_their_timings(
    backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock
) -> None:
    def greet(job: Greet, ctx: JobContext) -> None:
        clock.sleep(2)
        act_out(job.name, ctx)
        while job.name == "slow" and ctx.attempt == 1:
            clock.sleep(1)  # until the job timeout interrupts it

    metrics = WorkerMetrics()
    worker = Worker(
        backend,
        queues,
        [Handler(Greet, greet), Handler(Nudge, lambda job, ctx: None)],
        job_timeout=10,
        clock=clock,
        hooks=[metrics],
    )
    names = ["ok", "ok", "ok", "flaky", "flaky", "doomed", "snooze", "slow"]
    for name in names:
        producer.enqueue(Greet(name=name))
    producer.enqueue(Orphan(id=1))
    bad = Envelope.for_job(Greet(name="x"), enqueued_at=clock.wall_ms())
    backend.publish(bad.model_copy(update={"payload": {"not_a_name": 1}}))

    running = start(worker, clock)
    wait_for(lambda: jobs(metrics, Greet.NAME, "succeeded") == 7, clock)
    running.stop()

    expected = {"succeeded": 7, "retried": 3, "deferred": 1, "dead_lettered": 2}
    for outcome, count in expected.items():
        assert jobs(metrics, Greet.NAME, outcome) == count, outcome
    assert jobs(metrics, "unknown", "dead_lettered") == 1, "the orphan has no handler here"
    assert jobs(metrics, Nudge.NAME, "succeeded") == 0, "every known type starts at 0"
    assert value(metrics, "queuey_job_timeouts_total", job_type=Greet.NAME) == 1
    runs = 8 + 2 + 1 + 1  # every job once, then the flaky two, the snooze and the slow one
    assert value(metrics, "queuey_job_duration_seconds_count", job_type=Greet.NAME) == runs
    assert value(metrics, "queuey_job_duration_seconds_sum", job_type=Greet.NAME) >= 2 * runs
    assert (
        value(metrics, "queuey_job_duration_seconds_bucket", job_type=Greet.NAME, le="1.0") == 0
    ), "every run took 2s or more of the manual clock"
    assert value(metrics, "queuey_job_start_latency_seconds_count", job_type=Greet.NAME) == 8, (
        "only first attempts that were never deferred"
    )
    assert value(metrics, "queuey_jobs_running", job_type=Greet.NAME) == 0
    assert value(metrics, "queuey_jobs_running", job_type="unknown") == 0
    assert value(metrics, "queuey_worker_state", state="stopped") == 1
    assert value(metrics, "queuey_worker_state", state="consuming") == 0


def test_a_flood_of_made_up_job_types_stays_one_label(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    metrics = WorkerMetrics()
    worker = Worker(
        backend, queues, [Handler(Greet, lambda j, c: None)], clock=clock, hooks=[metrics]
    )
    for i in range(300):
        envelope = Envelope.for_job(Greet(name="x"), enqueued_at=clock.wall_ms())
        backend.publish(envelope.model_copy(update={"job_type": f"hostile.{i}"}))
    running = start(worker, clock)
    wait_for(lambda: jobs(metrics, "unknown", "dead_lettered") == 300, clock)
    running.stop()

    labels = {
        sample.labels["job_type"]
        for family in metrics.registry.collect()
        for sample in family.samples
        if "job_type" in sample.labels
    }
    assert labels == {Greet.NAME, "unknown"}, f"unbounded labels: {sorted(labels)[:5]}..."


def test_busy_threads_in_flight_stuck_threads_and_settle_failures_are_gauged(
    queues: QueueSet, clock: ManualClock
) -> None:
    class FailingAcks(Wrapping):
        def wrap(self, delivery: Delivery) -> Delivery:
            return _FailingAck(delivery)

    inner = MemoryBackend(clock=clock)
    backend = FailingAcks(inner)
    producer = Producer(inner, queues, clock=clock)
    release = threading.Event()

    def greet(job: Greet, ctx: JobContext) -> None:
        if job.name == "stuck":
            release.wait()  # inside C: the job timeout cannot interrupt it

    metrics = WorkerMetrics()
    worker = two_slot_worker(backend, queues, clock, greet, timeout_grace=1, hooks=[metrics])
    running = start(worker, clock)
    producer.enqueue(Greet(name="stuck"))
    wait_for(lambda: value(metrics, "queuey_worker_stuck_job_threads") == 1, clock)
    assert value(metrics, "queuey_worker_concurrency") == 2
    assert value(metrics, "queuey_worker_concurrency_in_use") == 1, "the stuck thread's slot"
    assert value(metrics, "queuey_worker_deliveries_in_flight") == 1
    assert value(metrics, "queuey_jobs_running", job_type=Greet.NAME) == 0, (
        "its job was settled as timed out"
    )

    producer.enqueue(Greet(name="fine"))
    wait_for(lambda: value(metrics, "queuey_worker_settle_failures_total") == 1, clock)
    assert jobs(metrics, Greet.NAME, "succeeded") >= 1, "the job succeeded; its ack failed"
    release.set()
    wait_for(lambda: value(metrics, "queuey_worker_stuck_job_threads") == 0, clock)
    running.stop()


class _FailingAck(PassingDelivery):
    """A delivery whose ack the broker refuses."""

    def ack(self) -> None:
        raise BackendError("the channel is gone")


def test_each_worker_has_a_registry_of_its_own(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    first, second = WorkerMetrics(), WorkerMetrics()
    for metrics in (first, second):
        Worker(backend, queues, [Handler(Greet, lambda j, c: None)], clock=clock, hooks=[metrics])
    assert first.registry is not second.registry
    assert prometheus_client.REGISTRY.get_sample_value("queuey_jobs_total") is None
    assert value(first, "process_cpu_seconds_total") > 0, "the process's own metrics too"
    assert value(first, "python_info", **_python_info(first)) == 1


def _python_info(metrics: WorkerMetrics) -> dict[str, str]:
    for family in metrics.registry.collect():
        if family.name == "python_info":
            return dict(family.samples[0].labels)
    raise AssertionError("no python_info")


def test_the_endpoints_follow_the_worker_from_start_to_stop(
    backend: MemoryBackend,
    producer: Producer,
    queues: QueueSet,
    clock: ManualClock,
    server_of: Callable[[WorkerMetrics], MetricsServer],
) -> None:
    release = threading.Event()
    started = threading.Event()

    def greet(job: Greet, ctx: JobContext) -> None:
        started.set()
        release.wait()

    metrics = WorkerMetrics()
    worker = Worker(
        backend, queues, [Handler(Greet, greet)], consume=[ALPHA], clock=clock, hooks=[metrics]
    )
    server = server_of(metrics)
    base = f"http://127.0.0.1:{server.port}"

    status, _, body = get(f"{base}/healthz")
    assert status == 200, body
    status, _, body = get(f"{base}/readyz")
    assert (status, json.loads(body)["reason"]) == (503, "the worker is starting")

    running = start(worker, clock)
    wait_for(lambda: metrics.status.state is WorkerState.CONSUMING, clock)
    status, content_type, body = get(f"{base}/readyz")
    assert status == 200, body
    assert content_type.startswith("application/json")
    ready = json.loads(body)
    assert ready["ok"] is True
    assert ready["worker"] == "consuming"
    assert ready["concurrency"] == 4
    assert ready["stuck_job_threads"] == 0

    producer.enqueue(Greet(name="long"))
    started.wait(10)
    running.handle.shutdown()
    wait_for(lambda: metrics.status.state is WorkerState.DRAINING, clock)
    status, _, body = get(f"{base}/readyz")
    assert (status, json.loads(body)["reason"]) == (503, "the worker is draining")
    status, _, body = get(f"{base}/healthz")
    assert status == 200, "draining is healthy"
    status, content_type, body = get(f"{base}/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    assert f'queuey_jobs_running{{job_type="{Greet.NAME}"}} 1.0' in body
    assert 'queuey_worker_state{state="draining"} 1.0' in body

    release.set()
    running.join()
    status, _, body = get(f"{base}/healthz")
    assert (status, json.loads(body)["reason"]) == (503, "the worker has stopped")
    status, _, body = get(f"{base}/readyz")
    assert status == 503
    assert (
        f'queuey_jobs_total{{job_type="{Greet.NAME}",outcome="succeeded"}} 1.0'
        in (get(f"{base}/metrics")[2])
    )
    assert get(f"{base}/nowhere")[0] == 404


@dataclass
class Link:
    state: str = "open"
    reconnects: int = 0
    thread_alive: bool = True
    unanswered: tuple[str, ...] = ()


class Reporting(MemoryBackend):
    """A memory backend that reports connections, as the test sets them."""

    def __init__(self, links: dict[str, Link]) -> None:
        super().__init__()
        self.links = links

    def connection_status(self) -> dict[str, Link]:
        return dict(self.links)


def test_connections_decide_readiness_and_health(
    queues: QueueSet, server_of: Callable[[WorkerMetrics], MetricsServer]
) -> None:
    backend = Reporting(links={"consumer": Link(), "publisher": Link(reconnects=2)})
    clock = ManualClock()
    metrics = WorkerMetrics()
    worker = Worker(
        backend,
        queues,
        [Handler(Nudge, lambda j, c: None)],
        consume=[GAMMA],
        clock=clock,
        hooks=[metrics],
    )
    base = f"http://127.0.0.1:{server_of(metrics).port}"
    running = start(worker, clock)
    wait_for(lambda: metrics.status.state is WorkerState.CONSUMING, clock)

    assert get(f"{base}/readyz")[0] == 200
    assert value(metrics, "queuey_broker_connection_up", connection="consumer") == 1
    assert value(metrics, "queuey_broker_reconnects_total", connection="publisher") == 2

    backend.links["consumer"].state = "reconnecting"
    status, _, body = get(f"{base}/readyz")
    assert (status, json.loads(body)["reason"]) == (503, "the consumer connection is reconnecting")
    status, _, body = get(f"{base}/healthz")
    assert status == 200, "recovering is healthy"
    assert json.loads(body)["connections"]["consumer"] == {
        "state": "reconnecting",
        "reconnects": 0,
        "thread_alive": True,
        "unanswered": [],
    }
    assert value(metrics, "queuey_broker_connection_up", connection="consumer") == 0

    backend.links["consumer"] = Link(state="open", reconnects=1, thread_alive=False)
    status, _, body = get(f"{base}/healthz")
    assert (status, json.loads(body)["reason"]) == (
        503,
        "the consumer connection's I/O thread has ended",
    )
    backend.links["consumer"] = Link(state="dead")
    status, _, body = get(f"{base}/healthz")
    assert (status, json.loads(body)["reason"]) == (
        503,
        "the consumer connection is dead: recovery gave up",
    )
    assert get(f"{base}/readyz")[0] == 503
    backend.links["consumer"] = Link()
    assert get(f"{base}/readyz")[0] == 200

    # Connected, but the broker never answers the consume (a quorum queue with no leader):
    # alive, since a restart would not help, and not ready, since no job comes.
    backend.links["consumer"] = Link(unanswered=("gamma",))
    status, _, body = get(f"{base}/readyz")
    assert (status, json.loads(body)["reason"]) == (
        503,
        "RabbitMQ is not delivering from gamma (consume unanswered)",
    )
    assert json.loads(body)["connections"]["consumer"]["unanswered"] == ["gamma"]
    assert get(f"{base}/healthz")[0] == 200
    backend.links["consumer"] = Link()
    assert get(f"{base}/readyz")[0] == 200
    running.stop()


def test_a_port_in_use_is_a_config_error() -> None:
    with MetricsServer(WorkerMetrics(), port=0, host="127.0.0.1") as first:
        taken = MetricsServer(WorkerMetrics(), port=first.port, host="127.0.0.1")
        with pytest.raises(ConfigError, match=f"cannot serve metrics on 127.0.0.1:{first.port}"):
            taken.start()


def test_the_library_alone_does_not_import_prometheus_client() -> None:
    code = "import sys, queuey_core; sys.exit('prometheus_client' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
