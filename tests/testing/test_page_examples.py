"""The examples of docs/testing-your-handlers.md, as the page shows them: this module
stands in for the page's ``my_jobs.handlers``."""

from __future__ import annotations

import sys
from typing import ClassVar

import pytest

from queuey_core import Backoff
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import Retryable
from queuey_core import RetryPolicy
from queuey_core import handler
from queuey_core.testing import QueueyKit

#: Where the handlers enqueue: the application sets it; a test gives it the kit's.
producer: Producer | None = None


class Order(Job):
    NAME: ClassVar[str] = "order"
    QUEUE: ClassVar[str] = "shop"
    id: int


class Charge(Job):
    NAME: ClassVar[str] = "charge"
    QUEUE: ClassVar[str] = "shop"
    order: int
    card: str


class Receipt(Job):
    NAME: ClassVar[str] = "receipt"
    QUEUE: ClassVar[str] = "shop"
    order: int


@handler
def order(job: Order, ctx: JobContext) -> None:
    assert producer is not None, "the application sets the producer"
    producer.enqueue(Charge(order=job.id, card="ok"))
    producer.enqueue(Receipt(order=job.id))


@handler
def charge(job: Charge, ctx: JobContext) -> str:
    if job.card == "declined-once" and ctx.attempt == 1:
        raise Retryable("card declined")
    return f"charged order {job.order}"


@handler
def receipt(job: Receipt, ctx: JobContext) -> None:
    pass


my_jobs_handlers = sys.modules[__name__]
pytestmark = pytest.mark.queuey(
    handlers=[my_jobs_handlers],
    queues=[QueueConfig("shop", retry=RetryPolicy(3, Backoff(initial=2.0, jitter=True)))],
)


def test_a_declined_card_is_retried_then_charged(queuey: QueueyKit) -> None:
    failed = queuey.run(Charge(order=42, card="declined-once"))
    assert failed.retried
    assert failed.reason == "card declined"

    [retry] = queuey.enqueued(Charge)  # typed: retry.job is a Charge
    assert retry.attempt == 2
    queuey.advance(retry.delay)  # through the backoff, no sleeping
    assert queuey.run(retry).result == "charged order 42"


def test_an_order_fans_out(queuey: QueueyKit, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(my_jobs_handlers, "producer", queuey.producer)
    queuey.enqueue(Order(id=42))
    assert [o.job_type for o in queuey.drain()] == ["order", "charge", "receipt"]
