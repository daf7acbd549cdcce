"""A consumer keeps consuming through what a recovering broker answers.

After a crash, RabbitMQ can refuse a consumer for a while (a durable queue it has not
brought back yet answers 404), or not answer at all. A worker whose consumer gave up on
the first refusal stayed connected and idle for good (the quorum kill -9 fault test saw
it once). These tests make the broker refuse in those ways, in a virtual host of their
own, and check that the consumer comes back once the broker serves the queue again,
without a hot loop of channels meanwhile, and that it still ends when the queue stays
missing past the recovery timeout.
"""

from __future__ import annotations

import logging
import queue
import time
import urllib.parse
import uuid
from collections.abc import Callable
from collections.abc import Iterator

import pika
import pytest

from queuey_core import Envelope
from queuey_core.backends.base import ConsumerEnded
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq.delivery import RabbitDelivery
from queuey_core.queues import QueueConfig
from tests import harness
from tests.conftest import require_broker
from tests.integration.broker import HOSTPORT
from tests.integration.broker import rabbitmqctl

pytestmark = pytest.mark.integration

VHOST = "queuey-consumer-recovery" if harness.VHOST == "/" else f"{harness.VHOST}.recovery"
URL = f"amqp://guest:guest@{HOSTPORT}/{urllib.parse.quote(VHOST, safe='')}"
QUEUE = "recovering"


def allow(read: str = ".*") -> None:
    rabbitmqctl("set_permissions", "-p", VHOST, "guest", ".*", ".*", read)


@pytest.fixture
def vhost() -> Iterator[None]:
    require_broker()
    rabbitmqctl("add_vhost", VHOST)
    allow()
    try:
        yield
    finally:
        rabbitmqctl("delete_vhost", VHOST)


@pytest.fixture
def consumer_log(vhost: None, caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The consumer's warnings, captured, in the tests' own virtual host."""
    caplog.set_level(logging.WARNING, logger="queuey_core.backends.rabbitmq.consumer")
    return caplog


def declare() -> None:
    conn = pika.BlockingConnection(pika.URLParameters(URL))
    try:
        conn.channel().queue_declare(QUEUE, durable=True)
    finally:
        conn.close()


def send(backend: RabbitMQBackend, name: str) -> None:
    backend.publish(
        Envelope(
            job_id=uuid.uuid4(),
            job_type="it.job",
            queue=QUEUE,
            enqueued_at=int(time.time() * 1000),
            payload={"name": name},
        )
    )


def kick() -> None:
    """Close the vhost's connections, as a broker restart would."""
    rabbitmqctl("close_all_connections", "-p", VHOST, "queuey consumer recovery test")


def next_item(items: queue.SimpleQueue[object], seconds: float) -> object:
    try:
        return items.get(timeout=seconds)
    except queue.Empty:
        return None


def reopenings(caplog: pytest.LogCaptureFixture) -> int:
    return sum("closed a consumer channel" in r.getMessage() for r in caplog.records)


def delete_while_away() -> None:
    """Delete the queue while the consumer is kept from it (it is refused reading)."""
    allow(read="^$")
    kick()
    rabbitmqctl("delete_queue", "-p", VHOST, QUEUE)
    allow()


def assert_consumes(backend: RabbitMQBackend, items: queue.SimpleQueue[object], name: str) -> None:
    """A job published now reaches the consumer."""
    send(backend, name)
    got = next_item(items, 15)
    assert isinstance(got, RabbitDelivery), got
    assert got.envelope.payload == {"name": name}
    got.ack()


def not_found(caplog: pytest.LogCaptureFixture) -> int:
    return sum("NOT_FOUND" in r.getMessage() for r in caplog.records)


def until(done: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def subscribed(recovery_timeout: float) -> tuple[RabbitMQBackend, queue.SimpleQueue[object]]:
    declare()
    backend = RabbitMQBackend(URL, recovery_timeout=recovery_timeout, publish_timeout=10)
    items: queue.SimpleQueue[object] = queue.SimpleQueue()
    backend.consume(QueueConfig(QUEUE, prefetch=4), items.put)
    assert_consumes(backend, items, "before")
    return backend, items


def test_a_refused_consume_is_tried_again_with_pauses_until_the_broker_serves_it(
    consumer_log: pytest.LogCaptureFixture,
) -> None:
    backend, items = subscribed(recovery_timeout=60)
    try:
        allow(read="^$")  # basic.consume is refused (403) from now on
        kick()
        assert until(lambda: reopenings(consumer_log) >= 2, 30), "refused twice"
        before = reopenings(consumer_log)
        time.sleep(3)
        # The pauses grow 0.2, 0.5, 1, 2 s from here: a few in 3 s, never a hot loop.
        assert reopenings(consumer_log) - before <= 6, reopenings(consumer_log) - before
        # The connection is open, yet nothing comes from the queue: health checks see it.
        status = backend.connection_status()["consumer"]
        assert (status.state, status.unanswered) == ("open", (QUEUE,))
        allow()
        assert_consumes(backend, items, "after")
        assert backend.connection_status()["consumer"].unanswered == ()
    finally:
        backend.close()


def test_a_queue_missing_after_a_recovery_is_asked_for_until_it_is_back(
    consumer_log: pytest.LogCaptureFixture,
) -> None:
    backend, items = subscribed(recovery_timeout=60)
    try:
        delete_while_away()  # now it is answered 404, as a durable queue not yet recovered is
        assert until(lambda: not_found(consumer_log) >= 2, 30), "asked again after a 404"
        assert next_item(items, 0) is None, "no ConsumerEnded: the queue may come back"
        declare()
        assert_consumes(backend, items, "back")
    finally:
        backend.close()


def test_a_queue_missing_past_the_recovery_timeout_ends_the_consumer(vhost: None) -> None:
    backend, items = subscribed(recovery_timeout=2)
    try:
        delete_while_away()
        ended = next_item(items, 20)
        assert isinstance(ended, ConsumerEnded), ended
        assert "does not exist" in str(ended.error)
    finally:
        backend.close()
