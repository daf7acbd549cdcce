"""Where a traced job's extra cost goes: each part of it alone, in a loop.

    .venv/bin/python bench/tracing_parts.py [--n 20000]             # CPU us per job
    .venv/bin/python bench/tracing_parts.py --callgrind [--n 5000]  # instructions per job

The parts, each what one job of a traced worker pays for it (bench/tracing.py measures
them together, in a running worker):

- ``sdk-span``: the SDK alone: a CONSUMER span started under a remote parent and
  ended, no attribute, into a ``BatchSpanProcessor`` (default settings) whose exporter
  drops each batch; the floor no instrumentation can go under.
- ``sdk-span-7-attributes``: the same with the seven attributes queuey puts on a
  succeeded attempt's span, set as queuey sets them (six at the start, the outcome
  after).
- ``queuey-span``: what the traced worker does around a job, all of it: queuey's
  ``WorkerTracing`` (the parent context, the attributes, the span current while the
  job runs, the outcome) with the SDK under it, around a dispatch that only reports
  success.
- ``queuey-span-unsampled``: the same for a job its producer's sampler left out (the
  ``traceparent``'s flags 00): the SDK makes no recording span, exports nothing.
- ``delivery-context``: the RabbitMQ consumer's part: the ``traceparent`` header read,
  checked and put on the just-decoded envelope.
- ``log-fields``: ``trace_id`` and ``span_id`` put on one log record (the JSON log's
  filter) while a span is current.
- ``otlp-encode``: the OTLP exporter's encoding of finished spans of queuey's shape to
  protobuf, per span, in batches of 512 (its HTTP request, one per batch, left out).

``--callgrind`` runs each part under ``valgrind --tool=callgrind`` twice (``--n`` and
twice as many) and divides the difference of their instruction counts by ``--n``:
start-up cancels out, and the machine's load does not count. Never run as a test.
"""

from __future__ import annotations

import argparse
import logging
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

PARTS = [
    "sdk-span",
    "sdk-span-7-attributes",
    "queuey-span",
    "queuey-span-unsampled",
    "delivery-context",
    "log-fields",
    "otlp-encode",
]


def part(name: str) -> Callable[[int], None]:
    """A function that runs part ``name`` ``n`` times."""
    from opentelemetry import trace  # noqa: PLC0415 - the SDK is a bench extra
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.trace import SpanKind  # noqa: PLC0415

    from queuey_core.clock import SystemClock  # noqa: PLC0415
    from queuey_core.envelope import Envelope  # noqa: PLC0415
    from queuey_core.trace_context import TraceContext  # noqa: PLC0415
    from queuey_core.tracing import TraceLogFields, worker_tracing  # noqa: PLC0415
    from queuey_core.tracing.spans import context_of  # noqa: PLC0415

    class Drop(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    tracer = provider.get_tracer("queuey")
    header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    parent = context_of(TraceContext.parse(header))
    body = Envelope.decode(
        f'{{"v":1,"job_id":"{uuid.uuid4()}","job_type":"bench.noop","queue":"bench",'
        '"enqueued_at":1764633600000,"payload":{}}'.encode()
    ).encode()
    envelope = Envelope.decode(body).with_trace(TraceContext.parse(header))
    attributes = {
        "messaging.system": "queuey",
        "messaging.operation.name": "process",
        "messaging.destination.name": "bench",
        "queuey.job.type": "bench.noop",
        "messaging.message.id": str(envelope.job_id),
        "queuey.job.attempt": 1,
    }

    if name == "sdk-span":

        def run(n: int) -> None:
            for _ in range(n):
                tracer.start_span("process bench", context=parent, kind=SpanKind.CONSUMER).end()

    elif name == "sdk-span-7-attributes":

        def run(n: int) -> None:
            for _ in range(n):
                span = tracer.start_span(
                    "process bench",
                    context=parent,
                    kind=SpanKind.CONSUMER,
                    attributes=attributes.copy(),
                )
                span.set_attribute("queuey.job.outcome", "succeeded")
                span.end()

    elif name in ("queuey-span", "queuey-span-unsampled"):
        tracing = worker_tracing(provider)
        assert tracing is not None
        hooks = tracing.hook_runner([], SystemClock())
        traced = tracing.around(hooks.succeeded)
        flags = "00" if name == "queuey-span-unsampled" else "01"
        # Each job a trace of its own, as in a busy worker (no cache helps).
        deliveries = [
            _Delivery(envelope.with_trace(TraceContext.parse(_traceparent(flags))), "bench", False)
            for _ in range(4096)
        ]

        def run(n: int) -> None:
            for i in range(n):
                traced(deliveries[i & 4095])

    elif name == "delivery-context":
        headers = {"traceparent": header}
        fresh = Envelope.decode(body)  # (the decode is paid untraced too)

        def run(n: int) -> None:
            for _ in range(n):
                trace_context = TraceContext.from_headers(headers)
                if trace_context is not None:
                    fresh.carrying(trace_context)

    elif name == "log-fields":
        log_filter = TraceLogFields()
        record = logging.LogRecord("queuey", logging.INFO, __file__, 1, "job done", (), None)
        span = tracer.start_span("process bench", context=parent)

        def run(n: int) -> None:
            with trace.use_span(span):
                for _ in range(n):
                    log_filter.filter(record)

    elif name == "otlp-encode":
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import (  # noqa: PLC0415
            encode_spans,
        )

        batch = []
        for _ in range(512):
            span = tracer.start_span(
                "process bench", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
            )
            span.set_attribute("queuey.job.outcome", "succeeded")
            span.end()
            batch.append(span)

        def run(n: int) -> None:
            for _ in range(n // 512):
                encode_spans(batch).SerializePartialToString()

    else:
        raise SystemExit(f"no part {name!r}: {', '.join(PARTS)}")
    return run


def _traceparent(flags: str) -> str:
    return f"00-{random.getrandbits(128):032x}-{random.getrandbits(64):016x}-{flags}"


@dataclass
class _Delivery:
    envelope: object
    queue: str
    redelivered: bool


def cpu_us(name: str, n: int) -> float:
    """CPU microseconds per iteration of part ``name``, measured in this process."""
    run = part(name)
    run(min(n, 1000))  # warm: the first spans, the regular expressions, the caches
    started = time.process_time()
    run(n)
    return (time.process_time() - started) / n * 1e6


def instructions(name: str, n: int) -> int:
    """Instructions a fresh process running part ``name`` ``n`` times executes."""
    out = Path(tempfile.mkdtemp()) / "callgrind.out"
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--only",
            name,
            "--n",
            str(n),
        ],
        check=True,
        capture_output=True,
    )
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no instruction count in {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--only", choices=PARTS, help="(internal) run one part, quietly")
    args = parser.parse_args()
    if args.only:
        part(args.only)(args.n)
        return
    for name in PARTS:
        if args.callgrind:
            one, two = instructions(name, args.n), instructions(name, 2 * args.n)
            print(f"| {name} | {(two - one) / args.n:,.0f} instructions a job |", flush=True)
        else:
            print(f"| {name} | {cpu_us(name, args.n):.1f} us of CPU a job |", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent.parent))
    main()
