"""The examples of docs/testing-your-handlers.md, as the page shows them: this module
stands in for the page's ``my_jobs.handlers``."""

from __future__ import annotations

import sys
from typing import ClassVar

import pytest
from pydantic import Field

from queuey_core import Backoff
from queuey_core import DuplicateJobError
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Limit
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import Retryable
from queuey_core import RetryPolicy
from queuey_core import handler
from queuey_core.flow.unique import Unique
from queuey_core.testing import QueueyKit
from queuey_core.testing import Status
from queuey_core.workflows import group
from queuey_core.workflows import step

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


class SyncCatalog(Job):
    NAME: ClassVar[str] = "catalog.sync"
    QUEUE: ClassVar[str] = "shop"
    LIMITS: ClassVar[tuple[Limit, ...]] = (Limit("supplier_api", rate="2/s"),)
    page: int


class Export(Job):
    NAME: ClassVar[str] = "export"
    QUEUE: ClassVar[str] = "shop"
    LIMITS: ClassVar[tuple[Limit, ...]] = (
        Limit("exports_per_tenant", concurrency=1, key="tenant"),
    )
    tenant: str


class SendInvoice(Job):
    NAME: ClassVar[str] = "invoice.send"
    QUEUE: ClassVar[str] = "shop"
    UNIQUE: ClassVar[Unique | None] = Unique(key=("invoice_id",))
    invoice_id: int


class Resize(Job):
    NAME: ClassVar[str] = "resize"
    QUEUE: ClassVar[str] = "shop"
    image: int


class Publish(Job):
    NAME: ClassVar[str] = "publish"
    QUEUE: ClassVar[str] = "shop"
    sizes: list[str] = Field(default_factory=list)


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


@handler
def sync_catalog(job: SyncCatalog, ctx: JobContext) -> None:
    pass


@handler
def export(job: Export, ctx: JobContext) -> None:
    pass


@handler
def send_invoice(job: SendInvoice, ctx: JobContext) -> None:
    pass


@handler
def resize(job: Resize, ctx: JobContext) -> str:
    return f"{job.image}.webp"


@handler
def publish(job: Publish, ctx: JobContext) -> str:
    return ", ".join(job.sizes)


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


def test_the_supplier_api_gets_two_calls_a_second(queuey: QueueyKit) -> None:
    for page in range(3):
        queuey.enqueue(SyncCatalog(page=page))

    first = queuey.drain()  # one starts; the others wait for their turn, unrun
    assert [o.status for o in first] == [Status.SUCCEEDED, Status.WAITED, Status.WAITED]
    assert first[1].reason == "waited on limit supplier_api for 0.5s"
    assert first[1].attempt == 1  # waiting spends no attempt

    rest = queuey.drain(advance_time=True)  # the clock jumps to each one's turn
    assert [o.succeeded for o in rest] == [True, True]


def test_one_export_per_tenant_at_a_time(queuey: QueueyKit) -> None:
    with queuey.running(Export(tenant="acme")) as first:  # held at its start
        second = queuey.run(Export(tenant="acme"))
        assert second.parked
        assert second.limit == "exports_per_tenant"
        assert queuey.run(Export(tenant="zeta")).succeeded  # another tenant runs

    assert first.outcome is not None
    assert first.outcome.succeeded  # its end let the second go
    assert [o.succeeded for o in queuey.drain()] == [True]


def test_a_double_click_sends_one_invoice(queuey: QueueyKit) -> None:
    first = queuey.enqueue(SendInvoice(invoice_id=17))
    with pytest.raises(DuplicateJobError) as refused:
        queuey.enqueue(SendInvoice(invoice_id=17))
    assert refused.value.existing == first

    queuey.drain()  # it started: the key is free again
    assert queuey.enqueue(SendInvoice(invoice_id=17)) != first


def test_an_album_is_published_after_every_resize(queuey: QueueyKit) -> None:
    album = queuey.start_workflow(
        group(Resize(image=1), Resize(image=2)).then(step(Publish(), receives="sizes"))
    )

    assert [o.job_type for o in queuey.drain()] == ["resize", "resize", "publish"]
    view = queuey.workflow(album)
    assert view.state == "succeeded"
    assert [(n.job_type, n.state) for n in view.nodes] == [
        ("resize", "succeeded"),
        ("resize", "succeeded"),
        ("publish", "succeeded"),
    ]
    assert view.nodes[-1].result == "1.webp, 2.webp"


def test_the_shop_waits_out_an_incident(queuey: QueueyKit) -> None:
    queuey.pause("shop")
    queuey.enqueue(Charge(order=7, card="ok"))
    assert queuey.drain() == []
    assert [e.job.order for e in queuey.enqueued(Charge)] == [7]

    queuey.resume("shop")
    assert [o.status for o in queuey.drain()] == [Status.SUCCEEDED]
