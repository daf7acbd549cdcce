"""Traces through ``async def`` handlers: the attempt's span is current inside the
coroutine, on the worker's event loop, as it is on a job thread."""

from __future__ import annotations

import asyncio
import threading

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from queuey_core import JobContext
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core import Retryable
from queuey_core import Worker
from queuey_core import handler
from tests.support import ALPHA
from tests.support import Greet
from tests.support import start
from tests.support import wait_for


def test_an_async_handlers_spans_nest_under_each_attempt_through_a_retry(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("the app")
    threads: list[str] = []

    @handler
    async def greet(job: Greet, ctx: JobContext) -> None:
        with tracer.start_as_current_span("the coroutine's own work"):
            threads.append(threading.current_thread().name)
            await asyncio.sleep(0)  # the context survives a suspension
            if ctx.attempt == 1:
                raise Retryable("flaky failure")

    producer = Producer(backend, queues, clock=clock, tracer_provider=provider)
    worker = Worker(backend, queues, [greet], clock=clock, tracer_provider=provider)
    with tracer.start_as_current_span("POST /orders"):
        producer.enqueue(Greet(name="ada"))
    running = start(worker, clock)
    wait_for(lambda: len(backend.acked(ALPHA)) == 2, clock)
    running.stop()
    provider.shutdown()

    spans = exporter.get_finished_spans()
    (request,) = [s for s in spans if s.name == "POST /orders"]
    attempts = sorted(
        (s for s in spans if s.name == f"process {ALPHA}"),
        key=lambda s: str((s.attributes or {}).get("queuey.job.attempt")),  # 1, 2
    )
    own = [s for s in spans if s.name == "the coroutine's own work"]
    assert threads == ["queuey-asyncio", "queuey-asyncio"], "both ran on the worker's loop"
    assert [(s.attributes or {}).get("queuey.job.outcome") for s in attempts] == [
        "retried",
        "succeeded",
    ]
    assert {s.context.trace_id for s in [*attempts, *own]} == {request.context.trace_id}
    parents = {s.parent.span_id for s in own if s.parent is not None}
    assert parents == {s.context.span_id for s in attempts}, (
        "each attempt's coroutine span is a child of that attempt's span"
    )
