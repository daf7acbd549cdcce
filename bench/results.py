"""What recording costs the worker, and how soon ``wait()`` returns: the job store bench.

    .venv/bin/python bench/results.py [--rounds 3] [--jobs 3000] [--work-ms 0]
        [--pg URL | --no-pg] [--kinds discard,sqlite,sqlite-file,postgres]

A fresh process a run: the embedded backend (a SQLite file) and one worker of 8 job
threads running a handler that returns a small result. Each round runs, in an order that
rotates, recording off, recording into the broker's own file (the default on the
embedded backend) and recording into PostgreSQL (a schema of its own, dropped after);
``--kinds`` adds ``discard`` (a store that keeps nothing: the hooks and the writer alone)
and ``sqlite-file`` (a SQLite file of its own).
A run enqueues ``--jobs`` jobs first, then times the worker from its start until every
job is settled *and* every record written (the writer's lag is in the figure). Reported:
jobs/s on the wall clock and per CPU second of the process (every thread: the writer's
and SQLite's too), each with its ratio to "off" in the same round; the medians over
rounds. Then ``wait()``: a job whose handler notes when it ends, and the time from that
end to ``wait_for_record`` returning, over 50 jobs (median, 95th percentile, most), on
the broker's file and (unless ``--no-pg``) on PostgreSQL from a writer process.
A kind ``STORE+process`` (``postgres+process``) writes from a writer process
(``[results] writer``), whose CPU time is counted with the worker's.

The target (issue 21): recording costs at most 15% of throughput; wait() returns within
50 ms of the job's end. Writes bench/RESULTS_STORE.md (RESULTS_STORE_1ms.md with
``--work-ms 1``: handlers that spend a millisecond of CPU each, a job that does
something). The machine's load (``uptime``) is written beside the figures: re-run it on
a quiet machine for figures to quote.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar

import procs  # bench/, this script's folder

from queuey_core import Handler, Job, JobContext, Producer, QueueConfig, QueueSet, Worker
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.results import (
    DEFAULT_RETENTION,
    JobRecorder,
    JobStore,
    open_job_store,
    wait_for_record,
)
from queuey_core.results.writer_process import WriterProcess

HERE = Path(__file__).parent
QUEUE = "bench"
THREADS = 8


class Work(Job):
    NAME: ClassVar[str] = "bench.results"
    QUEUE: ClassVar[str] = QUEUE
    n: int


QUEUES = QueueSet([QueueConfig(QUEUE, prefetch=THREADS * 2)])


def spin(seconds: float) -> None:
    """Work the CPU for ``seconds`` (a handler that computes, not one that sleeps)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class Discard:
    """A store that keeps nothing: what the hooks and the writer cost, without a database."""

    def write(self, events: object) -> None:
        """Take a batch and drop it."""

    def get(self, job_id: object) -> None:
        """Nothing is kept."""

    def search(self, **filters: object) -> list[Any]:
        """Nothing is kept."""
        return []

    @property
    def closed(self) -> bool:
        """Never closed."""
        return False

    def close(self) -> None:
        """Nothing to close."""


def run(
    jobs: int, store_url: str | None, db: Path, work: float = 0.0, writer: str = "thread"
) -> dict[str, float]:
    """One timed run; the figures of it. ``writer="process"``: the store is written from
    a process of its own (:class:`WriterProcess`), whose CPU time is counted with the
    worker's."""
    backend = SqliteBackend(f"sqlite:///{db}")
    producer = Producer(backend, QUEUES)
    producer.enqueue_many([Work(n=i) for i in range(jobs)])
    done = threading.Semaphore(0)

    def handle(job: Work, ctx: JobContext) -> dict[str, int]:
        if work:
            spin(work)
        done.release()
        return {"n": job.n, "square": job.n * job.n}

    store: JobStore | None = (
        Discard() if store_url == "discard" else open_job_store(store_url) if store_url else None
    )
    recorder: JobRecorder | None
    if store is not None and writer == "process":
        # The store stays open here (made its tables; drops its schema after).
        recorder = JobRecorder(WriterProcess(str(store_url), retention=DEFAULT_RETENTION))
    else:
        recorder = JobRecorder(store) if store is not None else None
    worker = Worker(
        backend,
        QUEUES,
        [Handler(Work, handle)],
        concurrency=THREADS,
        hooks=[recorder] if recorder is not None else [],
    )
    cpu0, wall0 = time.process_time(), time.perf_counter()
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    for _ in range(jobs):
        done.acquire()
    if recorder is not None:
        recorder.flush(120)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    children0 = _children_cpu()
    worker.handle.shutdown()
    thread.join(60)
    if recorder is not None:
        recorder.close()  # a writer process ends here: its CPU time is the children's
    own_cpu = cpu
    cpu += _children_cpu() - children0
    unrecorded = recorder.unrecorded if recorder is not None else 0
    per_write = recorder.written / max(1, recorder.batches) if recorder is not None else 0.0
    backend.close()
    if store is not None:
        drop = getattr(store, "drop", None)
        if drop is not None:
            drop()
        store.close()
    return {
        "wall_rate": jobs / wall,
        "cpu_rate": jobs / cpu,
        "own_cpu_rate": jobs / own_cpu,
        "unrecorded": unrecorded,
        "events_per_write": per_write,
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_apart(
    jobs: int, store_url: str | None, db: Path, work: float, writer: str
) -> dict[str, float]:
    """:func:`run` in a fresh interpreter: runs in one process carry its collector's
    generations, its threads and its allocator from one to the next, which moved the
    rate of the same kind by a third from round to round."""
    one = json.dumps(
        {"jobs": jobs, "url": store_url, "db": str(db), "work": work, "writer": writer}
    )
    return procs.json_from([sys.executable, __file__, "--one", one], "a run")


def wait_latency(samples: int, db: Path, url: str | None = None) -> tuple[float, list[float]]:
    """Seconds from each job's end (its handler's return) to wait_for_record returning:
    recording into the broker's file from a thread, or into ``url`` (PostgreSQL) from a
    writer process. The first job, run as the worker starts (its writer process too),
    is returned apart: ``(first, the samples after it)``."""
    backend = SqliteBackend(f"sqlite:///{db}")
    store = open_job_store(url or f"sqlite:///{db}")
    recorder = JobRecorder(WriterProcess(url, retention=DEFAULT_RETENTION) if url else store)
    ended: dict[uuid.UUID, float] = {}

    def handle(job: Work, ctx: JobContext) -> None:
        time.sleep(0.02)  # a job that takes a moment, so wait() is already waiting
        ended[ctx.job_id] = time.perf_counter()

    worker = Worker(backend, QUEUES, [Handler(Work, handle)], concurrency=2, hooks=[recorder])
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    producer = Producer(backend, QUEUES)
    lags = []
    for i in range(samples + 1):
        job_id = producer.enqueue(Work(n=i))
        wait_for_record(store, job_id, timeout=30)
        lags.append(time.perf_counter() - ended[job_id])
    worker.handle.shutdown()
    thread.join(60)
    backend.close()
    drop = getattr(store, "drop", None)
    if url and drop is not None:
        drop()
    store.close()
    return lags[0], lags[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--no-pg", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument(
        "--kinds",
        default="",
        help="Comma-separated, from off, discard, sqlite, sqlite-file (a file of its own), "
        "postgres (default: off, sqlite, postgres); '+process' after a store writes it "
        "from a process of its own (postgres+process)",
    )
    parser.add_argument(
        "--work-ms", type=float, default=0.0, help="CPU time each handler spends (default 0)"
    )
    args = parser.parse_args()
    if args.one:
        one = json.loads(args.one)
        measured = run(
            one["jobs"], one["url"], Path(one["db"]), one["work"], one.get("writer", "thread")
        )
        print(json.dumps(measured))
        return
    tmp = Path(tempfile.mkdtemp(prefix="queuey-results-bench-"))
    kinds = ["off", "sqlite"] + ([] if args.no_pg else ["postgres"])
    if args.kinds:
        kinds = ["off"] + [k for k in args.kinds.split(",") if k and k != "off"]
    figures: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    ratios: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds if k != "off"}
    load = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    try:
        for r in range(args.rounds):
            order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]
            got: dict[str, dict[str, float]] = {}
            for kind in order:
                db = tmp / f"r{r}-{kind}.db"
                store, _, writer = kind.partition("+")
                url = {
                    "off": None,
                    "discard": "discard",
                    "sqlite": f"sqlite:///{db}",
                    "sqlite-file": f"sqlite:///{tmp / f'r{r}-store.db'}",
                    "postgres": f"{args.pg}?schema=queuey_bench_{uuid.uuid4().hex[:10]}",
                }[store]
                got[kind] = run_apart(args.jobs, url, db, args.work_ms / 1000, writer or "thread")
                figures[kind].append(got[kind])
                print(f"round {r + 1} {kind}: {got[kind]}", file=sys.stderr)
            for kind, kept in ratios.items():
                kept.append(
                    (
                        got[kind]["wall_rate"] / got["off"]["wall_rate"],
                        got[kind]["cpu_rate"] / got["off"]["cpu_rate"],
                    )
                )
        lags = {"the broker's file, a writer thread": wait_latency(50, tmp / "wait.db")}
        if not args.no_pg:
            pg = f"{args.pg}?schema=queuey_bench_{uuid.uuid4().hex[:10]}"
            lags["PostgreSQL, a writer process"] = wait_latency(50, tmp / "w2.db", pg)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(args, load, figures, ratios, lags)


def report(
    args: Any,
    load: str,
    figures: dict[str, list[dict[str, float]]],
    ratios: dict[str, list[tuple[float, float]]],
    lags: dict[str, tuple[float, list[float]]],
) -> None:
    med = statistics.median
    lines = [
        "# Job store: what recording costs (bench/results.py)",
        "",
        f"`{' '.join(sys.argv)}`: {args.rounds} rounds of {args.jobs} jobs, {THREADS} job "
        f"threads, embedded backend, handlers spending {args.work_ms:g} ms of CPU. "
        f"Load when it started: `{load}` "
        f"({os.cpu_count()} CPUs). Medians over rounds; ratios are to recording off, "
        "within each round (1.00 = no cost).",
        "",
        "| recording | jobs/s (wall) | ratio | jobs per CPU s | ratio | events per write "
        "| events lost |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, runs in figures.items():
        wall = med(f["wall_rate"] for f in runs)
        cpu = med(f["cpu_rate"] for f in runs)
        lost = sum(int(f["unrecorded"]) for f in runs)
        if kind == "off":
            lines.append(f"| off | {wall:,.0f} | 1.00 | {cpu:,.0f} | 1.00 | - | - |")
        else:
            rw = med(r[0] for r in ratios[kind])
            rc = med(r[1] for r in ratios[kind])
            per = med(f["events_per_write"] for f in runs)
            lines.append(
                f"| {kind} | {wall:,.0f} | {rw:.2f} | {cpu:,.0f} | {rc:.2f} | {per:.0f} | {lost} |"
            )
    lines.append("")
    for where, (first, unsorted) in lags.items():
        got = sorted(unsorted)
        p95 = got[int(len(got) * 0.95) - 1]
        lines.append(
            f"`wait()` after the job's end, {len(got)} jobs, {where}: median "
            f"{med(got) * 1000:.1f} ms, 95th percentile {p95 * 1000:.1f} ms, most "
            f"{got[-1] * 1000:.1f} ms (target: within 50 ms); the first job, as the "
            f"worker started: {first * 1000:.1f} ms."
        )
    lines.append("")
    text = "\n".join(lines)
    name = "RESULTS_STORE.md" if not args.work_ms else f"RESULTS_STORE_{args.work_ms:g}ms.md"
    (HERE / name).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
