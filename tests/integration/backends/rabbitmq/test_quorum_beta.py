"""The shipped example queue ``beta`` (a quorum queue) takes a job's whole path on
RabbitMQ 3.10: enqueue, retries through the delay ladder, a deferral, dead letters to
``beta.dlq``, and ``queuey dlq requeue`` back onto the quorum queue.

The queues come from the repository's own ``queuey.toml``, so a change there that
breaks a quorum queue (a ``max_priority``, say) fails here. Only the retry policy is
shortened: the shipped one waits 30 s before a first retry.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core import DeadLetter
from queuey_core import Deferred
from queuey_core import Fatal
from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import QueueKind
from queuey_core import QueueSet
from queuey_core import Retryable
from queuey_core import Worker
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.settings import load_settings
from tests.conftest import require_broker
from tests.harness import AMQP_URL
from tests.integration.broker import delete_queues
from tests.integration.broker import list_json
from tests.support import start
from tests.support import wait_for

pytestmark = pytest.mark.integration

SHIPPED = Path(__file__).resolve().parents[4] / "queuey.toml"
FAST_RETRY = {"max_attempts": 3, "backoff": "fixed", "initial": "200ms", "max": "200ms"}


class Work(Job):
    """A long-job stand-in on beta that does whatever ``plan`` says."""

    NAME: ClassVar[str] = "it.beta.work"
    QUEUE: ClassVar[str] = "beta"
    plan: str  # "fail-twice", "defer-once", "always-fail", "fatal", "ok"


class Ledger:
    """What each run saw, by job id: (attempt, deferrals)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: dict[uuid.UUID, list[tuple[int, int]]] = {}
        self.succeeded: set[uuid.UUID] = set()
        self.fixed = threading.Event()  # "always-fail" succeeds once set

    def handle(self, job: Work, ctx: JobContext) -> None:
        with self.lock:
            self.runs.setdefault(ctx.job_id, []).append((ctx.attempt, ctx.deferrals))
        if job.plan == "fail-twice" and ctx.attempt <= 2:
            raise Retryable(f"failure {ctx.attempt} of 2")
        if job.plan == "defer-once" and ctx.deferrals == 0:
            raise Deferred(0.3, "not yet")
        if job.plan == "always-fail" and not self.fixed.is_set():
            raise RuntimeError("the service behind it is down")
        if job.plan == "fatal":
            raise Fatal("this one cannot work")
        with self.lock:
            self.succeeded.add(ctx.job_id)


@pytest.fixture
def queues() -> Iterator[QueueSet]:
    require_broker()
    settings, _ = load_settings(
        SHIPPED, overrides={"broker": {"url": AMQP_URL}, "queues": {"beta": {"retry": FAST_RETRY}}}
    )
    delete_queues("beta")
    yield settings.queue_set()
    delete_queues("beta")


def dead_letters(rabbit: RabbitMQBackend) -> dict[uuid.UUID, DeadLetter]:
    found = rabbit.list_dead_letters("beta")
    return {d.envelope.job_id: d for d in found if isinstance(d, DeadLetter)}


def test_the_shipped_beta_queue_is_a_quorum_queue_without_priorities(queues: QueueSet) -> None:
    beta = queues["beta"]
    assert beta.kind is QueueKind.QUORUM
    assert beta.max_priority is None, "RabbitMQ 3.x quorum queues refuse x-max-priority"
    rabbit = RabbitMQBackend(AMQP_URL)
    try:
        rabbit.declare([beta])
    finally:
        rabbit.close()
    kinds = {row["name"]: row["type"] for row in list_json("queues", "name", "type")}
    assert kinds["beta"] == "quorum"
    # Replicated like its jobs, so a dead letter survives the loss of a cluster node
    # (listing it in order still works: a quorum queue requeues in place).
    assert kinds["beta.dlq"] == "quorum"


def test_a_job_path_on_the_quorum_queue_beta_retries_defers_dead_letters_and_requeues(
    queues: QueueSet,
) -> None:
    ledger = Ledger()
    rabbit = RabbitMQBackend(AMQP_URL, publish_timeout=10)
    running = start(Worker(rabbit, queues, [Handler(Work, ledger.handle)], consume=["beta"]), None)
    try:
        producer = Producer(rabbit, queues)
        ids = {plan: producer.enqueue(Work(plan=plan)) for plan in ("fail-twice", "defer-once")}
        ids |= {plan: producer.enqueue(Work(plan=plan)) for plan in ("always-fail", "fatal")}

        def settled() -> bool:
            return {ids["fail-twice"], ids["defer-once"]} <= ledger.succeeded and len(
                dead_letters(rabbit)
            ) == 2

        wait_for(settled, timeout=60)
        assert ledger.runs[ids["fail-twice"]] == [(1, 0), (2, 0), (3, 0)], (
            "two retries through the delay ladder, each a new attempt"
        )
        assert ledger.runs[ids["defer-once"]] == [(1, 0), (1, 1)], "a deferral spends no attempt"
        dead = dead_letters(rabbit)
        assert set(dead) == {ids["always-fail"], ids["fatal"]}
        assert dead[ids["always-fail"]].reason.startswith("max attempts (3) exhausted")
        assert dead[ids["always-fail"]].envelope.attempt == 3
        assert dead[ids["fatal"]].reason == "fatal error: this one cannot work"

        # The fix is deployed: send the job back with the command line.
        ledger.fixed.set()
        result = CliRunner().invoke(
            app,
            ["--config", str(SHIPPED), "dlq", "requeue", str(ids["always-fail"])],
            env={"QUEUEY_BROKER__URL": AMQP_URL, "QUEUEY_CONFIG": None},
        )
        assert result.exit_code == 0, result.stderr
        assert "requeued 1" in result.stdout
        wait_for(lambda: ids["always-fail"] in ledger.succeeded, timeout=30)
        assert ledger.runs[ids["always-fail"]][-1] == (1, 0), "a requeued job starts afresh"
        assert set(dead_letters(rabbit)) == {ids["fatal"]}, "the other one stays"
    finally:
        running.stop()
        rabbit.close()
    assert running.handle.settle_failures() == 0
    assert rabbit_ready("beta") == 0


def rabbit_ready(queue: str) -> int:
    rabbit = RabbitMQBackend(AMQP_URL)
    try:
        return rabbit.queue_counts(queue)[0]
    finally:
        rabbit.close()
