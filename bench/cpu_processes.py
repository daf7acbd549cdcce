"""CPU-bound jobs with ``queuey worker --processes 1`` against ``--processes 2``.

    QUEUEY_BENCH_URL=amqp://guest:guest@127.0.0.1:5672/%2F \\
        .venv/bin/python bench/cpu_processes.py [--jobs 200] [--rounds 1]

Each job is a fixed amount of pure-Python work (about 0.05 s on our machine), which holds the GIL:
threads of one process cannot overlap it, processes can. Each run enqueues the batch,
launches the worker, and stops the clock when the last job has finished (from the
ledger the handler writes), so start-up counts. The two runs of a round follow each
other; the ratio of their times is printed. The machine is shared: compare ratios from
one run, not seconds across runs. Never run as a test.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pika  # noqa: E402

from queuey_core import Producer, QueueConfig, QueueSet  # noqa: E402
from queuey_core.backends.rabbitmq import RabbitMQBackend  # noqa: E402
from tests.integration import cpu_jobs, ledger  # noqa: E402

URL = os.environ.get("QUEUEY_BENCH_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
QUEUEY = Path(sys.executable).with_name("queuey")
ROUNDS_PER_JOB = 1_000_000


def _config(folder: Path) -> Path:
    path = folder / "queuey.toml"
    path.write_text(
        f'[broker]\nurl = "{URL}"\n[worker]\nconcurrency = 2\njob_timeout = "5m"\n'
        '[queues.alpha]\nmax_priority = 10\n[queues.beta]\nkind = "quorum"\n'
        f'[queues."{cpu_jobs.QUEUE}"]\nprefetch = 2\n'
    )
    return path


def _enqueue(n: int) -> None:
    queues = QueueSet([QueueConfig(cpu_jobs.QUEUE, prefetch=2)])
    conn = pika.BlockingConnection(pika.URLParameters(URL))
    conn.channel().queue_delete(cpu_jobs.QUEUE)  # start from an empty queue
    conn.close()
    rabbit = RabbitMQBackend(URL)
    try:
        rabbit.declare([queues[cpu_jobs.QUEUE]])
        Producer(rabbit, queues).enqueue_many(
            [cpu_jobs.Crunch(rounds=ROUNDS_PER_JOB) for _ in range(n)]
        )
    finally:
        rabbit.close()


def _cpu_of_children() -> float:
    """CPU seconds used by every process we (and they) waited for: the worker's tree."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(processes: int, jobs: int, folder: Path) -> tuple[float, float]:
    """Seconds from launching the worker to the last of ``jobs`` jobs finished, and the
    cores its processes used on average (their CPU seconds over the whole run's)."""
    book = folder / f"ledger-{processes}-{time.monotonic_ns()}.txt"
    _enqueue(jobs)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(cpu_jobs.plugin_path(folder / "plugin")), str(REPO)]),
        ledger.LEDGER_ENV: str(book),
    }
    args = ["--config", str(_config(folder)), "--log-format", "json", "worker"]
    args += ["--queues", cpu_jobs.QUEUE, "--processes", str(processes)]
    cpu_before = _cpu_of_children()
    launched = time.perf_counter()
    proc = subprocess.Popen([str(QUEUEY), *args], stderr=subprocess.DEVNULL, env=env)
    try:
        while ledger.Books.read(book).finished() < jobs:
            if proc.poll() is not None:
                raise SystemExit(f"the worker exited early ({proc.returncode})")
            time.sleep(0.05)
        elapsed = time.perf_counter() - launched
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    # The supervisor reaped its children, so their CPU time is in ours once it exits.
    cores = (_cpu_of_children() - cpu_before) / (time.perf_counter() - launched)
    return elapsed, cores


def main() -> None:
    """Time the batch with one process and with two, and print the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1)
    opts = parser.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(opts.rounds):
            one, cores_one = run(1, opts.jobs, Path(tmp))
            two, cores_two = run(2, opts.jobs, Path(tmp))
            ratios.append(one / two)
            print(
                f"round {r + 1}: {opts.jobs} jobs, --processes 1: {one:.1f}s "
                f"({cores_one:.2f} cores used), --processes 2: {two:.1f}s "
                f"({cores_two:.2f} cores used), speed-up {one / two:.2f}x"
            )
    print(f"speed-up, median of {len(ratios)}: {statistics.median(ratios):.2f}x (2 cores)")


if __name__ == "__main__":
    main()
