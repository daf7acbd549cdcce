"""What counting costs on the embedded backend at a large backlog (issue 41).

    .venv/bin/python bench/sqlite_counts.py [--jobs 1000000] [--held 1000] [--file PATH]
        [--rounds 20] [--cli-rounds 5]

Fills a file with ``--jobs`` ready jobs on one queue (``Producer.enqueue_many``, batches
of 10,000: the fast path) and ``--held`` jobs delayed an hour, unless ``--file`` names one
that exists already (so the same file can be measured by two versions of queuey: fill it
with the older, open it with the newer, and the open includes the upgrade). Then times
the open, ``inspect`` (what the dashboard's queue page and the metrics call) over
``--rounds``, and ``queuey queues --json`` as a process over ``--cli-rounds``, beside the
same command on an empty file (the process's own start, which no count changes). Prints
one JSON document; medians with min and max. Run by hand, never as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

from queuey_core import Job, Producer, QueueConfig, QueueSet
from queuey_core.backends.sqlite import SqliteBackend

QUEUE = "bench"
QUEUES = QueueSet([QueueConfig(QUEUE, prefetch=16)])
BATCH = 10_000


class Tick(Job):
    """A job of a few dozen bytes, as a backlog of small jobs would hold."""

    NAME: ClassVar[str] = "bench.tick"
    QUEUE: ClassVar[str] = QUEUE
    n: int


def fill(path: Path, jobs: int, held: int) -> dict[str, float]:
    """Put ``jobs`` ready and ``held`` delayed jobs in a new file; the rate."""
    backend = SqliteBackend(f"sqlite:///{path}")
    backend.declare(list(QUEUES.values()))
    producer = Producer(backend, QUEUES)
    began = time.perf_counter()
    for count, delay in ((jobs, None), (held, 3600.0)):
        for start in range(0, count, BATCH):
            batch = [Tick(n=n) for n in range(start, min(count, start + BATCH))]
            producer.enqueue_many(batch, delay=delay)
    took = time.perf_counter() - began
    backend.close()
    return {"fill (s)": round(took, 1), "fill (jobs/s)": round((jobs + held) / took)}


def version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT max(version) FROM queuey_schema").fetchone()[0])
    finally:
        conn.close()


def spread(values: list[float]) -> dict[str, float]:
    """Median, min and max of ``values`` (seconds), in milliseconds."""
    return {
        "median": round(statistics.median(values) * 1000, 2),
        "min": round(min(values) * 1000, 2),
        "max": round(max(values) * 1000, 2),
    }


def cli_times(path: Path, rounds: int) -> list[float]:
    """Wall time of ``queuey queues --json`` on ``path``, each a process of its own."""
    config = path.with_suffix(".toml")
    config.write_text(f'[broker]\nurl = "sqlite:///{path}"\n[queues.{QUEUE}]\nprefetch = 16\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEY_")}
    env["QUEUEY_CONFIG"] = str(config)
    queuey = Path(sys.executable).parent / "queuey"
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        done = subprocess.run(
            [str(queuey), "queues", "--json"], env=env, capture_output=True, check=False
        )
        times.append(time.perf_counter() - began)
        if done.returncode != 0:
            raise SystemExit(f"queuey queues failed: {done.stderr.decode()[:500]}")
    return times


def measure(path: Path, rounds: int, cli_rounds: int) -> dict[str, Any]:
    """Open ``path`` (timed: an older file is upgraded then), then time the counts."""
    found: dict[str, Any] = {"schema version found": version(path)}
    began = time.perf_counter()
    backend = SqliteBackend(f"sqlite:///{path}")
    found["open (ms)"] = round((time.perf_counter() - began) * 1000, 1)
    found["schema version after open"] = version(path)
    try:
        seen = backend.inspect([QUEUE])
        counted = seen.queues[QUEUE]
        found["counts"] = {"queue": counted._asdict() if counted else None, "held": seen.held}
        times = []
        for _ in range(rounds):
            began = time.perf_counter()
            backend.inspect([QUEUE])
            times.append(time.perf_counter() - began)
        found["inspect (ms)"] = spread(times)
    finally:
        backend.close()
    found["queuey queues --json (ms)"] = spread(cli_times(path, cli_rounds))
    with tempfile.TemporaryDirectory() as empty:
        blank = Path(empty) / "empty.db"
        SqliteBackend(f"sqlite:///{blank}").close()
        found["queuey queues --json, empty file (ms)"] = spread(cli_times(blank, cli_rounds))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--held", type=int, default=1_000)
    parser.add_argument("--file", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cli-rounds", type=int, default=5)
    args = parser.parse_args()
    path = args.file or Path(tempfile.mkdtemp(prefix="queuey-counts-bench-")) / "q.db"
    result: dict[str, Any] = {"file": str(path)}
    if not path.exists():
        result.update(fill(path, args.jobs, args.held))
    result.update(measure(path, args.rounds, args.cli_rounds))
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
