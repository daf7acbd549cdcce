"""Dead letters at scale (issue 28): what each ``queuey dlq`` command costs as the
dead-letter queue grows, on RabbitMQ (without a job store: the queue is scanned; with a
SQLite or PostgreSQL job store: its table is queried) and on the embedded SQLite backend.

For each backend and size (default 1,000 and 100,000) it fills one dead-letter queue
with dead letters as a worker writes them (a few hundred bytes each, 1 in 100 of job
type ``shout``, 1 in 7 with reason "disk full"), then runs each command as a separate
``queuey`` process and records its wall time, its CPU time (user + system, from
``wait4``) and its peak resident memory (``/usr/bin/time``'s ``%M``). It writes
``bench/DLQ.md`` (and prints it), with ``uptime``'s load beside the figures: on a shared
machine compare the sizes of one run with each other, not with another run.

    .venv/bin/python bench/dlq.py                              # every kind, 1k and 100k
    .venv/bin/python bench/dlq.py --backend rabbitmq+sqlite --sizes 1000
    .venv/bin/python bench/dlq.py --url amqp://guest:guest@127.0.0.1:5672/q-dlq

With a job store, the dead letters are first published to ``bench_dlq.dlq`` as an older
version left them and imported (``queuey dlq import``, timed), then every command runs
on the table; ``purge`` runs on a table refilled directly, as the worker writes it.
The RabbitMQ queues it makes (``bench_dlq``, ``bench_dlq.dlq``), the SQLite files and
the PostgreSQL schema are deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pika

from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq.dead_letter_rows import row_of
from queuey_core.backends.rabbitmq.dead_letters import dead_letter_pub
from queuey_core.backends.sqlite import SqliteBackend, dead
from queuey_core.envelope import Envelope
from queuey_core.queues import QueueConfig
from queuey_core.results.dead_letter_table import open_dead_letter_table

#: The job store of each kind that has one (the PostgreSQL schema is the bench's own).
STORES = {
    "rabbitmq+sqlite": "sqlite:///{tmp}/store.db",
    "rabbitmq+postgres": "postgresql://postgres@127.0.0.1:5432/test?schema=bench_dlq_{run}",
}

QUEUE = "bench_dlq"
QUEUEY = str(Path(sys.executable).parent / "queuey")
HERE = Path(__file__).parent


def envelope(i: int) -> Envelope:
    return Envelope(
        job_id=uuid.uuid4(),
        job_type="shout" if i % 100 == 0 else "greet",
        queue=QUEUE,
        attempt=3,
        enqueued_at=int(time.time() * 1000),
        payload={"name": f"user-{i}", "note": "x" * 200},
    )


def reason(i: int) -> str:
    return "fatal error: disk full" if i % 7 == 0 else f"max attempts (3) reached: ValueError {i}"


def fill_rabbit(url: str, n: int) -> list[str]:
    """``n`` dead letters in ``bench_dlq.dlq``, as the worker publishes them; their ids."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    for name in (QUEUE, f"{QUEUE}.dlq"):
        ch.queue_delete(name)
    conn.close()
    backend = RabbitMQBackend(url)
    backend.declare([QueueConfig(QUEUE)])  # as a worker declares them
    backend.close()
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ids = []
    for i in range(n):
        env = envelope(i)
        pub = dead_letter_pub(env, reason(i))
        ch.basic_publish(pub.exchange, pub.routing_key, pub.body, pub.props)
        ids.append(str(env.job_id))
    while ch.queue_declare(f"{QUEUE}.dlq", passive=True).method.message_count < n:
        time.sleep(0.2)
    conn.close()
    return ids


def fill_sqlite(db: Path, n: int) -> list[str]:
    """``n`` dead letters of ``bench_dlq`` in the file, as the worker writes them."""
    db.unlink(missing_ok=True)
    SqliteBackend(f"sqlite:///{db}").declare([QueueConfig(QUEUE)])
    ids = []
    with sqlite3.connect(db) as conn:
        for i in range(n):
            env = envelope(i)
            ids.append(str(env.job_id))
            row = dead.Dead(QUEUE, ids[-1], reason(i), int(time.time() * 1000), 3, QUEUE, True,
                            env.encode())  # fmt: skip
            dead.add(conn, row)
    return ids


def fill_table(store: str, n: int) -> None:
    """``n`` dead letters of ``bench_dlq`` in the store's table, as the worker writes them."""
    table = open_dead_letter_table(store)
    table.purge(QUEUE)
    batch = []
    for i in range(n):
        pub = dead_letter_pub(envelope(i), reason(i))
        batch.append(row_of(QUEUE, pub.props, pub.body))
        if len(batch) == 1000:
            table.insert(batch)
            batch = []
    table.insert(batch)
    table.close()


def empty_queue(kind: str, url: str, db: Path) -> None:
    """Drop what a requeue put back on ``bench_dlq`` (the bench has no worker)."""
    if kind.startswith("rabbitmq"):
        conn = pika.BlockingConnection(pika.URLParameters(url))
        conn.channel().queue_purge(QUEUE)
        conn.close()
    else:
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM queuey_messages WHERE queue = ?", (QUEUE,))


def library(kind: str, url: str, db: Path, ids: list[str]) -> dict[str, Figure]:
    """The library calls alone, in this process (what the dashboard pays per click)."""
    backend = (
        RabbitMQBackend(url) if kind.startswith("rabbitmq") else SqliteBackend(f"sqlite:///{db}")
    )
    if isinstance(backend, RabbitMQBackend) and kind in STORES:
        backend.keep_dead_letters_in(open_dead_letter_table(STORE["url"]))
    n = len(ids)
    calls = {
        "[library] page, first": lambda: backend.dead_letter_page(QUEUE),
        "[library] page, middle": lambda: backend.dead_letter_page(QUEUE, offset=n // 2),
        "[library] page, last": lambda: backend.dead_letter_page(QUEUE, offset=max(0, n - 100)),
        "[library] page, job type (1%)": lambda: backend.dead_letter_page(QUEUE, job_type="shout"),
        "[library] get, middle": lambda: backend.get_dead_letter(QUEUE, ids[n // 2]),
        "[library] get, last": lambda: backend.get_dead_letter(QUEUE, ids[-1]),
    }
    figures = {}
    try:
        for name, call in calls.items():
            wall, cpu = time.monotonic(), time.process_time()
            call()
            figures[name] = Figure(time.monotonic() - wall, time.process_time() - cpu, 0, True)
    finally:
        backend.close()
    return figures


def drop_schema(store: str) -> None:
    """Drop the bench's PostgreSQL schema."""
    import psycopg  # noqa: PLC0415 - the postgres extra

    base, _, schema = store.partition("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@dataclass
class Figure:
    wall: float
    cpu: float
    peak_mb: float
    ok: bool


#: The config file of the backend being measured (set per backend by main).
CONFIG: dict[str, Path] = {}

#: The job store of the kind being measured, when it has one.
STORE: dict[str, str] = {}


def run_cli(args: list[str]) -> Figure:
    """One ``queuey`` process: wall, CPU and peak memory; stdout thrown away."""
    started = time.monotonic()
    # Through /usr/bin/time, which forks the command: Linux keeps a process's peak RSS
    # across exec, so a command forked from this process (tens of MB after a fill) would
    # report at least this process's size as its own peak.
    proc = subprocess.Popen(
        ["/usr/bin/time", "-f", "maxrss-kb %M", QUEUEY, "--config", str(CONFIG["path"]), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    err_bytes = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    lines = err_bytes.decode().strip().splitlines()
    peak_kb = float(lines.pop().split()[-1]) if lines and lines[-1].startswith("maxrss-kb") else 0
    err = "\n".join(line for line in lines if not line.startswith("Command exited"))
    ok = os.waitstatus_to_exitcode(status) == 0
    if not ok:
        print(f"  ! {' '.join(args)}: {err.strip()[:300]}", file=sys.stderr)
    return Figure(wall, usage.ru_utime + usage.ru_stime, peak_kb / 1024, ok)


def measure(kind: str, n: int, url: str, db: Path) -> dict[str, Figure]:
    fill = (
        (lambda: fill_rabbit(url, n))
        if kind.startswith("rabbitmq")
        else (lambda: fill_sqlite(db, n))
    )
    started = time.monotonic()
    if kind in STORES:
        fill_table(STORE["url"], 0)  # empty
    ids = fill()
    print(f"{kind} {n}: filled in {time.monotonic() - started:.1f}s", file=sys.stderr)
    q = ["--queue", QUEUE]
    last_page = max(0, n - 100)
    figures: dict[str, Figure] = {}
    if kind in STORES:
        figures["import (all of bench_dlq.dlq, once)"] = run_cli(["dlq", "import", *q])
    figures.update(library(kind, url, db, ids))
    steps: list[tuple[str, list[str]]] = [
        ("(start-up alone: queuey dlq --help)", ["dlq", "--help"]),
        ("list, first page (100)", ["dlq", "list", *q]),
        ("list, middle page", ["dlq", "list", *q, "--offset", str(n // 2)]),
        ("list, last page", ["dlq", "list", *q, "--offset", str(last_page)]),
        ("list, filtered by job type (1%)", ["dlq", "list", *q, "--job-type", "shout"]),
        ("list, filtered by reason (1/7)", ["dlq", "list", *q, "--reason", "DISK FULL"]),
        ("list --all --json (everything)", ["dlq", "list", *q, "--all", "--json"]),
        ("show, first", ["dlq", "show", *q, ids[0]]),
        ("show, middle", ["dlq", "show", *q, ids[n // 2]]),
        ("show, middle again", ["dlq", "show", *q, ids[n // 2]]),
        ("show, last", ["dlq", "show", *q, ids[-1]]),
        ("requeue one, middle", ["dlq", "requeue", *q, ids[n // 2]]),
        ("delete one, middle", ["dlq", "delete", *q, ids[n // 2 + 1]]),
        ("requeue --all", ["dlq", "requeue", *q, "--all"]),
    ]
    for name, args in steps:
        figures[name] = run_cli(args)
        print(f"  {name}: {figures[name].wall:.2f}s", file=sys.stderr)
    empty_queue(kind, url, db)
    if kind in STORES:
        fill_table(STORE["url"], n)
    else:
        fill()
    figures["purge"] = run_cli(["dlq", "purge", *q, "--yes"])
    print(f"  purge: {figures['purge'].wall:.2f}s", file=sys.stderr)
    return figures


def table(kind: str, sizes: list[int], results: dict[int, dict[str, Figure]]) -> list[str]:
    head = " | ".join(f"{n:,}: wall s / CPU s / peak MB" for n in sizes)
    lines = [f"### {kind}", "", f"| command | {head} |", "|---" * (len(sizes) + 1) + "|"]
    for name in results[sizes[0]]:
        cells = []
        for n in sizes:
            f = results[n][name]
            peak = f"{f.peak_mb:.0f}" if f.peak_mb else "-"
            cells.append(f"{f.wall:.2f} / {f.cpu:.2f} / {peak}" + ("" if f.ok else " !"))
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    kinds_known = ["rabbitmq", *STORES, "sqlite"]
    parser.add_argument("--backend", choices=[*kinds_known, "all"], default="all")
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument(
        "--url",
        default=os.environ.get("QUEUEY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/q-dlq"),
    )
    parser.add_argument("--out", default=str(HERE / "DLQ.md"))
    opts = parser.parse_args()
    sizes = [int(s) for s in opts.sizes.split(",")]
    kinds = kinds_known if opts.backend == "all" else [opts.backend]
    tmp = Path(tempfile.mkdtemp(prefix="queuey-bench-dlq-"))
    db = tmp / "bench.db"
    load_before = os.getloadavg()
    report = [
        "# Dead letters at scale",
        "",
        "Written by `bench/dlq.py`: each command is a `queuey` process of its own against a "
        "dead-letter queue of the size in the column head (dead letters of ~450 bytes as a "
        "worker writes them). Wall time, CPU time (user + system) and peak resident memory "
        "of that process. A `!` marks a command that failed. The `[library]` rows time the "
        "backend call alone in one long-lived process, as the dashboard makes it (no "
        "start-up; no memory figure). `rabbitmq` keeps its dead letters in `<queue>.dlq` "
        "(no job store: every command reads the queue); `rabbitmq+sqlite` and "
        "`rabbitmq+postgres` keep them in the job store's table (`[results] url`); the "
        "import row is the one-time move of a backlog left in `<queue>.dlq`.",
        "",
    ]
    try:
        for kind in kinds:
            url = opts.url if kind.startswith("rabbitmq") else f"sqlite:///{db}"
            CONFIG["path"] = tmp / f"{kind}.toml"
            results_section = ""
            if kind in STORES:
                STORE["url"] = STORES[kind].format(tmp=tmp, run=uuid.uuid4().hex[:8])
                results_section = f'[results]\nurl = "{STORE["url"]}"\n\n'
            CONFIG["path"].write_text(
                f'[broker]\nurl = "{url}"\n\n{results_section}[queues.{QUEUE}]\nprefetch = 10\n'
            )
            results = {n: measure(kind, n, opts.url, db) for n in sizes}
            report += table(kind, sizes, results)
            if kind == "rabbitmq+postgres":
                drop_schema(STORE["url"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if any(kind.startswith("rabbitmq") for kind in kinds):
            conn = pika.BlockingConnection(pika.URLParameters(opts.url))
            ch = conn.channel()
            for name in (QUEUE, f"{QUEUE}.dlq"):
                ch.queue_delete(name)
            conn.close()
    load_after = os.getloadavg()
    report.append(
        f"Load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; "
        f"after: {', '.join(f'{x:.2f}' for x in load_after)}; {os.cpu_count()} cores; "
        f"run at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."
    )
    text = "\n".join(report) + "\n"
    Path(opts.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
