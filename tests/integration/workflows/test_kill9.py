"""Workers killed with ``kill -9`` at random points while workflows run: every workflow
still finishes, its callback is made once and told on every repeated start, and no
member runs more often than at-least-once allows (docs/workflows.md, "Guarantees").

On the file, on RabbitMQ with a SQLite store, and on RabbitMQ with a PostgreSQL store.
The size is ``QUEUEY_TEST_WORKFLOW_KILLS`` (``WORKFLOWSxMEMBERS``, default ``200x50``,
the issue's); on PostgreSQL, where each end is a few round trips,
``QUEUEY_TEST_WORKFLOW_KILLS_PG`` (default ``60x25``, about a minute). CI on two loaded
cores may run them smaller. Slow: real processes.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.workflows import Workflow
from queuey_core.workflows import Workflows
from queuey_core.workflows import WorkflowStore
from queuey_core.workflows import group
from queuey_core.workflows import open_workflow_store
from queuey_core.workflows import step
from tests.backend_kinds import PG_URL
from tests.backend_kinds import drop_schema
from tests.conftest import require_broker
from tests.harness import AMQP_URL
from tests.integration.broker import delete_queues
from tests.support import ALPHA
from tests.support import BETA
from tests.support import seed_queues
from tests.workflows.support import Add
from tests.workflows.support import Total

pytestmark = [pytest.mark.slow, pytest.mark.processes]

REPO = Path(__file__).resolve().parents[3]
WORKERS = 3
#: Real seconds the whole run may take before it is a failure.
DEADLINE = 900.0


def size(where: str) -> tuple[int, int]:
    if where == "rabbitmq+postgres":  # a member's end costs ~15 ms there: sized for ~60 s
        text = os.environ.get("QUEUEY_TEST_WORKFLOW_KILLS_PG", "60x25")
    else:
        text = os.environ.get("QUEUEY_TEST_WORKFLOW_KILLS", "200x50")
    workflows, members = text.lower().split("x")
    return int(workflows), int(members)


class Fleet:
    """Worker processes on one file, each killed and replaced at will."""

    def __init__(self, url: str, store: str, ledger: Path, log: Path) -> None:
        self.args = [
            sys.executable,
            "-m",
            "tests.integration.workflows.crash_worker",
            url,
            store,
            str(ledger),
        ]
        self.log = log.open("ab")
        self.procs = [self.spawn() for _ in range(WORKERS)]
        self.kills = 0

    def spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.args, cwd=REPO, stdout=self.log, stderr=self.log)

    def kill_one(self, rng: random.Random) -> None:
        i = rng.randrange(len(self.procs))
        self.procs[i].send_signal(signal.SIGKILL)
        self.procs[i].wait()
        self.kills += 1
        self.procs[i] = self.spawn()

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.log.close()


def query(store: WorkflowStore, text: str) -> list[tuple[Any, ...]]:
    """The rows of ``text`` ({w}, {m}: the workflow tables) in ``store``."""
    with store.transaction() as cur:
        cur.execute(store.sql(text))
        return [tuple(r) for r in cur.fetchall()]


def finished(store: WorkflowStore) -> int:
    return int(query(store, "SELECT count(*) FROM {w} WHERE state = 'succeeded'")[0][0])


@pytest.mark.parametrize("where", ["sqlite", "rabbitmq+sqlite", "rabbitmq+postgres"])
def test_kill_9_at_random_points_loses_no_workflow_and_makes_each_callback_once(
    tmp_path: Path, where: str
) -> None:
    count, members = size(where)
    seed = int(os.environ.get("QUEUEY_TEST_SEED", str(time.time_ns() % 1_000_000)))
    rng = random.Random(seed)
    db = tmp_path / "queuey.db"
    store = f"sqlite:///{db}"
    if where == "rabbitmq+postgres":
        store = f"{PG_URL}?schema=queuey_kill9_{uuid.uuid4().hex[:12]}"
    backend: Any
    if where == "sqlite":
        url = f"{store}?lease=2"  # a killed worker's jobs come back after 2 s
        backend = SqliteBackend(url)
    else:
        require_broker()
        delete_queues(ALPHA, BETA)
        url = AMQP_URL  # a killed worker's jobs come back as its connection drops
        backend = RabbitMQBackend(AMQP_URL, publish_timeout=10)
    ledger = tmp_path / "ledger.txt"
    flows = Workflows(backend, seed_queues(), open_workflow_store(store))
    reader = flows.store
    shape = group(*[Add(x=i) for i in range(members)]).then(step(Total(), receives="parts"))
    fleet = Fleet(url, store, ledger, tmp_path / "workers.log")
    started = time.monotonic()
    try:
        # Half started before the first kill, half while workers die.
        for _ in range(count // 2):
            flows.start(Workflow(shape))
        while finished(reader) < count:
            assert time.monotonic() - started < DEADLINE, (
                f"seed {seed}: {finished(reader)}/{count} workflows finished in {DEADLINE} s"
            )
            time.sleep(rng.uniform(0.2, 1.5))
            fleet.kill_one(rng)
            for _ in range(min(count // 2, 20)):
                if len(all_workflows(reader)) < count:
                    flows.start(Workflow(shape))
        elapsed = time.monotonic() - started
        rows = query(reader, "SELECT job_id, workflow_id, job_type, state FROM {m}")
    finally:
        fleet.stop()
        flows.store.close()
        backend.close()
        if where != "sqlite":
            delete_queues(ALPHA, BETA)
        if where == "rabbitmq+postgres":
            drop_schema(store)

    runs = collections.defaultdict(list)
    totals_seen: dict[str, list[str]] = collections.defaultdict(list)
    for line in ledger.read_text().splitlines():
        job_type, job_id, before, _pid, *extra = line.split(" ")
        runs[job_id].append(before == "1")
        if job_type == "wf.total":
            totals_seen[job_id].append(extra[0] if extra else "")
    by_workflow = collections.defaultdict(list)
    for job_id, workflow_id, job_type, state in rows:
        by_workflow[workflow_id].append((job_id, job_type, state))
    assert len(by_workflow) == count
    expected_parts = ",".join(map(str, range(members)))
    repeats = 0
    for workflow_id, found in by_workflow.items():
        callbacks = [j for j, t, _ in found if t == "wf.total"]
        assert len(callbacks) == 1, f"seed {seed}: workflow {workflow_id} made one callback"
        for job_id, _, state in found:
            assert state == "succeeded", f"seed {seed}: {job_id} of {workflow_id} is {state}"
            told = runs[job_id]
            assert told, f"seed {seed}: member {job_id} never ran"
            assert told.count(False) <= 1, f"seed {seed}: {job_id} was twice told it was first"
            repeats += len(told) - 1
        assert set(totals_seen[callbacks[0]]) == {expected_parts}, "every result, in order"
    # A repeat needs a worker that died holding the job (its leases come back), or an
    # outbox row re-sent: at most what the killed workers held, each time.
    assert repeats <= fleet.kills * 4 * 2, f"seed {seed}: {repeats} repeats, {fleet.kills} kills"
    print(
        f"\nkill -9 on {where}: {count} workflows x {members} members, {fleet.kills} kills, "
        f"{repeats} repeated runs (all told), {elapsed:.0f} s, seed {seed}"
    )


def all_workflows(store: WorkflowStore) -> list[str]:
    return [str(r[0]) for r in query(store, "SELECT workflow_id FROM {w}")]
