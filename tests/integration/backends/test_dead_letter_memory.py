"""Listing 100,000 dead letters in bounded memory (issue 41): ``queuey dlq list --json
--limit 100000`` as its own process, on RabbitMQ without a job store (in the test vhost)
and on the embedded backend, with its peak resident memory measured.

Before issue 41 a page was built whole and rendered whole: 6.4 GB and two minutes for
100,000 on either backend. Slow (the fill and the listing take 20-60 s on 2 cores).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pika
import pytest

from queuey_core import Envelope
from queuey_core import QueueConfig
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq import topology
from queuey_core.backends.rabbitmq.messages import properties
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite import dead
from tests.conftest import require_broker
from tests.harness import AMQP_URL

N = 100_000

#: The bound the issue sets for listing 100,000.
PEAK_MB = 150

QUEUEY = str(Path(sys.executable).parent / "queuey")
TIME = "/usr/bin/time"

pytestmark = pytest.mark.slow


def envelope(queue: str, i: int) -> Envelope:
    return Envelope(
        job_id=uuid.uuid4(),
        job_type="greet",
        queue=queue,
        attempt=3,
        enqueued_at=int(time.time() * 1000),
        payload={"name": f"user-{i}", "note": "x" * 200},
    )


def fill_rabbit(queue: str) -> list[str]:
    """N dead letters in ``<queue>.dlq``, published straight with pika, with the headers
    a worker's dead letters carry; their ids, in order."""
    backend = RabbitMQBackend(AMQP_URL)
    backend.declare([QueueConfig(queue)])  # the queue and its .dlq, as a worker does
    backend.close()
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        ch = conn.channel()
        dlq = topology.dead_letter_name(queue)
        ids = []
        for i in range(N):
            env = envelope(queue, i)
            headers = topology.dead_letter_headers(
                "fatal error: disk full", queue=queue, attempt=3, dead_at=env.enqueued_at
            )
            ch.basic_publish("", dlq, env.encode(), properties(env, headers))
            ids.append(str(env.job_id))
        deadline = time.monotonic() + 120
        while ch.queue_declare(dlq, passive=True).method.message_count < N:
            assert time.monotonic() < deadline, "the broker did not take them all"
            time.sleep(0.2)
    finally:
        conn.close()
    return ids


def fill_sqlite(db: Path, queue: str) -> list[str]:
    """N dead letters of ``queue`` in the file, as the worker writes them; their ids."""
    SqliteBackend(f"sqlite:///{db}").declare([QueueConfig(queue)])
    ids = []
    with sqlite3.connect(db) as conn:
        for i in range(N):
            env = envelope(queue, i)
            ids.append(str(env.job_id))
            row = dead.Dead(queue, ids[-1], "fatal error: disk full", 1, 3, queue, True,
                            env.encode())  # fmt: skip
            dead.add(conn, row)
    return ids


def listed_all(tmp_path: Path, url: str, queue: str, ids: list[str]) -> str:
    """``dlq list --json --limit N`` of ``queue`` on ``url`` as its own process: every
    one of ``ids`` listed, in order, under :data:`PEAK_MB`; its figures. Through
    /usr/bin/time, which forks it: Linux keeps a process's peak across exec, so one
    forked from this process would report at least this process's size."""
    config = tmp_path / "queuey.toml"
    config.write_text(f'[broker]\nurl = "{url}"\n\n[queues.{queue}]\nprefetch = 10\n')
    out = tmp_path / "out.json"
    command = [QUEUEY, "--config", str(config), "dlq", "list", "--queue", queue, "--json"]
    started = time.monotonic()
    with out.open("wb") as sink:
        done = subprocess.run(
            [TIME, "-f", "maxrss-kb %M", *command, "--limit", str(N)],
            stdout=sink,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            timeout=600,
            check=False,
        )
    wall = time.monotonic() - started
    lines = done.stderr.decode().strip().splitlines()
    peak = int(lines.pop().split()[-1]) / 1024 if lines and "maxrss-kb" in lines[-1] else -1.0
    assert done.returncode == 0, "\n".join(lines)
    got = [d["job_id"] for d in json.loads(out.read_bytes())]
    assert got == ids, "all of them, in the order they died"
    assert peak < PEAK_MB, f"peak {peak:.0f} MB listing {N:,}"
    return f"dlq list --json --limit {N:,}: {wall:.1f} s, {peak:.0f} MB"


@pytest.fixture
def queue() -> str:
    return f"dlmem_{uuid.uuid4().hex[:8]}"


def test_listing_100000_on_rabbitmq_streams_in_bounded_memory_and_keeps_them_all(
    tmp_path: Path, queue: str, figures: list[str]
) -> None:
    require_broker()
    ids = fill_rabbit(queue)
    try:
        figures.append(f"{listed_all(tmp_path, AMQP_URL, queue, ids)} (RabbitMQ)")
        backend = RabbitMQBackend(AMQP_URL)
        try:
            first = backend.dead_letter_page(queue, limit=100)
            assert (first.total, [d.handle for d in first.letters]) == (N, ids[:100])
        finally:
            backend.close()
    finally:
        conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        for name in (queue, topology.dead_letter_name(queue)):
            conn.channel().queue_delete(name)
        conn.close()


def test_listing_100000_on_sqlite_streams_in_bounded_memory(
    tmp_path: Path, queue: str, figures: list[str]
) -> None:
    db = tmp_path / "q.db"
    ids = fill_sqlite(db, queue)
    figures.append(f"{listed_all(tmp_path, f'sqlite:///{db}', queue, ids)} (SQLite)")
    backend = SqliteBackend(f"sqlite:///{db}")
    try:
        assert backend.dead_letter_page(queue, limit=1).total == N
    finally:
        backend.close()
