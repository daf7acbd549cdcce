"""Hostile messages on a real RabbitMQ: whatever is published into a queue ends settled.

Messages are published straight into the queue with raw pika while a worker runs: bodies,
properties and headers that hypothesis generates, and the ones our issue "No message can
wedge a worker" found. Each ends acked or in the dead-letter queue with a reason, within
a bounded time; the worker keeps serving good jobs, no settle fails, and no connection
is lost on the way. The poison path's own fallbacks are forced by making the publishes
before them fail.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any
from typing import ClassVar

import pika
import pytest
from hypothesis import HealthCheck
from hypothesis import assume
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from pika.spec import BasicProperties

from queuey_core import DeadLetter
from queuey_core import EnqueueUnknownError
from queuey_core import Envelope
from queuey_core import Fatal
from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import NotEnqueuedError
from queuey_core import Producer
from queuey_core import PublishFailure
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Retryable
from queuey_core import RetryPolicy
from queuey_core import UndecodableDeadLetter
from queuey_core import Worker
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq import topology
from tests.conftest import require_broker
from tests.harness import AMQP_URL
from tests.integration import broker
from tests.integration.broker import channel
from tests.integration.broker import delete_queues
from tests.integration.broker import unique
from tests.support import Running
from tests.support import start
from tests.support import wait_for

pytestmark = pytest.mark.integration

QNAME = unique("it.hostile")


class Work(Job):
    NAME: ClassVar[str] = "it.hostile.work"
    QUEUE: ClassVar[str] = QNAME
    n: int


class Books:
    """What the handler saw, by payload, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.runs: list[int] = []

    def add(self, n: int) -> None:
        with self._lock:
            self.runs.append(n)

    def count(self) -> int:
        with self._lock:
            return len(self.runs)

    def saw(self, n: int) -> bool:
        with self._lock:
            return n in self.runs


@pytest.fixture
def queues() -> Iterator[QueueSet]:
    require_broker()
    delete_queues(QNAME)
    yield QueueSet([QueueConfig(QNAME, prefetch=4, retry=RetryPolicy(2))])
    delete_queues(QNAME)


@pytest.fixture
def lost_connections(caplog: pytest.LogCaptureFixture) -> Iterator[list[logging.LogRecord]]:
    """The records of every connection queuey lost during the test."""
    caplog.set_level(logging.WARNING, logger="queuey_core.backends.rabbitmq.link")
    lost: list[logging.LogRecord] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "connection to RabbitMQ lost" in record.getMessage():
                lost.append(record)

    catch = Catch()
    logging.getLogger("queuey_core.backends.rabbitmq.link").addHandler(catch)
    yield lost
    logging.getLogger("queuey_core.backends.rabbitmq.link").removeHandler(catch)


def ready(rabbit: RabbitMQBackend, queue: str = QNAME) -> int:
    return rabbit.queue_counts(queue)[0]


def dead(rabbit: RabbitMQBackend) -> int:
    return rabbit.queue_counts(topology.dead_letter_name(QNAME))[0]


def raw_dead_letters() -> list[tuple[BasicProperties, bytes]]:
    """Every message of the dead-letter queue as RabbitMQ holds it, given back after."""
    got = []
    with channel() as ch:
        while True:
            method, props, body = ch.basic_get(topology.dead_letter_name(QNAME), auto_ack=False)
            if method is None:
                break
            got.append((props, body))
    return got


def run_worker(rabbit: RabbitMQBackend, queues: QueueSet, books: Books, **options: Any) -> Running:
    def handle(job: Work, ctx: JobContext) -> None:
        books.add(job.n)

    return start(Worker(rabbit, queues, [Handler(Work, handle)], **options), None)


def envelope_json(**fields: Any) -> dict[str, Any]:
    return {
        "v": 1,
        "job_id": str(uuid.uuid4()),
        "job_type": Work.NAME,
        "queue": QNAME,
        "enqueued_at": int(time.time() * 1000),
        "payload": {"n": -1},
        **fields,
    }


# -- generated messages -----------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)

#: Each envelope field, as a good envelope has it.
VALID: dict[str, st.SearchStrategy[Any]] = {
    "v": st.just(1),
    "job_id": st.uuids().map(str),
    "job_type": st.sampled_from([Work.NAME, Work.NAME, "it.hostile.unknown"]),
    "queue": st.just(QNAME),
    "attempt": st.integers(1, 3),
    "deferrals": st.integers(0, 3),
    "priority": st.integers(0, 10),
    "enqueued_at": st.integers(0, 2**45),
    "payload": st.fixed_dictionaries({"n": st.integers(0, 1000)})
    | st.dictionaries(st.text(max_size=5), json_values, max_size=3),
}
#: Each envelope field, as a hostile publisher might write it.
HOSTILE: dict[str, st.SearchStrategy[Any]] = {
    "v": st.integers().filter(lambda v: v != 1) | json_values,
    "job_id": st.text(max_size=40) | json_values,
    "job_type": st.sampled_from(["x" * 300, "a\x00b", "", "\u2028"]) | json_values,
    "queue": st.sampled_from(["nowhere.declared", "", QNAME + ".dlq"]) | json_values,
    "attempt": st.integers(-(2**64), 2**64) | json_values,
    "deferrals": st.integers(-(2**64), 2**64) | json_values,
    "priority": st.integers(-(2**64), 2**64) | json_values,
    "enqueued_at": st.integers(-(2**64), 2**64) | json_values,
    "payload": json_values,
}


@st.composite
def envelope_like(draw: st.DrawFn) -> bytes:
    """A good envelope with up to two fields broken (a hostile value, or missing)."""
    fields = {name: draw(strategy) for name, strategy in VALID.items()}
    for name in draw(st.sets(st.sampled_from(list(VALID)), max_size=2)):
        if draw(st.booleans()):
            fields[name] = draw(HOSTILE[name])
        else:
            del fields[name]
    fields.update(draw(st.dictionaries(st.text(max_size=5), json_values, max_size=2)))
    return json.dumps(fields).encode()


bodies = st.one_of(
    envelope_like(),
    envelope_like(),
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
)

header_values = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.lists(st.integers(-100, 100), max_size=3)
)
short_texts = st.none() | st.text(max_size=40)


@st.composite
def properties(draw: st.DrawFn) -> BasicProperties:
    """AMQP properties any client could send: only what pika can encode."""
    headers = draw(
        st.none()
        | st.dictionaries(
            st.sampled_from(
                [topology.REASON_HEADER, topology.DEAD_AT_HEADER, "x-death", "x-delivery-count"]
            )
            | st.text(max_size=10),
            header_values,
            max_size=4,
        )
    )
    props = BasicProperties(
        content_type=draw(short_texts),
        type=draw(short_texts),
        message_id=draw(short_texts),
        correlation_id=draw(short_texts),
        priority=draw(st.none() | st.integers(0, 255)),
        timestamp=draw(st.none() | st.integers(0, 2**63)),
        delivery_mode=draw(st.sampled_from([None, 1, 2])),
        headers=headers,
    )
    try:
        props.encode()
    except Exception:
        assume(False)
    return props


def runs_to_success(body: bytes) -> bool:
    """Whether the worker must run (and ack) this body; if not, it must dead-letter it."""
    try:
        env = Envelope.decode(body)
        env.decode_job(Work)
    except Exception:
        return False
    # QNAME has no priorities: an envelope with any other than 0 is refused unrun.
    return env.queue == QNAME and env.job_type == Work.NAME and env.priority == 0


# Links of earlier tests' backends may still be recovering in the background (test_cli
# deletes its vhost under them): tenacity's jitter then draws from `random` while
# hypothesis generates, which it reports, although nothing here uses it.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
def test_whatever_is_published_into_a_queue_ends_settled_and_the_worker_keeps_serving(
    queues: QueueSet, rabbit: RabbitMQBackend, lost_connections: list[logging.LogRecord]
) -> None:
    books = Books()
    running = run_worker(rabbit, queues, books)
    producer = Producer(rabbit, queues)
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    ch = conn.channel()
    sentinel = iter(range(1_000_000, 2_000_000))
    started = time.monotonic()

    @settings(
        max_examples=300,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(st.lists(st.tuples(bodies, properties()), min_size=1, max_size=4))
    def check(messages: list[tuple[bytes, BasicProperties]]) -> None:
        runs_before, dead_before = books.count(), dead(rabbit)
        for body, props in messages:
            ch.basic_publish("", QNAME, body, props)
        must_run = sum(runs_to_success(body) for body, _ in messages)
        must_die = len(messages) - must_run
        wait_for(
            lambda: (
                (books.count() - runs_before, dead(rabbit) - dead_before) == (must_run, must_die)
            ),
            timeout=10,
        )
        good = next(sentinel)
        producer.enqueue(Work(n=good))
        wait_for(lambda: books.saw(good), timeout=10)
        assert running.handle.settle_failures() == 0

    try:
        check()
    finally:
        conn.close()
        running.stop()
    assert ready(rabbit) == 0, "nothing was given back unsettled when the worker stopped"
    assert lost_connections == [], "no hostile message cost a connection"
    for props, _ in raw_dead_letters():
        assert props.headers[topology.REASON_HEADER].isascii()
    assert all(d.handle for d in rabbit.list_dead_letters(QNAME)), "every one can be reached"
    assert time.monotonic() - started < 90


# -- the issue's messages ---------------------------------------------------------------


def test_the_messages_of_the_issue_settle_at_once_without_losing_a_connection(
    queues: QueueSet, rabbit: RabbitMQBackend, lost_connections: list[logging.LogRecord]
) -> None:
    books = Books()
    running = run_worker(rabbit, queues, books)
    hostile = [
        envelope_json(queue="undeclared.queue"),
        envelope_json(job_type="j" * 300),
        *[envelope_json(attempt=9223372036854775808) for _ in range(8)],
    ]
    started = time.monotonic()
    with channel() as ch:
        for body in hostile:
            ch.basic_publish("", QNAME, json.dumps(body).encode())
    Producer(rabbit, queues).enqueue(Work(n=7))
    wait_for(lambda: books.saw(7), timeout=10)
    wait_for(lambda: dead(rabbit) == len(hostile), timeout=10)
    took = time.monotonic() - started
    running.stop()

    assert books.runs == [7], "no hostile message ran"
    assert took < 5, f"settled in {took:.1f}s"
    assert ready(rabbit) == 0
    assert running.handle.settle_failures() == 0
    assert lost_connections == []
    # The undecodable ones go by the dead-letterer, the other by a job thread: any order.
    dead_letters = raw_dead_letters()
    reasons = sorted(props.headers[topology.REASON_HEADER] for props, _ in dead_letters)
    assert reasons[0].startswith("envelope queue 'undeclared.queue' is not the queue")
    assert all(r.startswith("not a queuey envelope: attempt: ") for r in reasons[1:9])
    assert reasons[9].startswith("not a queuey envelope: job_type: longer than 255")
    bodies = [json.loads(body) for _, body in dead_letters]
    assert hostile[1] in bodies, "the body is kept as it was published"


def test_an_unencodable_handler_error_is_dead_lettered_and_the_publisher_survives(
    queues: QueueSet, rabbit: RabbitMQBackend, lost_connections: list[logging.LogRecord]
) -> None:
    books = Books()

    def handle(job: Work, ctx: JobContext) -> None:
        books.add(job.n)
        if job.n == 1:
            raise Fatal("lone \udc80 surrogate")

    running = start(Worker(rabbit, queues, [Handler(Work, handle)]), None)
    producer = Producer(rabbit, queues)
    producer.enqueue(Work(n=1))
    wait_for(lambda: dead(rabbit) == 1, timeout=10)
    producer.enqueue_many([Work(n=i) for i in range(2, 12)])  # through the publisher link
    wait_for(lambda: books.count() == 11, timeout=10)
    running.stop()

    ((props, _),) = raw_dead_letters()
    assert props.headers[topology.REASON_HEADER] == "fatal error: lone \\udc80 surrogate"
    assert running.handle.settle_failures() == 0
    assert lost_connections == []


# -- dead letters whatever their headers -------------------------------------------------


def test_a_dead_letter_queue_is_listed_whole_whatever_its_messages_hold(
    queues: QueueSet, rabbit: RabbitMQBackend
) -> None:
    rabbit.declare(list(queues.values()))
    dlq = topology.dead_letter_name(QNAME)
    good = json.dumps(envelope_json()).encode()
    with channel() as ch:
        for headers in [
            {topology.DEAD_AT_HEADER: "abc", topology.REASON_HEADER: 42},
            {topology.DEAD_AT_HEADER: 2**62, topology.REASON_HEADER: b"\xff\xfe bytes"},
            {topology.REASON_HEADER: "r" * 100_000, "x-death": "nonsense"},
        ]:
            ch.basic_publish("", dlq, good, BasicProperties(headers=headers))
        ch.basic_publish("", dlq, b"\x00binary", BasicProperties(message_id="bin-1"))
        ch.basic_publish("", dlq, b"{}", BasicProperties(message_id="\x01 not printable"))

    listed = rabbit.list_dead_letters(QNAME)
    assert [type(d) for d in listed] == [DeadLetter] * 3 + [UndecodableDeadLetter] * 2
    assert [d.dead_at for d in listed] == [None] * 5
    assert listed[0].reason == "unknown"
    assert listed[1].reason == "\\ufffd\\ufffd bytes"
    assert len(listed[2].reason) == topology.MAX_REASON
    assert [d.handle for d in listed[3:]] == ["bin-1", "#5"]
    assert rabbit.list_dead_letters(QNAME) == listed, "listing loses and reorders nothing"

    assert rabbit.requeue_dead_letters(QNAME, [listed[0].handle]) == 3, "duplicates of one id"
    assert [d.handle for d in rabbit.list_dead_letters(QNAME)] == ["bin-1", "#2"]
    assert rabbit.delete_dead_letters(QNAME, ["#2"]) == 1
    assert [d.handle for d in rabbit.list_dead_letters(QNAME)] == ["bin-1"]
    assert rabbit.purge_dead_letters(QNAME) == 1


# -- the poison path's fallbacks ---------------------------------------------------------


def test_a_retry_that_cannot_be_published_moves_the_original_body_to_the_dead_letters(
    queues: QueueSet, rabbit: RabbitMQBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    books = Books()

    def handle(job: Work, ctx: JobContext) -> None:
        books.add(job.n)
        raise Retryable("again")

    def broken_publish(envelope: Envelope, *, delay: float | None = None) -> None:
        raise RuntimeError("a bug in the publisher")

    job_id = Producer(rabbit, queues).enqueue(Work(n=1))
    monkeypatch.setattr(rabbit, "publish", broken_publish)
    running = start(Worker(rabbit, queues, [Handler(Work, handle)]), None)
    wait_for(lambda: dead(rabbit) == 1, timeout=10)
    running.stop()

    ((props, body),) = raw_dead_letters()
    assert Envelope.decode(body).attempt == 1, "the original, unchanged"
    assert props.message_id == str(job_id)
    assert props.headers[topology.REASON_HEADER] == (
        "could not publish the retry: RuntimeError: a bug in the publisher"
    )
    assert books.runs == [1], "never requeued for another immediate run"
    assert running.handle.settle_failures() == 0
    assert ready(rabbit) == 0


def test_a_retry_the_broker_could_not_take_goes_back_to_its_queue_not_to_the_dlq(
    queues: QueueSet, rabbit: RabbitMQBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A publish that failed because of the broker's state (an alarm, an outage) says
    # nothing against the message: it must not be dead-lettered for it.
    books = Books()
    real_publish = rabbit.publish
    failures = [
        EnqueueUnknownError("blocked by an alarm", reason=PublishFailure.BLOCKED),
        NotEnqueuedError("could not reach RabbitMQ", reason=PublishFailure.UNREACHABLE),
        # A quorum queue electing a leader nacks publishes: the broker's state too.
        NotEnqueuedError("RabbitMQ refused the message (nack)", reason=PublishFailure.NACKED),
    ]

    def handle(job: Work, ctx: JobContext) -> None:
        books.add(job.n)
        if failures:  # each failing run meets one publish the broker cannot take
            raise Retryable("again")

    def flaky_publish(envelope: Envelope, *, delay: float | None = None) -> None:
        if failures:
            raise failures.pop(0)
        real_publish(envelope, delay=delay)

    Producer(rabbit, queues).enqueue(Work(n=1))
    monkeypatch.setattr(rabbit, "publish", flaky_publish)
    running = start(Worker(rabbit, queues, [Handler(Work, handle)]), None)
    wait_for(lambda: len(books.runs) == 4 and running.handle.in_flight() == 0, timeout=10)
    running.stop()

    assert books.runs == [1, 1, 1, 1], "run again after each publish the broker could not take"
    assert dead(rabbit) == 0, "nothing dead-lettered for the broker's state"
    assert not failures
    assert running.handle.settle_failures() == 3, "each one counted"
    assert ready(rabbit) == 0


def test_when_even_the_raw_dead_letter_fails_the_original_is_rejected_into_the_dlq(
    queues: QueueSet, rabbit: RabbitMQBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    books = Books()

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("refused")

    monkeypatch.setattr(rabbit, "publish_dead_letter", refuse)
    monkeypatch.setattr(rabbit, "publish_raw_dead_letter", refuse)

    def handle(job: Work, ctx: JobContext) -> None:
        books.add(job.n)
        raise Fatal("no")

    running = start(Worker(rabbit, queues, [Handler(Work, handle)]), None)
    Producer(rabbit, queues).enqueue(Work(n=1))
    with channel() as ch:
        ch.basic_publish("", QNAME, b"not an envelope")
    wait_for(lambda: dead(rabbit) == 2, timeout=10)
    running.stop()

    deaths = [props.headers["x-death"][0]["reason"] for props, _ in raw_dead_letters()]
    assert deaths == ["rejected", "rejected"], "the queue's own dead-letter settings moved them"
    assert books.runs == [1]
    assert running.handle.settle_failures() == 0
    assert ready(rabbit) == 0


# -- redeliveries ------------------------------------------------------------------------


def test_a_message_whose_settle_never_arrives_is_dead_lettered_after_five_redeliveries(
    queues: QueueSet, rabbit: RabbitMQBackend, lost_connections: list[logging.LogRecord]
) -> None:
    runs: list[bool] = []

    def handle(job: Work, ctx: JobContext) -> None:
        runs.append(ctx.redelivered)
        # The connection dies before the ack can reach the broker, every time.
        broker.close_all_connections("queuey hostile test")

    running = start(Worker(rabbit, queues, [Handler(Work, handle)]), None)
    Producer(rabbit, queues).enqueue(Work(n=1))
    wait_for(lambda: dead(rabbit) == 1, timeout=60)
    running.stop()

    assert runs == [False, True, True, True, True], "run once, then four redeliveries"
    ((props, _),) = raw_dead_letters()
    assert props.headers[topology.REASON_HEADER] == "redelivered 5 times without being settled"
    # An ack written just before the connection closed looks sent, so not every lost
    # settle is counted; the redeliveries are, whatever the acks looked like.
    assert 1 <= running.handle.settle_failures() <= 5
    assert ready(rabbit) == 0
    assert lost_connections, "the other tests' check of lost connections sees real ones"
