"""The HTTP endpoint of a worker (or a scheduler): ``/metrics``, ``/healthz`` and
``/readyz`` on one port.

Owns: the listening socket and the thread that serves it. ``/metrics`` is Prometheus's
text format (or OpenMetrics, gzip, when the scraper asks); ``/healthz`` and ``/readyz``
answer 200 or 503 with a JSON body saying what was checked (see
:mod:`queuey_core.observability.health`). Must never: share prometheus_client's global
registry, or let a slow scrape hold up the worker (each request runs on a thread of its
own and only reads).
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Protocol
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler

from queuey_core.errors import ConfigError
from queuey_core.observability.health import Check

logger = logging.getLogger(__name__)


class HealthChecks(Protocol):
    """What answers ``/healthz`` and ``/readyz``."""

    def liveness(self) -> Check:
        """Whether the process is worth keeping."""

    def readiness(self) -> Check:
        """Whether it does its work now."""


class Observed(Protocol):
    """What a server serves: :class:`~.WorkerMetrics` or :class:`~.SchedulerMetrics`."""

    @property
    def registry(self) -> CollectorRegistry:
        """The metrics ``/metrics`` shows."""

    @property
    def status(self) -> HealthChecks:
        """The health checks."""


def serve_http(
    host: str, port: int, handler: type[BaseHTTPRequestHandler]
) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Listen on ``host:port`` and serve ``handler`` on a daemon thread of its own.

    Raises:
        ConfigError: the port cannot be listened on (in use, or not allowed).
    """
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.25}, name="queuey-metrics"
    )
    thread.daemon = True
    thread.start()
    return server, thread


class MetricsServer:
    """Serves one worker's (or scheduler's) metrics and health over HTTP, on a thread of
    its own.

    Args:
        metrics: the worker's metrics (also the source of its health), or a scheduler's.
        port: the TCP port; 0 picks a free one (read it back from :attr:`port`).
        host: the address to listen on; the default, every interface, lets Prometheus
            and a container's health check reach it.
    """

    def __init__(self, metrics: Observed, *, port: int, host: str = "0.0.0.0") -> None:
        self._metrics = metrics
        self._host = host
        self._requested = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port it listens on (the one the system chose, if it was given 0)."""
        if self._server is None:
            return self._requested
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Where it listens, e.g. ``http://0.0.0.0:9191``."""
        return f"http://{self._host}:{self.port}"

    def start(self) -> MetricsServer:
        """Listen and serve in the background.

        Raises:
            ConfigError: the port cannot be listened on (in use, or not allowed).
        """
        self._server, self._thread = serve_http(
            self._host, self._requested, _handler(self._metrics)
        )
        logger.info(
            "serving /metrics, /healthz and /readyz on %s",
            self.url,
            extra={"metrics_url": self.url},
        )
        return self

    def close(self) -> None:
        """Stop listening; returns once the serving thread has ended."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _handler(metrics: Observed) -> type[MetricsHandler]:
    """A request handler bound to ``metrics``."""

    class Handler(MetricsHandler):
        registry = metrics.registry

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/metrics":
                super().do_GET()
            elif path == "/healthz":
                self._check(metrics.status.liveness())
            elif path == "/readyz":
                self._check(metrics.status.readiness())
            else:
                self._send(404, b"not found: /metrics, /healthz or /readyz\n", "text/plain")

        def _check(self, check: Check) -> None:
            self._send(200 if check.ok else 503, check.body(), "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", f"{content_type}; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

    return Handler
