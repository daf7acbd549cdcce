"""The embedded benchmark: queuey on a SQLite file beside Huey on its SQLite storage.

    .venv/bin/python bench/embedded.py [--rounds 3] [--jobs 3000]

Same jobs, same machine, same rounds (the order alternates): the enqueue rate (one job
a call, each committed before the call returns), the worker rate with one and two
processes (from the first job taken until the queue is empty, launch left out), and
the enqueue-to-start latency of a job sent by another process to an idle worker. Each
figure is the median over rounds; ratios are queuey / Huey within a round. Writes
bench/EMBEDDED.md. Never run as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import procs

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
THREADS = 8
#: queuey's enqueue with synchronous=full, Huey's durability (its column: Huey's enqueue).
FSYNC = "enqueue, synchronous=full (jobs/s)"


class Files:
    """A fresh directory with queuey's file, Huey's file and queuey's config."""

    def __init__(self, query: str = "") -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="queuey-embedded-bench-"))
        self.queuey_db = self.dir / "queuey.db"
        self.huey_db = self.dir / "huey.db"
        self.config = self.dir / "queuey.toml"
        self.config.write_text(
            f'[broker]\nurl = "sqlite:///{self.queuey_db}{query}"\n'
            "[queues.alpha]\nprefetch = 8\nmax_priority = 10\n"
            "[queues.beta]\nprefetch = 1\n"
            "[queues.bench]\nprefetch = 16\n"
            "[queues.bench_io]\nprefetch = 128\n"
        )

    def env(self, fd: int) -> dict[str, str]:
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("QUEUEY_")},
            "PYTHONPATH": procs.plugin_path(),
            "QUEUEY_CONFIG": str(self.config),
            "QUEUEY_BENCH_FD": str(fd),
            "QUEUEY_BENCH_HUEY_DB": str(self.huey_db),
        }

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def child(files: Files, code: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter with the bench's path; its last line's JSON."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=files.env(-1),
        capture_output=True,
        text=True,
        check=False,
        cwd=HERE,
    )
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


QUEUEY_SETUP = """
import json, os, time
from queuey_core import Producer
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.settings import load_settings
from queuey_bench_handlers import Noop, Stamped
settings, _ = load_settings(None)
queues = settings.queue_set()
backend = SqliteBackend(settings.broker.url.get_secret_value())
backend.declare(list(queues.values()))
producer = Producer(backend, queues)
"""

HUEY_SETUP = """
import json, os, time
from peer_huey import huey, noop, stamped
"""


def enqueue_rate(files: Files, system: str, n: int) -> float:
    """Jobs a second, one call a job, each committed when the call returns."""
    if system == "queuey":
        code = QUEUEY_SETUP + (
            f"t = time.perf_counter()\nfor i in range({n}): producer.enqueue(Noop())\n"
        )
    else:
        code = HUEY_SETUP + f"t = time.perf_counter()\nfor i in range({n}): noop()\n"
    code += f"print(json.dumps({{'rate': {n} / (time.perf_counter() - t)}}))\n"
    return float(child(files, code)["rate"])


def fill(files: Files, system: str, n: int) -> None:
    """``n`` noop jobs, the first marked (it tells when the worker started on them)."""
    if system == "queuey":
        code = QUEUEY_SETUP + (
            "producer.enqueue(Noop(mark=True))\n"
            f"producer.enqueue_many([Noop() for _ in range({n - 1})])\n"
        )
    else:
        code = HUEY_SETUP + (f"noop(mark=True)\nfor i in range({n - 1}): noop()\n")
    child(files, code + "print('{}')\n")


def left(files: Files, system: str) -> int:
    db, table = (
        (files.queuey_db, "queuey_messages")
        if system == "queuey"
        else (
            files.huey_db,
            "task",
        )
    )
    conn = sqlite3.connect(db, timeout=30)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def worker_argv(system: str, processes: int) -> list[str]:
    if system == "queuey":
        argv = [str(BIN / "queuey"), "worker", "--queues", "bench", "--concurrency", str(THREADS)]
        return [*argv, "--processes", str(processes)] if processes > 1 else argv
    if processes > 1:
        return [str(BIN / "huey_consumer"), "peer_huey.huey", "-k", "process", "-w", str(processes)]
    return [str(BIN / "huey_consumer"), "peer_huey.huey", "-k", "thread", "-w", str(THREADS)]


def start_worker(files: Files, system: str, processes: int) -> tuple[subprocess.Popen[bytes], int]:
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        worker_argv(system, processes),
        env=files.env(write_fd),
        pass_fds=(write_fd,),
        cwd=HERE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    return proc, read_fd


def stop(proc: subprocess.Popen[bytes], read_fd: int) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    os.close(read_fd)


def read_line(fd: int, timeout: float) -> str:
    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise RuntimeError("no report from the worker in time")
        chunk = os.read(fd, 1)
        if not chunk:
            raise RuntimeError("the worker exited")
        data += chunk
    return data.decode().strip()


def worker_rate(files: Files, system: str, n: int, processes: int) -> float:
    """Jobs a second from the first job taken until the queue is empty, read off the
    file (a pipe would not reach the children of ``--processes``)."""
    fill(files, system, n)
    proc, fd = start_worker(files, system, processes)
    try:
        deadline = time.monotonic() + 120
        while left(files, system) >= n:
            assert time.monotonic() < deadline, "the worker never started"
            time.sleep(0.002)
        started = time.perf_counter()
        while left(files, system):
            time.sleep(0.005)
        return (n - 1) / (time.perf_counter() - started)
    finally:
        stop(proc, fd)


def latency(files: Files, system: str, jobs: int, gap: float) -> list[float]:
    """Enqueue-to-start waits (ms) of jobs sent one at a time by another process to an
    idle worker, ``gap`` seconds apart."""
    proc, fd = start_worker(files, system, 1)
    try:
        time.sleep(3)  # launched and idle
        send = (
            "stamped(time.time())"
            if system == "huey"
            else "producer.enqueue(Stamped(sent=time.time()))"
        )
        code = (QUEUEY_SETUP if system == "queuey" else HUEY_SETUP) + (
            f"for i in range({jobs}):\n    time.sleep({gap})\n    {send}\nprint('{{}}')\n"
        )
        sender = subprocess.Popen([sys.executable, "-c", code], env=files.env(-1), cwd=HERE)
        waits = [int(read_line(fd, 60)) / 1000 for _ in range(jobs)]
        sender.wait(timeout=60)
        return waits
    finally:
        stop(proc, fd)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--latency-jobs", type=int, default=20)
    args = parser.parse_args()
    figures: dict[str, dict[str, list[float]]] = {}

    def note(name: str, system: str, value: float) -> None:
        figures.setdefault(name, {}).setdefault(system, []).append(value)
        print(f"{name:28} {system:7} {value:10.1f}", flush=True)

    for r in range(args.rounds):
        order = ["queuey", "huey"] if r % 2 == 0 else ["huey", "queuey"]
        for system in order:
            files = Files()
            try:
                note("enqueue (jobs/s)", system, enqueue_rate(files, system, args.jobs))
            finally:
                files.close()
            if system == "queuey":
                # Huey leaves SQLite's default (an fsync every commit in WAL mode):
                # queuey with the same durability, beside its own default.
                files = Files("?synchronous=full")
                try:
                    rate = enqueue_rate(files, system, args.jobs)
                    note(FSYNC, system, rate)
                finally:
                    files.close()
            for processes in (1, 2):
                files = Files()
                try:
                    rate = worker_rate(files, system, args.jobs, processes)
                    note(f"worker, {processes} process(es) (jobs/s)", system, rate)
                finally:
                    files.close()
            files = Files()
            try:
                waits = latency(files, system, args.latency_jobs, 0.5)
                note("start latency p50 (ms)", system, statistics.median(waits))
                note("start latency max (ms)", system, max(waits))
            finally:
                files.close()
    write(figures, args)


def write(figures: dict[str, dict[str, list[float]]], args: argparse.Namespace) -> None:
    lines = [
        "# Embedded backend beside Huey (SQLite storage)",
        "",
        f"{args.rounds} rounds, {args.jobs} jobs per rate figure, {args.latency_jobs} jobs "
        "0.5 s apart for latency; medians over rounds (min-max). Written by "
        "`bench/embedded.py`. The machine: 2 cores shared with other work at the time "
        "(load average above 5): compare ratios, not absolute figures.",
        "",
        "| figure | queuey (sqlite) | Huey (SqliteHuey) | queuey / Huey |",
        "|---|---|---|---|",
    ]
    for name, by in figures.items():
        q = by["queuey"]
        h = by["huey"] if name != FSYNC else figures["enqueue (jobs/s)"]["huey"]
        ratios = [a / b for a, b in zip(q, h, strict=True)]
        lines.append(
            f"| {name} | {statistics.median(q):.1f} ({min(q):.1f}-{max(q):.1f}) "
            f"| {statistics.median(h):.1f} ({min(h):.1f}-{max(h):.1f}) "
            f"| {statistics.median(ratios):.2f} |"
        )
    lines += [
        "",
        "Rates: higher is better; latencies: lower is better. Huey runs with its consumer's "
        "defaults (`-k thread -w 8` for one process, `-k process -w 2` for two; polling "
        "starts at 0.1 s and backs off to 10 s when idle); queuey with `--concurrency 8` "
        "and its defaults (lease 5 s, poll 50 ms). Huey deletes a task when it dequeues "
        "it (at most once); queuey deletes a job when it settles (at least once), so "
        "Huey's queue empties a little before its last jobs finish. queuey's default "
        "(`synchronous=normal`) survives any process's crash but not a power cut; Huey "
        "leaves SQLite's default (an fsync every commit), so the `synchronous=full` row "
        "compares equal durability (queuey's column with `?synchronous=full`, Huey's "
        "column its enqueue figure again); fsync times on a shared disk vary widely.",
        "",
    ]
    (HERE / "EMBEDDED.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
