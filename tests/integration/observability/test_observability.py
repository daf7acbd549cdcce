"""Metrics and health of a worker on a real RabbitMQ, read over HTTP as Prometheus would.

Everything stays in the test vhost (``QUEUEY_TEST_AMQP_URL``). The lost-connection test
closes only its own worker's consumer connection, found by the name it gives itself,
and keeps it from coming back with a connection limit on a user of its own: nobody else
sharing the broker is touched.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from queuey_core import Backoff
from queuey_core import BackoffKind
from queuey_core import Envelope
from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import RetryPolicy
from queuey_core import Worker
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.observability import MetricsServer
from queuey_core.observability import WorkerMetrics
from tests.conftest import require_broker
from tests.harness import AMQP_URL
from tests.harness import VHOST
from tests.integration.broker import HOSTPORT
from tests.integration.broker import clean_queues
from tests.integration.broker import delete_queues
from tests.integration.broker import list_json
from tests.integration.broker import rabbitmqctl
from tests.integration.broker import unique
from tests.support import Running
from tests.support import act_out
from tests.support import start
from tests.support import wait_for

pytestmark = pytest.mark.integration

QNAME = unique("it.metrics")


class Work(Job):
    NAME: ClassVar[str] = "it.metrics.work"
    QUEUE: ClassVar[str] = QNAME
    kind: str


@pytest.fixture
def queues() -> Iterator[QueueSet]:
    with clean_queues(QNAME):
        backoff = Backoff(BackoffKind.FIXED, initial=0.1, max=0.1)
        yield QueueSet([QueueConfig(QNAME, prefetch=10, retry=RetryPolicy(2, backoff))])


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(base: str) -> Samples:
    """Every sample of ``/metrics``, by name and labels."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def check(base: str, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"{base}{path}", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_scrape_during_a_real_run_counts_what_happened(queues: QueueSet) -> None:
    def handle(job: Work, ctx: JobContext) -> None:
        act_out(job.kind, ctx, defer=0.2)
        if job.kind == "slow" and ctx.attempt == 1:
            while not ctx.wait(0.01):  # the JobTimeout lands between two waits
                pass

    rabbit = RabbitMQBackend(AMQP_URL, heartbeat=10, publish_timeout=20)
    metrics = WorkerMetrics()
    worker = Worker(rabbit, queues, [Handler(Work, handle)], job_timeout=1, hooks=[metrics])
    producer = Producer(rabbit, queues)
    kinds = ["ok"] * 5 + ["flaky"] * 2 + ["doomed", "snooze", "slow"]
    with MetricsServer(metrics, port=0, host="127.0.0.1") as server:
        base = f"http://127.0.0.1:{server.port}"
        running = start(worker, None)
        try:
            for kind in kinds:
                producer.enqueue(Work(kind=kind))
            stranger = Envelope.for_job(Work(kind="x"), enqueued_at=int(time.time() * 1000))
            rabbit.publish(stranger.model_copy(update={"job_type": "it.metrics.nobody"}))

            def counted(outcome: str, job_type: str = Work.NAME) -> float:
                return sample(scrape(base), "queuey_jobs_total", job_type=job_type, outcome=outcome)

            wait_for(lambda: counted("succeeded") == 9, timeout=60)
            wait_for(lambda: counted("dead_lettered", "unknown") == 1, timeout=30)
            got = scrape(base)  # the worker still runs: this is a live scrape
        finally:
            running.stop()
            rabbit.close()

    def jobs(outcome: str, job_type: str = Work.NAME) -> float:
        return sample(got, "queuey_jobs_total", job_type=job_type, outcome=outcome)

    assert jobs("succeeded") == 9, "5 ok, 2 flaky on their retry, the snooze, the slow one"
    assert jobs("retried") == 3, "2 flaky and the timed-out slow one"
    assert jobs("deferred") == 1
    assert jobs("dead_lettered") == 1, "the doomed one"
    assert jobs("dead_lettered", "unknown") == 1, "the stranger's type has no handler"
    assert sample(got, "queuey_job_timeouts_total", job_type=Work.NAME) == 1
    runs = 5 + 2 * 2 + 1 + 2 + 2
    assert sample(got, "queuey_job_duration_seconds_count", job_type=Work.NAME) == runs
    assert sample(got, "queuey_job_start_latency_seconds_count", job_type=Work.NAME) == 10
    assert sample(got, "queuey_jobs_running", job_type=Work.NAME) == 0
    assert sample(got, "queuey_worker_state", state="consuming") == 1
    assert sample(got, "queuey_worker_concurrency") == 10
    assert sample(got, "queuey_worker_settle_failures_total") == 0
    assert sample(got, "queuey_worker_stuck_job_threads") == 0
    assert sample(got, "queuey_broker_connection_up", connection="consumer") == 1
    assert sample(got, "queuey_broker_reconnects_total", connection="consumer") == 0
    assert sample(got, "process_resident_memory_bytes") > 0
    labels = {dict(key[1]).get("job_type") for key in got} - {None}
    assert labels == {Work.NAME, "unknown"}


@pytest.fixture
def own_user() -> Iterator[str]:
    """An AMQP URL of the test vhost for a user of this test's own, deleted after."""
    require_broker()
    user = f"queuey-metrics-{secrets.token_hex(4)}"
    password = secrets.token_hex(16)
    rabbitmqctl("add_user", user, password)
    try:
        rabbitmqctl("set_permissions", "-p", VHOST, user, ".*", ".*", ".*")
        yield (
            urllib.parse.urlsplit(AMQP_URL)
            ._replace(netloc=f"{user}:{password}@{HOSTPORT}")
            .geturl()
        )
    finally:
        rabbitmqctl("delete_user", user)


def consumer_connection(user: str) -> tuple[str, str]:
    """(rabbit pid, connection_name) of the one consumer connection ``user`` holds."""
    rows = list_json("connections", "name", "user", "client_properties")
    found = []
    for row in rows:
        props = row.get("client_properties") or []
        names = [value for key, _type, value in props if key == "connection_name"]
        if row["user"] == user and names and names[0].startswith("queuey consumer "):
            found.append((row["name"], names[0]))
    assert len(found) == 1, f"expected one consumer connection of {user}, got {found}"
    peer, connection_name = found[0]
    # close_connection wants the pid as the text listing prints it (the JSON one differs).
    listing = rabbitmqctl("list_connections", "-q", "--no-table-headers", "pid", "name")
    pids = [line.split("\t")[0] for line in listing.splitlines() if line.endswith(f"\t{peer}")]
    assert len(pids) == 1, listing
    return pids[0], connection_name


def test_readiness_follows_consuming_a_lost_connection_and_draining(
    queues: QueueSet, own_user: str
) -> None:
    user = urllib.parse.urlsplit(own_user).username or ""
    release = threading.Event()
    started = threading.Event()

    def handle(job: Work, ctx: JobContext) -> None:
        started.set()
        release.wait(60)

    rabbit = RabbitMQBackend(own_user, heartbeat=10, publish_timeout=20)
    metrics = WorkerMetrics()
    worker = Worker(rabbit, queues, [Handler(Work, handle)], hooks=[metrics])
    # The page is read right after each change: no cache age (the cache is tested apart).
    server = MetricsServer(metrics, port=0, host="127.0.0.1", max_age=0).start()
    base = f"http://127.0.0.1:{server.port}"
    running: Running | None = None
    try:
        status, body = check(base, "/readyz")
        assert (status, body["reason"]) == (503, "the worker is starting")
        running = start(worker, None)
        wait_for(lambda: check(base, "/readyz")[0] == 200)

        pid, name = consumer_connection(user)
        assert name == f"queuey consumer host={socket.gethostname()} pid={os.getpid()} v=0.1.0"

        # Lose the consumer connection, and keep it from coming back for a while.
        rabbitmqctl("set_user_limits", user, '{"max-connections": 0}')
        try:
            rabbitmqctl("close_connection", pid, "queuey readiness test")
            wait_for(lambda: check(base, "/readyz")[0] == 503)
            status, body = check(base, "/readyz")
            assert body["reason"] == "the consumer connection is reconnecting", body
            assert check(base, "/healthz")[0] == 200, "recovering is not a reason to restart"
            got = scrape(base)
            assert sample(got, "queuey_broker_connection_up", connection="consumer") == 0
        finally:
            rabbitmqctl("clear_user_limits", user, "max-connections")
        wait_for(lambda: check(base, "/readyz")[0] == 200, timeout=30)
        got = scrape(base)
        assert sample(got, "queuey_broker_reconnects_total", connection="consumer") == 1
        assert sample(got, "queuey_broker_connection_up", connection="consumer") == 1

        # Draining: shutdown asked while a long job still runs.
        Producer(rabbit, queues).enqueue(Work(kind="long"))
        assert started.wait(30)
        running.handle.shutdown()
        wait_for(lambda: check(base, "/readyz")[1]["reason"] == "the worker is draining")
        assert check(base, "/readyz")[0] == 503
        status, body = check(base, "/healthz")
        assert status == 200, body
        assert body["stuck_job_threads"] == 0
        assert sample(scrape(base), "queuey_jobs_running", job_type=Work.NAME) == 1
        release.set()
        running.stop()
        running = None
        status, body = check(base, "/healthz")
        assert (status, body["reason"]) == (503, "the worker has stopped")
    finally:
        release.set()
        if running is not None:
            running.stop()
        server.close()
        rabbit.close()


def test_queuey_worker_serves_metrics_from_its_own_process(tmp_path: Path) -> None:
    require_broker()
    queue = "alpha"  # where the example handlers' jobs go
    delete_queues(queue, "beta")
    config = tmp_path / "queuey.toml"
    config.write_text(
        f'[broker]\nurl = "{AMQP_URL}"\nheartbeat = 10\n\n'
        f"[queues.{queue}]\nprefetch = 2\n[queues.beta]\nprefetch = 1\n"
    )
    env = {**os.environ, "QUEUEY_WORKER__METRICS_PORT": "0"}
    env.pop("QUEUEY_CONFIG", None)
    queuey = str(Path(sys.executable).parent / "queuey")
    args = ["--config", str(config), "--log-format", "json", "worker", "--queues", queue]
    proc = subprocess.Popen([queuey, *args], env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
    reader.start()

    def url() -> str | None:
        for line in list(lines):
            if line.startswith("{") and "metrics_url" in line:
                return str(json.loads(line)["metrics_url"])
        return None

    try:
        wait_for(lambda: url() is not None or proc.poll() is not None, timeout=30)
        found = url()
        assert found is not None, "".join(lines)
        base = found.replace("0.0.0.0", "127.0.0.1")
        wait_for(lambda: check(base, "/readyz")[0] == 200, timeout=30)
        enqueue = [queuey, "--config", str(config), "enqueue", "greet", '{"name": "ada"}']
        subprocess.run(enqueue, env=env, check=True, capture_output=True, timeout=60)

        def greeted() -> float:
            return sample(scrape(base), "queuey_jobs_total", job_type="greet", outcome="succeeded")

        wait_for(lambda: greeted() == 1, timeout=30)
        got = scrape(base)
        assert sample(got, "queuey_worker_concurrency") == 2
        assert sample(got, "queuey_worker_state", state="consuming") == 1
        assert sample(got, "queuey_broker_connection_up", connection="consumer") == 1
        # Every vhost's connections are listed, other checkouts' too: one still opening
        # shows its properties in another shape, so only [key, type, value] rows count.
        rows = list_json("connections", "client_properties")
        properties = [
            prop
            for row in rows
            for prop in row.get("client_properties") or []
            if isinstance(prop, list) and len(prop) == 3
        ]
        names = {
            value
            for key, _type, value in properties
            if key == "connection_name" and f"pid={proc.pid} " in str(value)
        }
        assert f"queuey consumer host={socket.gethostname()} pid={proc.pid} v=0.1.0" in names
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        reader.join(5)
        delete_queues(queue, "beta")
    assert code == 0, "".join(lines)
