"""The jobs the benchmark's ``queuey worker`` runs, and their handlers.

Registered for the benchmark's worker processes only: bench/procs.py writes a
``dist-info`` naming this module under the ``queuey.handlers`` entry point into a
temporary folder on that process's PYTHONPATH, so no environment ever installs it.
A handler reports to the harness by writing a line to the file descriptor in
``QUEUEY_BENCH_FD`` (a pipe the harness reads): ``first`` for a job marked first, the
enqueue-to-start wait in microseconds for a stamped job. ``QUEUEY_BENCH_TRACING`` traces
the process (:func:`trace_to`); ``QUEUEY_BENCH_GC=1`` prints the garbage collector's
collections and CPU, by generation, to the worker's log as it exits.
"""

from __future__ import annotations

import os
import time
from typing import ClassVar

from queuey_core import Job, JobContext, handler

_FD = int(os.environ.get("QUEUEY_BENCH_FD", "-1"))


def trace_to(where: str) -> None:
    """Set the global tracer provider of a traced bench process, before its worker is
    made (``QUEUEY_BENCH_TRACING`` does so as this module loads).

    ``otlp``: what a user runs in production, the SDK's ``BatchSpanProcessor`` with its
    default settings around the OTLP/HTTP (protobuf) exporter, sending to
    ``QUEUEY_BENCH_OTLP`` (bench/tracing.py's sink, another process: a collector's
    work is not the worker's). ``drop``: the same processor, its exporter dropping
    every batch (what the SDK's batching costs without any serialising).
    """
    from collections.abc import Sequence  # noqa: PLC0415 - the SDK is a bench extra

    from opentelemetry import trace  # noqa: PLC0415
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Drop(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    exporter: SpanExporter
    if where == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter,
        )

        exporter = OTLPSpanExporter(endpoint=os.environ["QUEUEY_BENCH_OTLP"])
    elif where == "drop":
        exporter = Drop()
    else:
        raise SystemExit(f"QUEUEY_BENCH_TRACING: otlp or drop, not {where!r}")
    provider = TracerProvider(resource=Resource.create({"service.name": "queuey-bench"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


if os.environ.get("QUEUEY_BENCH_TRACING"):
    trace_to(os.environ["QUEUEY_BENCH_TRACING"])


def report(line: str) -> None:
    """One line to the harness (one write below PIPE_BUF: atomic between threads)."""
    if _FD >= 0:
        os.write(_FD, line.encode() + b"\n")


def spin(rounds: int) -> int:
    """A fixed amount of pure-Python work (holds the GIL throughout)."""
    total = 0
    for i in range(rounds):
        total = (total * 31 + i) % 1_000_003
    return total


class Noop(Job):
    NAME: ClassVar[str] = "bench.noop"
    QUEUE: ClassVar[str] = "bench"
    mark: bool = False


class Wait(Job):
    NAME: ClassVar[str] = "bench.wait"
    QUEUE: ClassVar[str] = "bench_io"
    seconds: float = 0.02
    mark: bool = False


class Stamped(Job):
    NAME: ClassVar[str] = "bench.stamped"
    QUEUE: ClassVar[str] = "bench"
    sent: float  # time.time() at enqueue


class Cpu(Job):
    NAME: ClassVar[str] = "bench.cpu"
    QUEUE: ClassVar[str] = "bench"
    rounds: int
    mark: bool = False


@handler
def noop(job: Noop, ctx: JobContext) -> None:
    """Nothing (tells the harness when it is the first job)."""
    if job.mark:
        report("first")


@handler
def wait(job: Wait, ctx: JobContext) -> None:
    """Wait without using the CPU, as a handler waiting on I/O does."""
    if job.mark:
        report("first")
    ctx.wait(job.seconds)


@handler
def stamped(job: Stamped, ctx: JobContext) -> None:
    """Report how long the job waited between its enqueue and its start."""
    report(str(round((time.time() - job.sent) * 1e6)))


@handler
def cpu(job: Cpu, ctx: JobContext) -> None:
    """Pure-Python work: what more processes are for."""
    if job.mark:
        report("first")
    spin(job.rounds)


if os.environ.get("QUEUEY_BENCH_GC"):
    import atexit
    import gc
    import sys

    _gc: dict[int, list[float]] = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    _gc_started = [0.0]

    def _gc_note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            _gc_started[0] = time.process_time()
        else:
            entry = _gc[info["generation"]]
            entry[0] += 1
            entry[1] += time.process_time() - _gc_started[0]

    gc.callbacks.append(_gc_note)
    atexit.register(lambda: print(f"GC: {_gc} objects {len(gc.get_objects())}", file=sys.stderr))
