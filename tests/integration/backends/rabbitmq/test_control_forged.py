"""Forged ``reply_to`` on the control exchange, against real RabbitMQ (issue 27).

Publishing a reply to a direct reply-to address that does not decode, or names a node
hash outside the cluster, makes RabbitMQ 3.10 close the *replying* connection (541
INTERNAL_ERROR). Before the fix, a few such status requests a second closed every
worker's control connection and ``queuey workers`` listed none of the live workers.
Here a stream of them leaves every control connection open (never reconnected), each
forged request is counted as refused, and every worker is still listed, both by a
reply queue of the control exchange's naming and by a genuine direct reply-to address.
"""

from __future__ import annotations

import base64
import struct
import threading
import time
from collections.abc import Iterator

import pika
import pytest

from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq.control import EXCHANGE
from queuey_core.backends.rabbitmq.control import ControlLink
from queuey_core.control import VERSION
from queuey_core.control import Command
from queuey_core.control import ControlReply
from queuey_core.control import ControlRequest
from queuey_core.control import worker_statuses
from tests.conftest import require_broker
from tests.harness import AMQP_URL
from tests.support import wait_for

pytestmark = pytest.mark.integration

WORKERS = 3


def forged_addresses(real: str) -> list[str]:
    """Direct reply-to addresses RabbitMQ never gave anyone, each of a kind that closed
    the replying connection on our broker, and one job queue."""
    prefix = "amq.rabbitmq.reply-to."
    pid, key = real[len(prefix) :].split(".")
    raw = base64.b64decode(pid)

    def pid_of(node: bytes) -> str:
        body = b"\x83Xv" + struct.pack(">H", len(node)) + node + struct.pack(">III", 7, 0, 1)
        return base64.b64encode(body).decode()

    return [
        f"{prefix}!!!!.abcd",  # not base64
        f"{prefix}{base64.b64encode(b'hello').decode()}.{key}",  # not a term
        f"{prefix}{pid_of(b'evil@nowhere')}.{key}",  # a node that is no reply@<hash>
        f"{prefix}{pid_of(b'reply@12345')}.{key}",  # a node hash outside the cluster
        f"{prefix}{base64.b64encode(raw[:-1]).decode()}.{key}",  # cut short
        "ctl.forged.jobs",  # a job queue
    ]


@pytest.fixture
def workers() -> Iterator[list[tuple[Worker, RabbitMQBackend]]]:
    require_broker()
    started: list[tuple[Worker, RabbitMQBackend, threading.Thread]] = []
    for n in range(WORKERS):
        backend = RabbitMQBackend(AMQP_URL)
        worker = Worker(backend, QueueSet([QueueConfig(f"ctl.forged.{n}", prefetch=1)]), [])
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        started.append((worker, backend, thread))
    yield [(w, b) for w, b, _ in started]
    for worker, backend, thread in started:
        worker.handle.shutdown()
        thread.join(30)
        backend.close()


def control_link(backend: RabbitMQBackend) -> ControlLink:
    # The worker thread opens its control link as it starts, after its queues (and
    # since cancels, its cancel watch): the fixture does not wait for that.
    deadline = time.monotonic() + 30
    while not backend._controls and time.monotonic() < deadline:
        time.sleep(0.02)
    links = backend._controls
    assert len(links) == 1
    return links[0]


def mine(queues: tuple[str, ...]) -> bool:
    return len(queues) == 1 and queues[0].startswith("ctl.forged.")


def listed(asker: RabbitMQBackend) -> int:
    """How many of this test's workers ``queuey workers`` lists."""
    return sum(mine(s.queues) for s in worker_statuses(asker, timeout=0.5))


def direct_address() -> str:
    """A direct reply-to address as the broker gives one (to make forgeries from)."""
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        ch = conn.channel()
        ch.basic_consume("amq.rabbitmq.reply-to", lambda *_: None, auto_ack=True)
        own = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", own, b"", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
        props = None
        while props is None:
            props = ch.basic_get(own, auto_ack=True)[1]
        return str(props.reply_to)
    finally:
        conn.close()


def test_forged_reply_to_leaves_every_control_connection_open_and_every_worker_listed(
    workers: list[tuple[Worker, RabbitMQBackend]],
) -> None:
    asker = RabbitMQBackend(AMQP_URL)
    links = [control_link(backend) for _, backend in workers]
    try:
        wait_for(lambda: all(link.nodes and link.queue for link in links), timeout=30)
        wait_for(lambda: listed(asker) == WORKERS, timeout=30)
        before = [link.status().reconnects for link in links]

        conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        ch = conn.channel()
        replies: list[bytes] = []
        ch.basic_consume(
            "amq.rabbitmq.reply-to", lambda _c, _m, _p, body: replies.append(body), auto_ack=True
        )
        status = ControlRequest(v=VERSION, command=Command.STATUS).encode()
        direct = pika.BasicProperties(reply_to="amq.rabbitmq.reply-to")
        ch.basic_publish(EXCHANGE, "", status, direct)

        def answered() -> bool:
            conn.process_data_events(0.05)
            return sum(mine(ControlReply.decode(r).worker.queues) for r in replies) == WORKERS

        wait_for(answered, timeout=30)  # as an older `queuey workers` asks

        forged = forged_addresses(direct_address())
        rounds = 20
        for n in range(rounds):
            for reply_to in forged:
                props = pika.BasicProperties(reply_to=reply_to, correlation_id=f"f{n}")
                ch.basic_publish(EXCHANGE, "", status, props)
            conn.process_data_events(0.05)
            if n == rounds // 2:
                assert listed(asker) == WORKERS, "every worker is listed mid-stream"
        conn.close()

        sent = rounds * len(forged)
        wait_for(lambda: all(link.refused >= sent for link in links), timeout=30)
        for link, reconnects in zip(links, before, strict=True):
            state = link.status()
            assert state.state == "open", "the control connection stayed open"
            assert state.reconnects == reconnects, "and was never lost and regained"
            assert link.refused == sent, "every forged request was refused, and only those"
        assert listed(asker) == WORKERS, "every live worker is still listed"
    finally:
        asker.close()
