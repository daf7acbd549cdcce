"""Unique jobs in the testing kit: a duplicate's enqueue is the DuplicateJobError a
producer raises, and each period ends on the kit's clock; on memory and on the file."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from queuey_core import DuplicateJobError
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import QueueConfig
from queuey_core import handler
from queuey_core.flow.unique import QUEUED_OR_RUNNING
from queuey_core.flow.unique import Unique
from queuey_core.testing import QueueyKit

QUEUES = [QueueConfig("kitu.work")]


class Invoice(Job):
    NAME: ClassVar[str] = "kitu.invoice"
    QUEUE: ClassVar[str] = "kitu.work"
    UNIQUE: ClassVar[Unique | None] = Unique(key=("invoice_id",))  # while queued
    invoice_id: int
    note: str = ""


class Balance(Job):
    NAME: ClassVar[str] = "kitu.balance"
    QUEUE: ClassVar[str] = "kitu.work"
    UNIQUE: ClassVar[Unique | None] = Unique(key=("account",), period=QUEUED_OR_RUNNING)
    account: str


class AsyncBalance(Job):
    NAME: ClassVar[str] = "kitu.async-balance"
    QUEUE: ClassVar[str] = "kitu.work"
    UNIQUE: ClassVar[Unique | None] = Unique(key=("account",), period=QUEUED_OR_RUNNING)
    account: str


class Webhook(Job):
    NAME: ClassVar[str] = "kitu.webhook"
    QUEUE: ClassVar[str] = "kitu.work"
    UNIQUE: ClassVar[Unique | None] = Unique(key=("event",), period=60)
    event: str


class Ping(Job):
    """Unique only where the config says so."""

    NAME: ClassVar[str] = "kitu.ping"
    QUEUE: ClassVar[str] = "kitu.work"
    host: str


@handler
def invoice(job: Invoice, ctx: JobContext) -> None:
    pass


@handler
def balance(job: Balance, ctx: JobContext) -> None:
    pass


@handler
async def async_balance(job: AsyncBalance, ctx: JobContext) -> str:
    return job.account


@handler
def webhook(job: Webhook, ctx: JobContext) -> None:
    pass


@handler
def ping(job: Ping, ctx: JobContext) -> None:
    pass


both_backends = pytest.mark.parametrize("queuey", ["memory", "sqlite"], indirect=True)
pytestmark = pytest.mark.queuey(
    handlers=[invoice, balance, async_balance, webhook, ping], queues=QUEUES
)


@both_backends
def test_a_duplicate_while_queued_is_refused_then_accepted_once_it_starts(
    queuey: QueueyKit,
) -> None:
    first = queuey.enqueue(Invoice(invoice_id=17))

    with pytest.raises(DuplicateJobError) as refused:
        queuey.enqueue(Invoice(invoice_id=17, note="double click"))

    assert refused.value.existing == first, "the refusal names the job holding the key"
    assert [e.job_id for e in queuey.enqueued(Invoice)] == [first], "nothing was published"
    assert queuey.enqueue(Invoice(invoice_id=18)), "another key is free"
    assert queuey.run(queuey.enqueued(Invoice)[0]).succeeded
    again = queuey.enqueue(Invoice(invoice_id=17))
    assert again != first, "the key was let go when its job started"


@both_backends
def test_queued_or_running_holds_the_key_while_the_job_runs(queuey: QueueyKit) -> None:
    with queuey.running(Balance(account="acct-1")) as running:
        with pytest.raises(DuplicateJobError) as refused:
            queuey.enqueue(Balance(account="acct-1"))
        assert refused.value.existing == running.job_id

    assert running.outcome is not None
    assert running.outcome.succeeded
    assert queuey.enqueue(Balance(account="acct-1")), "let go at its final outcome"


def test_an_async_handler_is_held_running_the_same_way(queuey: QueueyKit) -> None:
    with queuey.running(AsyncBalance(account="acct-2")) as running:
        refused = pytest.raises(DuplicateJobError)
        with refused:
            queuey.enqueue(AsyncBalance(account="acct-2"))

    assert running.outcome is not None
    assert running.outcome.result == "acct-2"
    assert queuey.enqueue(AsyncBalance(account="acct-2"))


@both_backends
def test_a_timed_key_expires_on_the_kits_clock(queuey: QueueyKit) -> None:
    assert queuey.run(Webhook(event="evt-1")).succeeded

    with pytest.raises(DuplicateJobError):
        queuey.enqueue(Webhook(event="evt-1"))  # it ran, and the key holds for 60 s
    queuey.advance(59)
    with pytest.raises(DuplicateJobError):
        queuey.enqueue(Webhook(event="evt-1"))
    queuey.advance(2)

    assert queuey.enqueue(Webhook(event="evt-1")), "61 s after the first: a new job"


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_unique_jobs_come_from_the_config_the_kit_reads(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "queuey.toml"
    path.write_text(
        '[queues."kitu.work"]\n\n[unique."kitu.ping"]\nkey = ["host"]\nperiod = "10s"\n',
        encoding="utf-8",
    )

    with QueueyKit([ping], config=path, backend=backend) as kit:  # type: ignore[arg-type]
        first = kit.enqueue(Ping(host="a"))
        with pytest.raises(DuplicateJobError) as refused:
            kit.enqueue(Ping(host="a"))
        assert refused.value.existing == first
        kit.advance(10.5)
        assert kit.enqueue(Ping(host="a"))
