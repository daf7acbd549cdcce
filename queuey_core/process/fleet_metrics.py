"""``/metrics``, ``/healthz`` and ``/readyz`` of a supervisor, for all its worker processes.

Why not prometheus_client's multiprocess mode: a worker's metrics are mostly read from
the worker itself when Prometheus scrapes (a custom collector over its handle and
connections, :mod:`queuey_core.observability.metrics`), and multiprocess mode only
merges Counter, Gauge and Histogram files: custom collectors and process metrics are
lost in it. So each child keeps its full :class:`~queuey_core.observability.WorkerMetrics`
and serves it on a free port of 127.0.0.1 (it tells the supervisor which), and a scrape
of the supervisor's port fetches every child's page, adds ``child`` (the slot, 0..N-1)
and ``pid`` labels to every sample, and adds the supervisor's own figures. A restarted
child is a new ``pid``: its counters start a new series, which ``rate()`` handles. The
total of a figure is ``sum without (child, pid) (...)``.

Owns: the supervisor's HTTP server and the merging. Must never: block the supervisor's
loop (it reads a snapshot of the children, on the server's threads), or wait on a child
longer than :data:`CHILD_TIMEOUT`.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from queuey_core.observability.http_messages import Response, Route
from queuey_core.observability.http_server import HttpServer
from queuey_core.observability.server import MetricsPage
from queuey_core.process.children import Slot

logger = logging.getLogger("queuey.supervisor")

#: The longest a scrape or a health check waits for one child.
CHILD_TIMEOUT = 2.0


class Fleet(Protocol):
    """What the server reads of a supervisor: its slots, and how many children it
    recycled."""

    @property
    def slots(self) -> list[Slot]:
        """The N places its children run in."""

    @property
    def recycles(self) -> int:
        """Children replaced after ``max_jobs_per_child`` jobs."""


@dataclass(frozen=True)
class ChildView:
    """One child as a scrape sees it."""

    index: int
    pid: int
    port: int | None
    ready: bool
    running: bool

    def get(self, path: str) -> tuple[int, str]:
        """GET ``path`` from the child's own server: (status, body); 0 if unreachable."""
        if self.port is None:
            return 0, ""
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=CHILD_TIMEOUT) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()
        except (OSError, ValueError):
            return 0, ""


def snapshot(supervisor: Fleet) -> tuple[list[ChildView], int]:
    """The children in their slots right now (replaced ones left out), and N.

    Reads what the supervisor's loop last saw (``returncode``), never reaps a child from
    this thread.
    """
    views = [
        ChildView(c.index, c.pid, c.metrics_port, c.ready, c.proc.returncode is None)
        for c in (s.current for s in supervisor.slots)
        if c is not None
    ]
    return views, len(supervisor.slots)


class _FleetCollector(Collector):
    """Every child's metrics, labelled, and the supervisor's own."""

    def __init__(self, supervisor: Fleet, pool: ThreadPoolExecutor) -> None:
        self._supervisor = supervisor
        self._pool = pool

    def collect(self) -> Iterator[Metric]:
        views, wanted = snapshot(self._supervisor)
        pages = list(self._pool.map(lambda v: v.get("/metrics"), views))
        merged: dict[str, Metric] = {}
        for view, (status, text) in zip(views, pages, strict=True):
            if status != 200:
                continue
            extra = {"child": str(view.index), "pid": str(view.pid)}
            for family in text_string_to_metric_families(text):
                if family.type == "unknown" and family.name.endswith("_created"):
                    continue  # a counter's creation time: not worth a series per child
                into = merged.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type)
                )
                for s in family.samples:
                    into.add_sample(s.name, {**s.labels, **extra}, s.value, s.timestamp)
        yield from merged.values()
        yield from self._own(views, wanted)

    def _own(self, views: list[ChildView], wanted: int) -> Iterator[Metric]:
        sup = self._supervisor
        yield GaugeMetricFamily(
            "queuey_supervisor_processes", "Worker processes the supervisor keeps running.", wanted
        )
        yield GaugeMetricFamily(
            "queuey_supervisor_processes_running",
            "Worker processes running in their slot now.",
            sum(v.running for v in views),
        )
        yield GaugeMetricFamily(
            "queuey_supervisor_processes_ready",
            "Worker processes consuming now.",
            sum(v.ready and v.running for v in views),
        )
        restarts = CounterMetricFamily(
            "queuey_supervisor_restarts",
            "Worker processes restarted after they died, by slot.",
            labels=["child"],
        )
        for slot in sup.slots:
            restarts.add_metric([str(slot.index)], slot.restarts)
        yield restarts
        yield CounterMetricFamily(
            "queuey_supervisor_recycles",
            "Worker processes replaced after max_jobs_per_child jobs.",
            value=sup.recycles,
        )


def liveness(supervisor: Fleet) -> tuple[bool, dict[str, Any]]:
    """Alive: every slot has a running child, and each one that serves says it is alive."""
    views, wanted = snapshot(supervisor)
    checks = [(v, v.get("/healthz") if v.running else (0, "")) for v in views]
    children = {str(v.index): _detail(v, status) for v, (status, _) in checks}
    ok = len(views) == wanted and all(
        v.running and (v.port is None or status == 200) for v, (status, _) in checks
    )
    return ok, {"processes": wanted, "children": children}


def readiness(supervisor: Fleet) -> tuple[bool, dict[str, Any]]:
    """Ready: every slot has a child that is consuming and whose own /readyz says 200."""
    views, wanted = snapshot(supervisor)
    checks = [(v, v.get("/readyz") if v.running else (0, "")) for v in views]
    children = {str(v.index): _detail(v, status) for v, (status, _) in checks}
    ok = len(views) == wanted and all(
        v.running and v.ready and status == 200 for v, (status, _) in checks
    )
    return ok, {"processes": wanted, "children": children}


def _detail(view: ChildView, status: int) -> dict[str, Any]:
    return {"pid": view.pid, "ready": view.ready, "running": view.running, "status": status}


class FleetServer:
    """The supervisor's HTTP server: every child's metrics and health on one port.

    The same server as a worker's (:class:`~queuey_core.observability.http_server.HttpServer`:
    timeouts, a fixed pool, no traceback on a client that leaves) and the same cached
    ``/metrics`` page: a burst of scrapes fetches every child's page once.
    """

    def __init__(self, supervisor: Fleet, *, port: int, host: str = "0.0.0.0") -> None:
        self._supervisor = supervisor
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="queuey-scrape")
        self.registry = CollectorRegistry()
        self.registry.register(_FleetCollector(supervisor, self._pool))
        routes: dict[str, Route] = {
            "/metrics": MetricsPage(self.registry),
            "/healthz": lambda _request: _check(liveness(supervisor)),
            "/readyz": lambda _request: _check(readiness(supervisor)),
        }
        self._http = HttpServer(routes, host=host, port=port, name="queuey-supervisor-metrics")

    @property
    def port(self) -> int:
        """The port it listens on."""
        return self._http.port

    def start(self) -> FleetServer:
        """Listen and serve in the background.

        Raises:
            ConfigError: the port cannot be listened on.
        """
        self._http.start()
        url = self._http.url
        logger.info(
            "serving /metrics, /healthz and /readyz of every worker process on %s",
            url,
            extra={"metrics_url": url},
        )
        return self

    def close(self) -> None:
        """Stop listening."""
        self._http.close()
        self._pool.shutdown(wait=False)


def _check(result: tuple[bool, dict[str, Any]]) -> Response:
    ok, details = result
    body = (json.dumps({"ok": ok, **details}, sort_keys=True) + "\n").encode()
    return Response(200 if ok else 503, body, "application/json; charset=utf-8")
