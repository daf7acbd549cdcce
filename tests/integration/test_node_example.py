"""examples/node: a Node producer written from docs/protocol.md, run by a queuey worker.

Installs the example from its committed lock file (``npm ci``) in a copy of the folder,
runs it against the test broker, and checks that a worker ran its three jobs: one now,
one at priority 5, one delayed through the ladder, each in the trace of the
``traceparent`` the Node producer sent. Without Node the test skips, except
under CI, where it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from queuey_core import Job
from queuey_core import JobContext
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core import handler
from queuey_core.backends.rabbitmq import RabbitMQBackend
from tests import harness
from tests.conftest import require_broker
from tests.integration.broker import delete_queues

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node"
QUEUE = f"node-example.{uuid.uuid4().hex[:8]}"
DELAY_MS = 1500
#: The span of the Node request that enqueues the jobs (W3C's example ids).
NODE_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class NodeGreet(Job):
    """The example's job, as the workers' code base defines it."""

    NAME: ClassVar[str] = "greet"
    QUEUE: ClassVar[str] = QUEUE
    name: str


def _tools() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        message = "node and npm are needed to run examples/node"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return node, npm


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """A copy of the example, installed from its lock file alone."""
    _, npm = _tools()
    copy = tmp_path / "node"
    copy.mkdir()
    for name in ("package.json", "package-lock.json", "enqueue.js"):
        shutil.copy(EXAMPLE / name, copy / name)
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"npm ci failed: {done.stderr[-2000:]}"
    return copy


@pytest.fixture
def broker() -> Iterator[RabbitMQBackend]:
    require_broker()
    backend = RabbitMQBackend(harness.AMQP_URL)
    yield backend
    backend.close()
    delete_queues(QUEUE)


def test_the_node_example_enqueues_three_jobs_a_worker_runs(
    installed: Path, broker: RabbitMQBackend
) -> None:
    node, _ = _tools()
    ran: dict[str, tuple[str, int, float]] = {}
    lock = threading.Lock()

    @handler
    def greet(job: NodeGreet, ctx: JobContext) -> None:
        with lock:
            ran[str(ctx.job_id)] = (job.name, ctx.priority, time.time())

    queues = QueueSet([QueueConfig(QUEUE, max_priority=10)])
    # Declared the way queuey does (the worker would too, but on its own thread): the
    # example then declares the same queue, which RabbitMQ accepts only if it matches.
    broker.declare(list(queues.values()))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    worker = Worker(broker, queues, [greet], tracer_provider=provider)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        started = time.time()
        done = subprocess.run(
            [node, "enqueue.js"],
            cwd=installed,
            env={
                **os.environ,
                "QUEUEY_AMQP_URL": harness.AMQP_URL,
                "QUEUEY_QUEUE": QUEUE,
                "QUEUEY_MAX_PRIORITY": "10",
                "QUEUEY_DELAY_MS": str(DELAY_MS),
                "QUEUEY_TRACEPARENT": NODE_TRACEPARENT,
                "QUEUEY_TRACESTATE": "node=1",
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        # Exit 0 also proves its queue arguments matched queuey's (no 406).
        assert done.returncode == 0, done.stderr
        now_id, urgent_id, later_id = done.stdout.split()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if len(ran) == 3:
                    break
            time.sleep(0.05)
    finally:
        worker.handle.shutdown()
        thread.join(30)
    assert set(ran) == {now_id, urgent_id, later_id}, ran
    assert ran[now_id][:2] == ("node", 0)
    assert ran[urgent_id][:2] == ("urgent node", 5)
    assert ran[later_id][0] == "later node"
    assert ran[later_id][2] - started >= DELAY_MS / 1000, "the delayed job waited its delay"
    # The Node producer's traceparent is continued: every job's span joins its trace, as
    # a child of the Node span that enqueued it, the delayed one after the ladder too.
    spans = [s for s in exporter.get_finished_spans() if s.name == f"process {QUEUE}"]
    by_job = {str((s.attributes or {}).get("messaging.message.id")): s for s in spans}
    assert set(by_job) == {now_id, urgent_id, later_id}
    for span in by_job.values():
        assert f"{span.context.trace_id:032x}" == NODE_TRACEPARENT[3:35]
        assert span.parent is not None
        assert span.parent.is_remote
        assert f"{span.parent.span_id:016x}" == NODE_TRACEPARENT[36:52]
        assert span.context.trace_state.get("node") == "1"
    provider.shutdown()
    assert broker.list_dead_letters(QUEUE) == [], "nothing was dead-lettered"
