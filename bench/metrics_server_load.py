"""A worker's job rate with and without hostile clients on its metrics port (issue 27).

``python bench/metrics_server_load.py`` runs a worker on the in-memory backend (or on
RabbitMQ with ``--amqp URL``) serving ``/metrics``, and drains ``--jobs`` no-op jobs in
alternating rounds: quiet, then with a load process holding 300 idle connections to
the metrics port and, every second, releasing a burst of 150 half-sent ``/metrics``
requests at once (then timing a ``/healthz``), and "placebo" rounds with the same
clients against a server in another process: on a 2-core machine the clients take CPU
from the worker whatever it serves, and the placebo says how much. It prints the median
job rate of each kind of round and their ratios to the quiet one (asked: loaded/quiet
>= 0.9), the same per second of the process's CPU time, the server's threads under the
load, ``/metrics`` renders per burst and the ``/healthz`` latencies, as JSON.

``--server old`` serves with ``main``'s ThreadingHTTPServer (read from git) instead,
for the figures before the change. A benchmark, not a test: timing belongs here.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from queuey_core import Handler, Job, JobContext, Producer, QueueConfig, QueueSet, Worker
from queuey_core.backends.memory import MemoryBackend
from queuey_core.observability import WorkerMetrics

QUEUE = "bench.metrics_load"
IDLE = 300
BURST = 150


class Tick(Job):
    NAME: ClassVar[str] = "bench.tick"
    QUEUE: ClassVar[str] = QUEUE
    n: int


def _server_class(which: str) -> Any:
    if which == "new":
        from queuey_core.observability import MetricsServer  # noqa: PLC0415

        return MetricsServer
    source = subprocess.run(
        ["git", "show", "main:queuey_core/observability/server.py"],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "old_server.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_server", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MetricsServer


def _count_renders(metrics: WorkerMetrics) -> list[int]:
    """Counts every render of the registry, whichever server does it."""
    counter = [0]
    registry = metrics.registry
    original = registry.collect

    def collect() -> Any:
        counter[0] += 1
        return original()

    registry.collect = collect  # type: ignore[method-assign]
    return counter


class _Done:
    """Jobs finished, counted by the handler (reading the registry would render it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0

    def __call__(self, job: Tick, ctx: JobContext) -> None:
        with self.lock:
            self.count += 1


def _round(
    backend: Any, queues: QueueSet, metrics: WorkerMetrics, jobs: int
) -> tuple[float, float]:
    """Fill the queue, then time a fresh worker draining it: jobs a second of wall time,
    and a second of this process's CPU time (the server's share included; other
    programs on the machine do not count).

    A memory backend is made anew for each round: one keeps every message it settled,
    and a heap grown over rounds stalls every thread in long garbage collections.
    """
    if isinstance(backend, MemoryBackend):
        backend = MemoryBackend()
    gc.collect()
    producer = Producer(backend, queues)
    for n in range(jobs):
        producer.enqueue(Tick(n=n))
    done = _Done()
    worker = Worker(backend, queues, [Handler(Tick, done)], concurrency=8, hooks=[metrics])
    runner = threading.Thread(target=worker.run, daemon=True)
    began, cpu = time.perf_counter(), time.process_time()
    runner.start()
    while done.count < jobs:
        time.sleep(0.002)
    took, cpu_took = time.perf_counter() - began, time.process_time() - cpu
    worker.handle.shutdown()
    runner.join(60)
    return jobs / took, jobs / cpu_took


def _server_threads() -> int:
    names = ("queuey-metrics", "Thread-")  # ThreadingHTTPServer's threads are Thread-N
    return sum(t.name.startswith(names) for t in threading.enumerate())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server", choices=("new", "old"), default="new")
    parser.add_argument("--amqp", help="a RabbitMQ URL (default: the in-memory backend)")
    args = parser.parse_args()

    queues = QueueSet([QueueConfig(QUEUE, prefetch=16)])
    if args.amqp:
        from queuey_core.backends.rabbitmq import RabbitMQBackend  # noqa: PLC0415

        backend: Any = RabbitMQBackend(args.amqp)
    else:
        backend = MemoryBackend()
    metrics = WorkerMetrics()
    renders = _count_renders(metrics)
    server = _server_class(args.server)(metrics, port=0, host="127.0.0.1").start()
    rates: dict[str, list[float]] = {"quiet": [], "loaded": [], "placebo": []}
    cpu_rates: dict[str, list[float]] = {"quiet": [], "loaded": [], "placebo": []}
    load_figures: list[dict[str, Any]] = []
    threads_under_load: list[int] = []
    _round(backend, queues, metrics, min(2000, args.jobs))  # warm up
    placebo = _placebo_server()
    for _ in range(args.rounds):
        rate, cpu_rate = _round(backend, queues, metrics, args.jobs)
        rates["quiet"].append(rate)
        cpu_rates["quiet"].append(cpu_rate)

        load = _start_load(server.port)
        before = renders[0]
        rate, cpu_rate = _round(backend, queues, metrics, args.jobs)
        rates["loaded"].append(rate)
        cpu_rates["loaded"].append(cpu_rate)
        threads_under_load.append(_server_threads())
        figures = _stop_load(load)
        figures["renders"] = renders[0] - before
        load_figures.append(figures)

        # The same clients against a server in another process: what the machine's
        # two cores lose to the clients themselves, not to the worker's server.
        load = _start_load(placebo[1])
        rate, cpu_rate = _round(backend, queues, metrics, args.jobs)
        rates["placebo"].append(rate)
        cpu_rates["placebo"].append(cpu_rate)
        _stop_load(load)
    placebo[0].communicate("", timeout=60)
    server.close()
    quiet, loaded = statistics.median(rates["quiet"]), statistics.median(rates["loaded"])
    latencies = [ms for f in load_figures for ms in f["healthz_ms"]]
    bursts = sum(f["bursts"] for f in load_figures)
    report = {
        "server": args.server,
        "backend": "rabbitmq" if args.amqp else "memory",
        "jobs_per_round": args.jobs,
        "rates_quiet": [round(r) for r in rates["quiet"]],
        "rates_loaded": [round(r) for r in rates["loaded"]],
        "ratio_loaded_to_quiet": round(loaded / quiet, 3),
        "rates_placebo": [round(r) for r in rates["placebo"]],
        "ratio_placebo_to_quiet": round(statistics.median(rates["placebo"]) / quiet, 3),
        "cpu_rates_quiet": [round(r) for r in cpu_rates["quiet"]],
        "cpu_rates_loaded": [round(r) for r in cpu_rates["loaded"]],
        "cpu_ratio_loaded_to_quiet": round(
            statistics.median(cpu_rates["loaded"]) / statistics.median(cpu_rates["quiet"]), 3
        ),
        "cpu_ratio_placebo_to_quiet": round(
            statistics.median(cpu_rates["placebo"]) / statistics.median(cpu_rates["quiet"]), 3
        ),
        "server_threads_under_load": max(threads_under_load),
        "bursts": bursts,
        "renders_per_burst": round(sum(f["renders"] for f in load_figures) / max(1, bursts), 2),
        "healthz_ms_median": round(statistics.median(latencies), 1) if latencies else None,
        "healthz_ms_max": round(max(latencies), 1) if latencies else None,
        "answers_not_200": [f["not_200"] for f in load_figures],
    }
    print(json.dumps(report, indent=2))


def _start_load(port: int) -> subprocess.Popen[str]:
    load = subprocess.Popen(
        [sys.executable, __file__, "--load", str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert load.stdout is not None
    load.stdout.readline()  # the idle connections are open
    return load


def _stop_load(load: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = load.communicate("stop\n", timeout=120)
    figures: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return figures


_PLACEBO = """
import sys
from queuey_core.observability import MetricsServer, WorkerMetrics
server = MetricsServer(WorkerMetrics(), port=0, host="127.0.0.1").start()
print(server.port, flush=True)
sys.stdin.read()
"""


def _placebo_server() -> tuple[subprocess.Popen[str], int]:
    """A metrics server in a process of its own, for the placebo rounds."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _PLACEBO],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


# -- the load process -------------------------------------------------------------------


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _status(sock: socket.socket, what: str) -> int:
    """The status of the answer on ``sock`` (0: none, and why on stderr); closes it."""
    data = b""
    error: OSError | None = None
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except OSError as exc:
        error = exc
    finally:
        sock.close()
    try:
        return int(data.split(b" ", 2)[1])
    except (IndexError, ValueError):
        print(f"no answer to {what}: {error!r}, {len(data)} bytes", file=sys.stderr)
        return 0


def load(port: int) -> None:
    """Hold IDLE connections (reopened when the server closes them); every second, a
    burst of BURST half-sent scrapes released at once, then a timed /healthz."""
    idle = [_connect(port) for _ in range(IDLE)]
    print("ready", flush=True)
    stop = threading.Event()

    def wait_for_stop() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()
    healthz_ms: list[float] = []
    not_200: dict[int, int] = {}
    bursts = 0
    while not stop.is_set():
        began = time.monotonic()
        burst = [_connect(port) for _ in range(BURST)]
        for sock in burst:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n")
        for sock in burst:
            sock.sendall(b"\r\n")
        asked = time.perf_counter()
        with _connect(port) as probe:
            probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n")
            # 503 is an answer too: between rounds no worker runs, and /healthz says so.
            ok = _status(probe, "/healthz") in {200, 503}
        healthz_ms.append((time.perf_counter() - asked) * 1000)
        statuses = [_status(sock, "/metrics") for sock in burst] + [200 if ok else 0]
        for status in statuses:
            if status != 200:
                not_200[status] = not_200.get(status, 0) + 1
        bursts += 1
        readable, _, _ = select.select(idle, [], [], 0)
        for sock in readable:  # closed by the server's request timeout: open another
            sock.close()
            idle[idle.index(sock)] = _connect(port)
        stop.wait(max(0.0, 1.0 - (time.monotonic() - began)))
    for sock in idle:
        sock.close()
    print(json.dumps({"healthz_ms": healthz_ms, "not_200": not_200, "bursts": bursts}))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--load":
        load(int(sys.argv[2]))
    else:
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        main()
