"""Enqueue-to-start latency at 0.5 and 0.8 of a worker's running rate, per backend.

    .venv/bin/python bench/latency.py [--backend rabbitmq|sqlite|both] [--seconds 6]
                                      [--rounds 2] [--jobs 4000]

For each backend and round: first the running rate of one ``queuey worker`` (8 job
threads, defaults, JSON logs) on no-op ``Stamped`` jobs already queued (``--jobs`` of
them, timed from the first job's start to the last one's, launch left out); then, with
a fresh worker already consuming, a producer in another process paced at 0.5 and at 0.8
of that rate for ``--seconds`` each. Every job carries ``time.time()`` taken when it was
built for enqueue; its handler reports, through a pipe, how long after that it started.
p50 / p99 / max in milliseconds, over every job of the run but the warm-up one.

The producer publishes in small batches (``enqueue_many``, every publish confirmed) at
most 500 times a second, so a job may wait up to one batch interval (2 ms) beside the
others of its batch before it leaves: that is counted in its latency, as a producer's
own pacing would be. The producer, the worker and (on RabbitMQ) the broker share the
machine's cores: the load average is printed with the figures. Never run as a test.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import procs

THREADS = 8
#: At most this many publishes a second; above it, jobs go out in batches.
PUBLISHES_PER_SECOND = 500


def config(backend: str, query: str = "") -> Path:
    """A queuey.toml for ``backend``: the bench queue on RabbitMQ, or a fresh SQLite file
    (``query``: the URL's options, e.g. ``?poll=0.005``)."""
    if backend == "rabbitmq":
        return procs.config_file()
    where = Path(tempfile.mkdtemp(prefix="queuey-latency-"))
    path = where / "queuey.toml"
    path.write_text(
        f'[broker]\nurl = "sqlite:///{where / "queuey.db"}{query}"\n'
        "[queues.alpha]\nprefetch = 8\nmax_priority = 10\n"
        "[queues.beta]\nprefetch = 1\n"
        "[queues.bench]\nprefetch = 16\n"
    )
    return path


def worker(path: Path) -> procs.Run:
    """A ``queuey worker`` on the bench queue, configured by ``path``."""
    argv = procs.queuey_argv("bench", THREADS)
    argv[argv.index("--config") + 1] = str(path)
    return procs.Run(argv, log="queuey-latency")


def produce(path: Path, rate: float, seconds: float) -> int:
    """``rate`` Stamped jobs a second for ``seconds``, from this process; how many."""
    import measure  # noqa: PLC0415 - the child process's (it imports pika)

    from queuey_core import Producer  # noqa: PLC0415
    from queuey_core.backends.open import open_backend  # noqa: PLC0415
    from queuey_core.settings import load_settings  # noqa: PLC0415

    settings, _ = load_settings([path])
    backend = open_backend(settings.broker)
    producer = Producer(backend, settings.queue_set())
    sent = measure.paced(producer, rate, total=int(rate * seconds), per_second=PUBLISHES_PER_SECOND)
    backend.close()
    return sent


def _child(*args: str) -> int:
    """Run ``produce`` (or a fill) in a fresh process: the worker's cores are shared."""
    import subprocess  # noqa: PLC0415

    env = {**os.environ, "PYTHONPATH": procs.plugin_path()}
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout.split()[-1])


def waits(run: procs.Run) -> list[tuple[float, float]]:
    """(when reported, wait in ms) of every job reported so far."""
    return [(when, int(line) / 1000) for when, line in list(run.lines) if line.isdigit()]


def _until(run: procs.Run, count: int, timeout: float) -> None:
    run.wait_until(lambda: len(waits(run)) >= count, timeout=timeout)


def running_rate(path: Path, jobs: int) -> float:
    """Jobs a second of a worker on ``jobs`` queued no-op jobs, first job to last."""
    _child("fill", str(path), str(jobs))
    run = worker(path)
    try:
        _until(run, jobs, 600)
    finally:
        run.stop()
    times = sorted(when for when, _ in waits(run))
    return (len(times) - 1) / (times[-1] - times[0])


def paced(path: Path, rate: float, seconds: float) -> dict[str, float]:
    """p50/p99/max enqueue-to-start (ms) at ``rate`` into a worker already consuming."""
    run = worker(path)
    try:
        _child("produce", str(path), "1", "1")  # the warm-up job: the worker is consuming
        _until(run, 1, 60)
        started = run.cpu_seconds()  # launch left out: the CPU of the paced jobs alone
        sent = _child("produce", str(path), str(rate), str(seconds))
        _until(run, sent + 1, 120)
        cpu = run.cpu_seconds() - started
    finally:
        run.stop()
    found = sorted(wait for _, wait in waits(run)[1:])
    return {
        "rate": rate,
        "jobs": len(found),
        "p50": statistics.median(found),
        "p99": found[max(0, math.ceil(len(found) * 0.99) - 1)],
        "max": found[-1],
        "cpu_us": cpu / len(found) * 1e6,
    }


def _fill(path: Path, jobs: int) -> int:
    from queuey_bench_handlers import Stamped  # noqa: PLC0415

    from queuey_core import Producer  # noqa: PLC0415
    from queuey_core.backends.open import open_backend  # noqa: PLC0415
    from queuey_core.settings import load_settings  # noqa: PLC0415

    settings, _ = load_settings([path])
    backend = open_backend(settings.broker)
    producer = Producer(backend, settings.queue_set())
    for start in range(0, jobs, 1000):
        producer.enqueue_many([Stamped(sent=0.0) for _ in range(min(1000, jobs - start))])
    backend.close()
    return jobs


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        what, path, *rest = sys.argv[2:]
        if what == "fill":
            print(_fill(Path(path), int(rest[0])))
        else:
            print(produce(Path(path), float(rest[0]), float(rest[1])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["rabbitmq", "sqlite", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument(
        "--sqlite-query", default="", help="The SQLite URL's options, e.g. '?poll=0.005'."
    )
    args = parser.parse_args()
    procs.compile_sources()
    backends = ["rabbitmq", "sqlite"] if args.backend == "both" else [args.backend]
    print(f"load average before: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(
        "| backend | round | running rate (jobs/s) | fed at | jobs/s | p50 (ms) | p99 (ms) "
        "| max (ms) | worker CPU per job (us) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n in range(1, args.rounds + 1):
        for backend in backends:
            if backend == "rabbitmq":
                procs.purge("bench")
            path = config(backend, args.sqlite_query)
            rate = running_rate(path, args.jobs)
            for share in (0.5, 0.8):
                got: dict[str, Any] = paced(path, rate * share, args.seconds)
                label = backend + args.sqlite_query * (backend == "sqlite")
                print(
                    f"| {label} | {n} | {rate:,.0f} | {share} | {got['rate']:,.0f} "
                    f"| {got['p50']:.1f} | {got['p99']:.1f} | {got['max']:.1f} "
                    f"| {got['cpu_us']:.0f} |",
                    flush=True,
                )
    print(f"load average after: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
