"""The metrics and health server against hostile and careless clients.

Clients that hang up early, hundreds of idle connections and a burst of half-sent
requests released at once: the server keeps a bounded number of threads, answers
``/healthz`` while the burst's render is still running, renders ``/metrics`` once for the
burst, and never writes to stderr (the process log stays one JSON object a line). No test
here times anything: ``bench/metrics_server_load.py`` measures the latencies and the job
rate.
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from queuey_core.observability import MetricsServer
from queuey_core.observability import WorkerMetrics
from queuey_core.observability.http_messages import Limits
from queuey_core.observability.http_messages import Request
from queuey_core.observability.server import MetricsPage
from tests.support import wait_for


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def request(port: int, path: str, *, headers: str = "") -> tuple[int, dict[str, str], bytes]:
    """A whole GET: (status, headers lower-cased, body)."""
    with connect(port) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n{headers}\r\n".encode())
        return read_answer(sock)


def read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split(" ")[1]), {k.lower(): v for k, v in fields.items()}, body


def hang_up_hard(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0), as a client whose timeout fired does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    # Long client timeouts: nothing here may pass because connections were timed out.
    limits = Limits(request_timeout=120, write_timeout=120)
    with MetricsServer(WorkerMetrics(), port=0, host="127.0.0.1", limits=limits) as s:
        yield s


def server_threads() -> int:
    return sum(t.name.startswith("queuey-metrics") for t in threading.enumerate())


_CHILD = """
import sys
from queuey_cli.output import LogFormat, setup_logging
from queuey_core.observability import MetricsServer, WorkerMetrics
setup_logging(LogFormat.JSON, "DEBUG")
server = MetricsServer(WorkerMetrics(), port=0, host="127.0.0.1").start()
print(server.port, flush=True)
sys.stdin.read()
server.close()
"""


def test_clients_that_leave_early_print_nothing_and_the_log_stays_json_lines() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    port = int(proc.stdout.readline())
    clients = 0
    for _ in range(30):
        connect(port).close()  # connects and leaves without a word
        half = connect(port)
        half.sendall(b"GET /metr")
        hang_up_hard(half)  # leaves mid-request
        for path in ("/metrics", "/healthz"):
            gone = connect(port)
            gone.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            hang_up_hard(gone)  # leaves before reading the answer
        clients += 4
    assert request(port, "/healthz")[0] == 200, "still serving"
    _, stderr = proc.communicate("", timeout=30)

    lines = stderr.splitlines()
    assert "Traceback" not in stderr, stderr
    records = [json.loads(line) for line in lines]  # each line one JSON object
    assert all(isinstance(r, dict) for r in records), lines
    left = [r for r in records if "HTTP client left" in r.get("message", "")]
    assert left, "a client that leaves is worth one debug line"
    assert len(left) <= clients, "at most one line a client"
    assert {r.get("level") for r in left} <= {"debug", "DEBUG"}, left


def test_300_idle_connections_hold_no_thread_and_healthz_answers_at_once(
    server: MetricsServer,
) -> None:
    idle = [connect(server.port) for _ in range(300)]
    try:
        wait_for(lambda: server.http.open_connections() == 300)
        for _ in range(5):
            status, _, body = request(server.port, "/healthz")
            assert status == 200, body
        threads = server_threads()
        assert threads <= 1 + Limits().handler_threads, (
            f"{threads} server threads for 300 idle connections: the loop and the pool only"
        )
        assert server.http.open_connections() >= 300, "the idle ones are still open"
    finally:
        for sock in idle:
            sock.close()


class Gate(Collector):
    """A collector whose collect() waits until released: a render that takes as long
    as the test wants."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def collect(self) -> Iterator[Metric]:
        self.entered.set()
        assert self.release.wait(30)
        return iter(())


def test_a_burst_of_half_sent_scrapes_costs_one_render_and_healthz_answers_meanwhile() -> None:
    metrics = WorkerMetrics()
    gate = Gate()
    metrics.registry.register(gate)
    limits = Limits(request_timeout=120, write_timeout=120)
    with MetricsServer(metrics, port=0, host="127.0.0.1", limits=limits) as server:
        idle = [connect(server.port) for _ in range(300)]
        burst = [connect(server.port) for _ in range(150)]
        try:
            for sock in burst:
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: t\r\n")
            wait_for(lambda: server.http.open_connections() == 450)
            assert server.page.renders == 0
            for sock in burst:  # released at once
                sock.sendall(b"\r\n")
            assert gate.entered.wait(30), "a render began"
            # The render is held: /healthz must not wait for it, nor for the 149 others.
            status, _, body = request(server.port, "/healthz")
            assert status == 200, body
            assert server_threads() <= 1 + Limits().handler_threads
            gate.release.set()
            answers = [read_answer(sock) for sock in burst]
            assert [status for status, _, _ in answers] == [200] * 150
            assert len({body for _, _, body in answers}) == 1, "every scrape got the same page"
            assert b"queuey_worker_state" in answers[0][2]
            assert server.page.renders == 1, f"{server.page.renders} renders for one burst"
        finally:
            gate.release.set()
            for sock in idle + burst:
                sock.close()


def test_idle_and_slow_clients_are_closed_after_the_request_timeout() -> None:
    limits = Limits(request_timeout=0.2)
    with MetricsServer(WorkerMetrics(), port=0, host="127.0.0.1", limits=limits) as server:
        idle = connect(server.port)
        slow = connect(server.port)
        slow.sendall(b"GET /healthz HTTP/1.1\r\n")  # and never the rest
        wait_for(lambda: server.http.open_connections() == 0)
        assert idle.recv(1) == b"", "closed by the server"
        assert slow.recv(1) == b""
        assert request(server.port, "/healthz")[0] == 200


def test_the_page_is_rendered_at_most_once_per_max_age() -> None:
    now = [100.0]
    metrics = WorkerMetrics()
    page = MetricsPage(metrics.registry, max_age=1.0, clock=lambda: now[0])
    plain = Request("GET", "/metrics")
    first = page(plain)
    assert page(plain) is first
    now[0] += 0.999
    assert page(plain) is first
    now[0] += 0.002
    assert page(plain) is not first
    assert page.renders == 2


def test_each_format_is_its_own_page() -> None:
    # Without the process's own collectors: its CPU seconds and GC counters (a
    # collection another thread asks for, even with automatic GC off) would make the
    # text and gzip pages differ by more than their format.
    page = MetricsPage(WorkerMetrics(process_metrics=False).registry, clock=lambda: 0.0)
    text = page(Request("GET", "/metrics"))
    zipped = page(Request("GET", "/metrics", headers={"accept-encoding": "gzip"}))
    openmetrics = page(
        Request("GET", "/metrics", headers={"accept": "application/openmetrics-text"})
    )
    one = page(Request("GET", "/metrics", "name[]=queuey_worker_state"))
    assert gzip.decompress(zipped.body) == text.body
    assert ("Content-Encoding", "gzip") in zipped.headers
    assert openmetrics.content_type.startswith("application/openmetrics-text")
    assert openmetrics.body.endswith(b"# EOF\n")
    assert b"queuey_worker_state" in one.body
    assert b"queuey_jobs_total" not in one.body
    assert page.renders == 4


def test_bad_requests_get_a_short_answer(server: MetricsServer) -> None:
    with connect(server.port) as sock:
        sock.sendall(b"POST /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_answer(sock)[0] == 405
    with connect(server.port) as sock:
        sock.sendall(b"nonsense\r\n\r\n")
        assert read_answer(sock)[0] == 400
    with connect(server.port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 10_000)
        assert read_answer(sock)[0] == 431
    status, headers, body = request(server.port, "/nowhere")
    assert status == 404
    assert b"/metrics" in body
    with connect(server.port) as sock:
        sock.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        status, headers, body = read_answer(sock)
        assert (status, body) == (200, b"")
        assert int(headers["content-length"]) > 0


def test_past_the_connection_limit_the_longest_idle_make_room_for_a_probe() -> None:
    limits = Limits(max_connections=20, request_timeout=120)
    with MetricsServer(WorkerMetrics(), port=0, host="127.0.0.1", limits=limits) as server:
        idle = [connect(server.port) for _ in range(40)]
        try:
            wait_for(lambda: server.http.open_connections() == 20)
            assert request(server.port, "/healthz")[0] == 200, "the probe got a slot"
            assert idle[0].recv(1) == b"", "the first idle one was closed for it"
            assert server.http.open_connections() <= 20
        finally:
            for sock in idle:
                sock.close()
