"""RabbitMQ with its limits' state in PostgreSQL, the store cut off for 10 s while
limited jobs flow: they wait (fail closed), then all run, within their limit, each
once, no attempt spent, nothing dead-lettered (docs/flow-control.md)."""

from __future__ import annotations

import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import ClassVar

import psycopg
import pytest

from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Worker
from queuey_core.flow.limit_gate import LimitGate
from queuey_core.flow.limit_setup import limit_state_for
from queuey_core.flow.limit_spec import LimitBook
from queuey_core.flow.limit_spec import spec_from_table
from tests.backend_kinds import PG_URL
from tests.harness import RabbitEnv
from tests.integration.tcp_cut import Cuttable
from tests.support import ALPHA
from tests.support import start

pytestmark = pytest.mark.integration


class Charge(Job):
    NAME: ClassVar[str] = "test.outage.charge"
    QUEUE: ClassVar[str] = ALPHA
    account: str


@pytest.fixture
def proxied_pg() -> Iterator[tuple[Cuttable, str]]:
    """A PostgreSQL URL through a proxy the test can cut, in a schema of its own."""
    parts = urllib.parse.urlsplit(PG_URL)
    proxy = Cuttable(parts.hostname or "127.0.0.1", parts.port or 5432)
    schema = f"queuey_test_{uuid.uuid4().hex[:12]}"
    netloc = f"{parts.username}@127.0.0.1:{proxy.port}"
    url = urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=f"schema={schema}"))
    yield proxy, url
    proxy.close()
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_limited_jobs_wait_out_a_store_outage_and_none_runs_outside_its_limit(
    proxied_pg: tuple[Cuttable, str],
) -> None:
    proxy, url = proxied_pg
    h = RabbitEnv()
    book = LimitBook(
        [spec_from_table("mutex", {"concurrency": 1, "key": "account", "jobs": [Charge.NAME]})]
    )
    gate = LimitGate(book, limit_state_for(url, book), clock=h.clock)
    lock = threading.Lock()
    running: dict[str, int] = {}
    most: dict[str, int] = {}
    ran: list[tuple[str, str, int]] = []

    def charge(job: Charge, ctx: JobContext) -> None:
        with lock:
            running[job.account] = running.get(job.account, 0) + 1
            most[job.account] = max(most.get(job.account, 0), running[job.account])
            ran.append((job.account, str(ctx.job_id), ctx.attempt))
        time.sleep(0.3)
        with lock:
            running[job.account] -= 1

    worker = Worker(h.backend, h.queues, [Handler(Charge, charge)], concurrency=4, limits=gate)
    running_worker = start(worker, h)
    try:
        producer = h.producer()
        ids = [str(producer.enqueue(Charge(account=f"a{i % 2}"))) for i in range(4)]
        h.wait_for(lambda: len(ran) >= 1)
        proxy.cut()
        cut_at = time.monotonic()
        ids += [str(producer.enqueue(Charge(account=f"a{i % 2}"))) for i in range(4)]
        time.sleep(10)
        with lock:
            during = {j for _, j, _ in ran}
        proxy.mend()
        h.wait_for(lambda: len({j for _, j, _ in ran}) == 8, timeout=90)
        h.wait_for(lambda: not any(running.values()))
    finally:
        proxy.mend()
        running_worker.stop()
        gate.close()
        h.close()
    assert not during & set(ids[4:]), "no job enqueued during the outage ran before it ended"
    assert time.monotonic() - cut_at >= 10
    assert sorted({j for _, j, _ in ran}) == sorted(ids), "every job ran"
    assert len(ran) == 8, "each once"
    assert max(most.values()) == 1, f"one at a time per account: {most}"
    assert {attempt for _, _, attempt in ran} == {1}, "waiting spent no attempt"
