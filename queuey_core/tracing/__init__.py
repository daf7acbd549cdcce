"""OpenTelemetry traces across the queue: a producer span on enqueue, a consumer span per
attempt, and the trace's ids on log records (``docs/tracing.md``).

Owns: deciding, once per :class:`~queuey_core.producer.Producer` or
:class:`~queuey_core.worker.Worker`, whether there is anything to trace to, and the log
filter. Tracing is optional twice over: ``opentelemetry-api`` comes with the ``otel``
extra only, and without a tracer provider (the API's own no-op or proxy provider) there
is nobody to send spans to. In either case :func:`producer_tracing` and
:func:`worker_tracing` answer None, and the producer and the worker take their untraced
paths: nothing is imported, nothing is done per job. OpenTelemetry is imported here only
inside functions, never by a process that has not imported it itself (see
:func:`_may_have_global_provider`), and :mod:`.spans` (which imports it at the top) only
once a real provider is known.

The provider is looked for when a Producer or Worker is made, not per job: set it (the
SDK's ``trace.set_tracer_provider``, or ``opentelemetry-instrument``) before, or pass one
(``tracer_provider=``).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer, TracerProvider

    from queuey_core.tracing.spans import ProducerTracing, WorkerTracing

#: The instrumentation scope of every span queuey makes.
SCOPE = "queuey"


def producer_tracing(provider: TracerProvider | None = None) -> ProducerTracing | None:
    """The producer's tracing with ``provider`` (default: the global one), or None when
    there is nothing to trace to."""
    tracer = _tracer(provider)
    if tracer is None:
        return None
    from queuey_core.tracing.spans import ProducerTracing  # noqa: PLC0415 (optional)

    return ProducerTracing(tracer)


def worker_tracing(provider: TracerProvider | None = None) -> WorkerTracing | None:
    """The worker's tracing with ``provider`` (default: the global one), or None when
    there is nothing to trace to."""
    tracer = _tracer(provider)
    if tracer is None:
        return None
    from queuey_core.tracing.spans import WorkerTracing  # noqa: PLC0415 (optional)

    return WorkerTracing(tracer)


def _tracer(provider: TracerProvider | None) -> Tracer | None:
    """queuey's tracer from ``provider`` or the global one; None for no-op providers."""
    if provider is None and not _may_have_global_provider():
        return None
    try:
        from opentelemetry import trace  # noqa: PLC0415 (the otel extra is optional)
    except ImportError:
        if provider is not None:
            raise
        return None
    if provider is None:
        provider = trace.get_tracer_provider()
    # The proxy stands in until an SDK is set; the no-op one (the SDK's when disabled
    # too) drops everything: either way a span would cost and show nothing.
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    tracer = provider.get_tracer(SCOPE, _version())
    if isinstance(tracer, (trace.NoOpTracer, trace.ProxyTracer)):
        return None
    return tracer


def _may_have_global_provider() -> bool:
    """Whether a global tracer provider may be set, known without importing OpenTelemetry.

    Setting one takes importing ``opentelemetry.trace`` first (the SDK's setup, or
    ``opentelemetry-instrument`` before the program starts), or names one in
    ``OTEL_PYTHON_TRACER_PROVIDER``: otherwise there is none, and importing the API just
    to ask would cost a process that does not trace 30 to 90 ms (measured).
    """
    return "opentelemetry.trace" in sys.modules or "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def _version() -> str | None:
    """queuey's installed version (the tracer's scope version), if it is installed."""
    from importlib import metadata  # noqa: PLC0415 (only when tracing)

    try:
        return metadata.version("queuey")
    except metadata.PackageNotFoundError:
        return None


class TraceLogFields(logging.Filter):
    """Adds ``trace_id`` and ``span_id`` (lowercase hex) to a record made while a span
    is current: a handler's log lines, and the worker's own about a job, name the trace
    that job belongs to.

    Install it on a log handler (``handler.addFilter(TraceLogFields())``; the command
    line does, for its JSON logs). It never imports OpenTelemetry: until something else
    has, no span can be current, and a record costs one dictionary look-up.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """See :class:`logging.Filter`; never drops a record."""
        api: Any = sys.modules.get("opentelemetry.trace")
        if api is None:
            return True
        try:
            context = api.get_current_span().get_span_context()
        except Exception:  # half-imported, or a broken SDK: the record matters more
            return True
        if context.is_valid:
            record.trace_id = f"{context.trace_id:032x}"
            record.span_id = f"{context.span_id:016x}"
        return True
