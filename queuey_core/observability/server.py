"""The HTTP endpoint of a worker (or a scheduler): ``/metrics``, ``/healthz`` and
``/readyz`` on one port.

Owns: what each path answers, and the cache of the ``/metrics`` page. ``/metrics`` is
Prometheus's text format (or OpenMetrics, gzip, when the scraper asks), rendered at most
once per :data:`METRICS_MAX_AGE` (a burst of scrapes costs one render, and concurrent
scrapes share the render under way); ``/healthz`` and ``/readyz`` answer 200 or 503 with
a JSON body saying what was checked (see :mod:`queuey_core.observability.health`). The
server itself, and its limits on clients, are :mod:`.http_server`'s. Must never: share
prometheus_client's global registry, or let a client hold up the worker (requests run on
a small fixed pool, and only read).
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Protocol
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector

from queuey_core.observability.health import Check
from queuey_core.observability.http_messages import Limits, Request, Response, Route
from queuey_core.observability.http_server import HttpServer

logger = logging.getLogger(__name__)

#: Seconds a rendered ``/metrics`` page is served again: Prometheus scrapes every 15 s or
#: more, so a page up to a second old costs it nothing, and a burst of scrapes one render.
METRICS_MAX_AGE = 1.0
#: Distinct pages kept (format, gzip, ``name[]`` filter): a client varying its filter
#: must not grow the cache.
_MAX_PAGES = 8

#: A page's cache key: content type, gzipped, the ``name[]`` filter.
_Key = tuple[str, bool, tuple[str, ...]]


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


class MetricsPage:
    """The ``/metrics`` route of a registry, rendered at most once per ``max_age`` seconds.

    Thread-safe: concurrent requests for the same page wait for one render and share it.

    Args:
        registry: the metrics shown.
        max_age: seconds a rendered page is served again (0: render for every request,
            still shared by the requests that arrive while it renders).
        clock: monotonic seconds (tests).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        max_age: float = METRICS_MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._registry = registry
        self._max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._pages: dict[_Key, tuple[float, Response]] = {}
        self.renders = 0
        """Pages rendered so far."""

    def at_once(self, request: Request) -> Response | None:
        """The page if a fresh one is cached (on the server's loop thread), else None."""
        _, key = self._key(request)
        cached = self._pages.get(key)  # a dict read: no lock needed
        if cached is not None and self._clock() - cached[0] < self._max_age:
            return cached[1]
        return None

    def __call__(self, request: Request) -> Response:
        """The page ``request`` asks for (format by ``Accept``, gzip by
        ``Accept-Encoding``, families by ``name[]``)."""
        encoder, key = self._key(request)
        content_type, zipped, names = key
        asked = self._clock()
        with self._lock:  # one render at a time; those waiting get its result
            cached = self._pages.get(key)
            if cached is not None and (asked - cached[0] < self._max_age or cached[0] >= asked):
                return cached[1]
            registry = self._registry.restricted_registry(names) if names else self._registry
            body = encoder(registry)
            headers: tuple[tuple[str, str], ...] = ()
            if zipped:
                body = gzip.compress(body, compresslevel=6)
                headers = (("Content-Encoding", "gzip"),)
            response = Response(200, body, content_type, headers)
            self.renders += 1
            if len(self._pages) >= _MAX_PAGES:
                self._pages.clear()
            self._pages[key] = (self._clock(), response)
            return response

    def _key(self, request: Request) -> tuple[Callable[[Collector], bytes], _Key]:
        """The encoder and the cache key of the page ``request`` asks for."""
        encoder, content_type = choose_encoder(request.header("Accept"))
        zipped = gzip_accepted(request.header("Accept-Encoding"))
        names = (
            tuple(sorted(set(parse_qs(request.query).get("name[]", [])))) if request.query else ()
        )
        return encoder, (content_type, zipped, names)


class _Check:
    """A health route: cheap and non-blocking, so answered on the loop thread."""

    def __init__(self, check: Callable[[], Check]) -> None:
        self._check = check

    def __call__(self, request: Request) -> Response:
        check = self._check()
        return Response(200 if check.ok else 503, check.body(), "application/json; charset=utf-8")

    def at_once(self, request: Request) -> Response:
        return self(request)


def health_routes(checks: Callable[[], HealthChecks]) -> dict[str, Route]:
    """``/healthz`` and ``/readyz`` answering from ``checks()``'s liveness and readiness
    (which read state, never block: they are answered on the server's loop thread)."""
    return {
        "/healthz": _Check(lambda: checks().liveness()),
        "/readyz": _Check(lambda: checks().readiness()),
    }


class MetricsServer:
    """Serves one worker's (or scheduler's) metrics and health over HTTP, in the
    background (see :mod:`.http_server` for what it bounds).

    Args:
        metrics: the worker's metrics (also the source of its health), or a scheduler's.
        port: the TCP port; 0 picks a free one (read it back from :attr:`port`).
        host: the address to listen on; the default, every interface, lets Prometheus
            and a container's health check reach it.
        max_age: seconds a rendered ``/metrics`` page is served again.
        limits: what clients may take (timeouts, threads, connections, backlog).
    """

    def __init__(
        self,
        metrics: Observed,
        *,
        port: int,
        host: str = "0.0.0.0",
        max_age: float = METRICS_MAX_AGE,
        limits: Limits | None = None,
    ) -> None:
        self.page = MetricsPage(metrics.registry, max_age=max_age)
        routes: dict[str, Route] = {"/metrics": self.page, **health_routes(lambda: metrics.status)}
        self._http = HttpServer(routes, host=host, port=port, limits=limits, name="queuey-metrics")

    @property
    def port(self) -> int:
        """The port it listens on (the one the system chose, if it was given 0)."""
        return self._http.port

    @property
    def url(self) -> str:
        """Where it listens, e.g. ``http://0.0.0.0:9191``."""
        return self._http.url

    @property
    def http(self) -> HttpServer:
        """The server underneath (its open connections, for tests)."""
        return self._http

    def start(self) -> MetricsServer:
        """Listen and serve in the background.

        Raises:
            ConfigError: the port cannot be listened on (in use, or not allowed).
        """
        self._http.start()
        logger.info(
            "serving /metrics, /healthz and /readyz on %s",
            self.url,
            extra={"metrics_url": self.url},
        )
        return self

    def close(self) -> None:
        """Stop listening; returns once the serving thread has ended."""
        self._http.close()

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
