"""Worker processes launched as a user launches them, and what the harness reads off them.

Owns: starting ``queuey worker``, ``dramatiq`` and ``celery worker`` with the benchmark's
handlers, timing each from launch until its queue is empty, the time of its first job
(the handler writes ``first`` to a pipe the harness reads), its peak resident memory
(sampled from /proc through psutil, for the whole process tree and for its largest
process), and stopping it with SIGTERM as a user would. Never run as a test.

"Empty" is RabbitMQ's ready count reaching 0, polled every 5 ms; the last prefetched
jobs (at most one prefetch window, a few milliseconds of no-op work) are still running
then. The same rule times every worker. After the stop the harness checks that
nothing came back to the queue: every job was acked.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika
import psutil

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
URL = os.environ.get("QUEUEY_BENCH_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


class Counter:
    """Reads queues' ready counts over one connection (polled every few milliseconds)."""

    def __init__(self) -> None:
        self._conn = pika.BlockingConnection(pika.URLParameters(URL))
        self._ch = self._conn.channel()

    def ready(self, queue: str) -> int:
        """Messages ready in ``queue`` (0 if it does not exist)."""
        try:
            return int(self._ch.queue_declare(queue, passive=True).method.message_count)
        except pika.exceptions.ChannelClosedByBroker:
            self._ch = self._conn.channel()
            return 0

    def consumers(self, queue: str) -> int:
        """Consumers registered on ``queue`` (0 if it does not exist)."""
        try:
            return int(self._ch.queue_declare(queue, passive=True).method.consumer_count)
        except pika.exceptions.ChannelClosedByBroker:
            self._ch = self._conn.channel()
            return 0

    def close(self) -> None:
        if self._conn.is_open:
            self._conn.close()


def ready(queue: str) -> int:
    """Messages ready in ``queue`` (0 if it does not exist), on a connection of its own."""
    counter = Counter()
    try:
        return counter.ready(queue)
    finally:
        counter.close()


def purge(*queues: str) -> None:
    """Empty each of ``queues`` that exists."""
    conn = pika.BlockingConnection(pika.URLParameters(URL))
    for name in queues:
        ch = conn.channel()
        try:
            ch.queue_purge(name)
            ch.close()
        except pika.exceptions.ChannelClosedByBroker:
            pass
    conn.close()


def compile_sources() -> None:
    """Write the bytecode of queuey's own sources, as installing a wheel does.

    An editable install has none, and with PYTHONDONTWRITEBYTECODE set (as on this
    machine) every ``queuey worker`` launch would compile all its modules again, while
    the peers, installed from wheels, load theirs: a start-up cost no user pays.
    """
    root = HERE.parent
    sources = [root / "queuey_core", root / "queuey_cli", root / "handlers", HERE]
    argv = [sys.executable, "-m", "compileall", "-q", *map(str, sources)]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def plugin_path() -> str:
    """A PYTHONPATH under which ``queuey worker`` finds the benchmark's handlers.

    A ``dist-info`` with an entry point is all ``importlib.metadata`` needs: the bench
    handlers are never installed into any environment.
    """
    root = Path(tempfile.gettempdir()) / f"queuey-bench-plugin-{os.getuid()}"
    info = root / "queuey_bench_handlers-0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: queuey-bench-handlers\nVersion: 0.0\n"
    )
    (info / "entry_points.txt").write_text("[queuey.handlers]\nbench = queuey_bench_handlers\n")
    return os.pathsep.join([str(root), str(HERE)])


def config_file() -> Path:
    """The benchmark's queuey.toml: the bench queues plus the example handlers' one."""
    path = Path(tempfile.gettempdir()) / f"queuey-bench-{os.getuid()}-{os.getpid()}.toml"
    path.write_text(
        f'[broker]\nurl = "{URL}"\n'
        '[worker]\njob_timeout = "5m"\n'
        "[queues.alpha]\nprefetch = 8\nmax_priority = 10\n"
        '[queues.beta]\nprefetch = 1\nkind = "quorum"\n'
        "[queues.bench]\nprefetch = 16\n"
        "[queues.bench_io]\nprefetch = 128\n"
    )
    return path


def queuey_argv(queue: str, concurrency: int, *extra: str) -> list[str]:
    return [
        str(BIN / "queuey"),
        "--config",
        str(config_file()),
        "--log-format",
        "json",
        "worker",
        "--queues",
        queue,
        "--concurrency",
        str(concurrency),
        *extra,
    ]


def dramatiq_argv(threads: int) -> list[str]:
    return [str(BIN / "dramatiq"), "peer_dramatiq", "--processes", "1", "--threads", str(threads)]


def celery_argv(threads: int) -> list[str]:
    return [
        str(BIN / "celery"),
        "-A",
        "peer_celery",
        "worker",
        "-P",
        "threads",
        "-c",
        str(threads),
        "-Q",
        "bench_celery",
        "--loglevel",
        "WARNING",
    ]


class Run:
    """One worker process, from launch to stop, watched by the harness."""

    def __init__(self, argv: list[str], *, log: str) -> None:
        read_fd, write_fd = os.pipe()
        env = {
            **os.environ,
            "QUEUEY_BENCH_FD": str(write_fd),
            "QUEUEY_BENCH_URL": URL,
            "PYTHONPATH": plugin_path(),
            "PYTHONUNBUFFERED": "1",
        }
        self.lines: list[tuple[float, str]] = []
        self._log = open(Path(tempfile.gettempdir()) / f"queuey-bench-{log}.log", "w")  # noqa: SIM115
        self.launched = time.perf_counter()
        self.proc = subprocess.Popen(
            argv,
            env=env,
            cwd=HERE,
            pass_fds=(write_fd,),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        os.close(write_fd)
        self._reader = threading.Thread(target=self._read, args=(read_fd,), daemon=True)
        self._reader.start()
        self.peak_tree = 0
        self.peak_one = 0
        self._ps = psutil.Process(self.proc.pid)

    def _read(self, fd: int) -> None:
        buf = b""
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                now = time.perf_counter()
                buf += chunk
                *done, buf = buf.split(b"\n")
                self.lines.extend((now, line.decode()) for line in done)

    def sample(self) -> None:
        """Note the resident memory of the process and its children now."""
        try:
            procs = [self._ps, *self._ps.children(recursive=True)]
            sizes = []
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    sizes.append(p.memory_info().rss)
        except psutil.Error:
            return
        self.peak_tree = max(self.peak_tree, sum(sizes))
        self.peak_one = max(self.peak_one, max(sizes, default=0))

    def cpu_seconds(self) -> float:
        """User and system CPU the process tree has used so far (load barely moves it)."""
        total = 0.0
        with contextlib.suppress(psutil.Error):
            for p in [self._ps, *self._ps.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    times = p.cpu_times()
                    total += times.user + times.system
        return total

    def first_job(self) -> float:
        """Seconds from launch to the first ``first`` line (nan if none came)."""
        for when, line in self.lines:
            if line == "first":
                return when - self.launched
        return float("nan")

    def wait_until(self, done: Callable[[], bool], timeout: float, every: float = 0.005) -> float:
        """Seconds from launch until ``done()``, sampling memory meanwhile."""
        deadline = time.monotonic() + timeout
        last_sample = 0.0
        while not done():
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"{self.proc.args[0]} did not finish in {timeout:g}s")
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.proc.args[0]} exited with {self.proc.returncode}")
            if now - last_sample > 0.02:
                self.sample()
                last_sample = now
            time.sleep(every)
        took = time.perf_counter() - self.launched
        self.sample()
        return took

    def stop(self) -> int:
        """SIGTERM, as a user or an orchestrator stops it; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        self._log.close()
        return int(self.proc.returncode)


def drain(argv: list[str], queue: str, n: int, *, log: str) -> dict[str, Any]:
    """Launch a worker on a queue holding ``n`` jobs; time it until the queue is empty."""
    counter = Counter()
    run = Run(argv, log=log)
    try:
        took = run.wait_until(lambda: counter.ready(queue) == 0, timeout=600)
        cpu = run.cpu_seconds()
    finally:
        run.stop()
        counter.close()
    left = ready(queue)
    if left:
        raise RuntimeError(f"{log}: {left} jobs came back to {queue} after the stop")
    return _figures(run, n, took, cpu)


def _figures(run: Run, n: int, took: float, cpu: float) -> dict[str, Any]:
    """What a drain reports of ``run``: ``n`` jobs in ``took`` seconds and ``cpu``."""
    first = run.first_job()
    return {
        "rate": n / took,
        "seconds": took,
        # From the first job on: the throughput of a running worker, launch left out.
        "running_rate": (n - 1) / (took - first) if took > first else float("nan"),
        "cpu_us": cpu / n * 1e6,
        "first_job_s": first,
        "rss_tree_mb": run.peak_tree / 2**20,
        "rss_mb": run.peak_one / 2**20,
    }


def file_counts(path: Path, queue: str) -> tuple[int, int]:
    """Jobs ready and jobs leased (running) in ``queue`` of the embedded backend's file."""
    from queuey_core.backends.sqlite import SqliteBackend  # noqa: PLC0415

    backend = SqliteBackend(f"sqlite:///{path}")
    try:
        counts = backend.counts([queue])[queue][0]
        return counts.ready, counts.leased
    finally:
        backend.close()


def drain_file(argv: list[str], path: Path, queue: str, n: int, *, log: str) -> dict[str, Any]:
    """:func:`drain` for a worker on the embedded backend: "empty" is the file's ready
    count reaching 0, read through a connection of the harness's own."""
    from queuey_core.backends.sqlite import SqliteBackend  # noqa: PLC0415

    reader = SqliteBackend(f"sqlite:///{path}")
    run = Run(argv, log=log)
    try:
        took = run.wait_until(lambda: reader.counts([queue])[queue][0].ready == 0, timeout=600)
        cpu = run.cpu_seconds()
    finally:
        run.stop()
        reader.close()
    left = sum(file_counts(path, queue))
    if left:
        raise RuntimeError(f"{log}: {left} jobs left in {queue} after the stop")
    return _figures(run, n, took, cpu)


def have(tool: str) -> bool:
    """Whether a peer's command is installed (``pip install -e '.[bench]'``)."""
    return (BIN / tool).exists() or shutil.which(tool) is not None


def have_module(name: str) -> bool:
    """Whether a module is installed here (the bench extra's OpenTelemetry SDK)."""
    import importlib.util  # noqa: PLC0415

    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def callgrind_total(out: Path) -> int:
    """The instructions counted in callgrind's output file ``out``: its ``totals`` line
    (its ``summary`` is 0 when instrumentation was off at the start)."""
    found = re.search(r"^totals:\s+(\d+)", out.read_text(errors="replace"), re.M)
    if found is None:
        raise RuntimeError(f"no totals in {out}")
    return int(found.group(1))


def json_from(argv: list[str], what: str) -> dict[str, Any]:
    """Run ``argv`` (a measurement in a fresh interpreter) and read the JSON object on the
    last line it prints; RuntimeError with the end of its stderr when it fails."""
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{what} failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))
