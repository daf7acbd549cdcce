"""Pausing a queue in the testing kit, through the ``queuey`` fixture: the backend's
real pause, obeyed by the kit's worker, on memory and on the kit's SQLite file."""

from __future__ import annotations

from types import SimpleNamespace
from typing import ClassVar
from typing import cast

import pytest

from queuey_core import Job
from queuey_core import JobContext
from queuey_core import QueueConfig
from queuey_core import handler
from queuey_core.backends.base import Delivery
from queuey_core.clock import ManualClock
from queuey_core.envelope import Envelope
from queuey_core.errors import UnknownQueueError
from queuey_core.flow.pause import pause_queue
from queuey_core.testing import KitError
from queuey_core.testing import QueueyKit
from queuey_core.testing import Status
from queuey_core.testing.gate import GateState
from queuey_core.testing.gate import Timing

QUEUES = [QueueConfig("kitp.mail"), QueueConfig("kitp.bill")]

ran: list[str] = []


class Mail(Job):
    NAME: ClassVar[str] = "kitp.mail"
    QUEUE: ClassVar[str] = "kitp.mail"
    to: str


class Bill(Job):
    NAME: ClassVar[str] = "kitp.bill"
    QUEUE: ClassVar[str] = "kitp.bill"
    n: int


@handler
def mail(job: Mail, ctx: JobContext) -> None:
    ran.append(f"mail {job.to}")


@handler
def bill(job: Bill, ctx: JobContext) -> None:
    ran.append(f"bill {job.n}")


both_backends = pytest.mark.parametrize("queuey", ["memory", "sqlite"], indirect=True)
pytestmark = pytest.mark.queuey(handlers=[mail, bill], queues=QUEUES)


@pytest.fixture(autouse=True)
def fresh() -> None:
    ran.clear()


@both_backends
def test_a_paused_queue_keeps_its_jobs_unrun_until_resumed(queuey: QueueyKit) -> None:
    queuey.enqueue(Mail(to="ada"))
    queuey.pause("kitp.mail")
    queuey.enqueue(Mail(to="bob"))
    queuey.enqueue(Bill(n=1))
    assert queuey.paused() == {"kitp.mail"}
    done = queuey.drain(advance_time=True)
    assert [o.status for o in done] == [Status.SUCCEEDED]
    assert ran == ["bill 1"], "the other queue runs; the paused one waits"
    assert [e.job.to for e in queuey.enqueued(Mail)] == ["ada", "bob"], "waiting, in order"
    [ada, _] = queuey.enqueued(Mail)
    with pytest.raises(KitError, match=r"paused: kit.resume\('kitp.mail'\) first"):
        queuey.run(ada)
    queuey.resume("kitp.mail")
    assert queuey.paused() == frozenset()
    queuey.drain()
    assert ran == ["bill 1", "mail ada", "mail bob"], "nothing lost, attempt unspent"
    assert [o.attempt for o in queuey.outcomes[1:]] == [1, 1]


@both_backends
def test_a_pause_by_the_code_under_test_holds_the_kits_worker(queuey: QueueyKit) -> None:
    """The kit's backend is a real one: the library's pause_queue on it is obeyed."""
    pause_queue(queuey.backend, "kitp.mail", known=[q.name for q in QUEUES])
    queuey.pause("kitp.mail")  # already paused: waits for the worker to obey, changes nothing
    queuey.enqueue(Mail(to="ada"))
    assert queuey.drain(advance_time=True) == []
    queuey.resume("kitp.mail")
    assert [o.status for o in queuey.drain()] == [Status.SUCCEEDED]


def test_a_delayed_job_of_a_paused_queue_is_not_waited_for_by_the_clock() -> None:
    with QueueyKit([mail, bill], queues=QUEUES, backend="sqlite") as kit:
        kit.pause("kitp.mail")
        kit.enqueue(Mail(to="later"), delay=30)
        kit.enqueue(Bill(n=2), delay=10)
        assert [o.status for o in kit.drain(advance_time=True)] == [Status.SUCCEEDED]
        assert ran == ["bill 2"]
        kit.advance(30)
        assert kit.drain() == []
        kit.resume("kitp.mail")
        kit.drain()
        assert ran == ["bill 2", "mail later"]


def test_pausing_a_queue_the_kit_does_not_have_is_refused(queuey: QueueyKit) -> None:
    with pytest.raises(UnknownQueueError):
        queuey.pause("kitp.typo")


@both_backends
def test_a_job_running_when_its_queue_is_paused_finishes_and_the_rest_wait(
    queuey: QueueyKit,
) -> None:
    queuey.enqueue(Mail(to="bob"))
    with queuey.running(Mail(to="ada")) as first:
        queuey.pause("kitp.mail")
    assert first.outcome is not None
    assert first.outcome.status == Status.SUCCEEDED
    assert queuey.drain() == [], "bob waits for the resume"
    assert ran == ["mail ada"]
    queuey.resume("kitp.mail")
    queuey.drain()
    assert ran == ["mail ada", "mail bob"]


def test_a_delivery_of_a_cancelled_consumer_is_never_handed_out_by_the_gate() -> None:
    """After a resume the new consumer is live before the worker closes the paused one,
    which gives back what it held. A delivery the old one handed to the gate must not
    go to the worker meanwhile: its row is given back under it (its ack then failed, "the
    lease was lost", and drain() waited 60 s for it, once on CI's loaded cores)."""
    gate = GateState(Timing(ManualClock()))
    envelope = Envelope.for_job(Mail(to="ada"), enqueued_at=0)
    [entry] = gate.expect([(envelope, None)])
    worker_sink: list[object] = []
    old, new = object(), object()
    hold = gate.sink_for("kitp.mail", worker_sink.append, old)
    delivery = SimpleNamespace(envelope=envelope, queue="kitp.mail")
    hold(cast(Delivery, delivery))
    assert gate.next_ready() is entry
    gate.ended(old)  # paused: cancelled, not closed yet
    assert gate.next_ready() is None
    gate.sink_for("kitp.mail", worker_sink.append, new)  # resumed
    assert gate.consumed("kitp.mail")
    assert gate.next_ready() is None, "the old consumer's delivery waits for its give-back"
    gate.given_back(old)  # the old consumer closes: the row goes back to the file
    assert entry.delivery is None
    hold_new = gate.sink_for("kitp.mail", worker_sink.append, new)
    hold_new(cast(Delivery, SimpleNamespace(envelope=envelope, queue="kitp.mail")))
    assert gate.next_ready() is entry, "redelivered through the live consumer"
