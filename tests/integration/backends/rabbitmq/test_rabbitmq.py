"""What only the RabbitMQ backend can show: topology, errors, headers, long delays."""

from __future__ import annotations

import threading
import time
import uuid
from typing import ClassVar

import pytest

from queuey_core import BackendError
from queuey_core import ConfigError
from queuey_core import Envelope
from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueKind
from queuey_core import QueueSet
from queuey_core import RetryPolicy
from queuey_core import Worker
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq import topology
from tests.conftest import require_broker
from tests.harness import BROKER_HOST
from tests.harness import BROKER_PORT
from tests.integration.broker import channel
from tests.integration.broker import delete_queues
from tests.integration.broker import list_json
from tests.integration.broker import unique
from tests.support import start
from tests.support import wait_for

pytestmark = pytest.mark.integration


def envelope(queue: str, **payload: object) -> Envelope:
    return Envelope(
        job_id=uuid.uuid4(),
        job_type="it.job",
        queue=queue,
        enqueued_at=int(time.time() * 1000),
        payload=dict(payload),
    )


def test_declared_queues_are_durable_with_priorities_and_a_dead_letter_queue(
    rabbit: RabbitMQBackend,
) -> None:
    name = unique("it.topology")
    rabbit.declare([QueueConfig(name, max_priority=10)])
    try:
        rows = {r["name"]: r for r in list_json("queues", "name", "durable", "arguments", "type")}
        assert rows[name]["durable"] is True
        assert rows[name]["arguments"]["x-max-priority"] == 10
        assert rows[name]["arguments"]["x-dead-letter-routing-key"] == f"{name}.dlq"
        assert rows[f"{name}.dlq"]["type"] == "classic"
        for level in (0, topology.DELAY_LEVELS - 1):
            ladder = rows[topology.delay_name(level)]
            assert (ladder["type"], ladder["durable"]) == ("quorum", True)
            assert ladder["arguments"]["x-message-ttl"] == 2**level
            assert "x-expires" not in ladder["arguments"], "x-expires loses held messages"
    finally:
        delete_queues(name)


def test_the_number_of_broker_objects_does_not_grow_with_distinct_delays(
    rabbit: RabbitMQBackend,
) -> None:
    name = unique("it.objects")
    q = QueueConfig(name, prefetch=0)
    rabbit.declare([q])
    try:
        before = (len(list_json("queues", "name")), len(list_json("exchanges", "name")))
        rabbit.publish_many([(envelope(name, n=i), 0.05 + i * 0.037) for i in range(25)])
        after = (len(list_json("queues", "name")), len(list_json("exchanges", "name")))
        assert after == before, "25 distinct delays must not create broker objects"
        deadline = time.monotonic() + 15
        while rabbit.queue_counts(name)[0] < 25 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert rabbit.queue_counts(name)[0] == 25, "every delayed message arrived"
    finally:
        delete_queues(name)


def test_a_delay_of_days_is_held_by_the_broker(rabbit: RabbitMQBackend) -> None:
    name = unique("it.days")
    rabbit.declare([QueueConfig(name)])
    three_days = 3 * 86_400.0
    level = (topology.delay_ms(three_days)).bit_length() - 1
    try:
        rabbit.publish(envelope(name, n=1), delay=three_days)
        with channel() as ch:
            deadline = time.monotonic() + 5
            count = 0
            while count == 0 and time.monotonic() < deadline:
                frame = ch.queue_declare(topology.delay_name(level), passive=True)
                count = frame.method.message_count
            assert count == 1, f"held at level {level} ({2**level / 3_600_000:.1f} h)"
            ch.queue_purge(topology.delay_name(level))  # it would outlive the test's queue
    finally:
        delete_queues(name)


def test_a_quorum_queue_with_priorities_is_a_clear_config_error(rabbit: RabbitMQBackend) -> None:
    name = unique("it.quorum")
    with pytest.raises(ConfigError, match="quorum queues on RabbitMQ 3"):
        rabbit.declare([QueueConfig(name, kind=QueueKind.QUORUM, max_priority=5)])


def test_a_declare_refused_among_the_batch_is_a_config_error_naming_its_queue(
    rabbit: RabbitMQBackend,
) -> None:
    # The declares go out together, nowait but the last: a refusal in the middle (the
    # dead-letter queue, declared before its queue and the binding) must still surface,
    # as the error of that queue, and leave the backend able to declare the next ones.
    name, other = unique("it.refused"), unique("it.after")
    with channel() as ch:
        ch.queue_declare(f"{name}.dlq", durable=True, arguments={"x-queue-type": "quorum"})
    try:
        with pytest.raises(ConfigError, match=rf"{name}\.dlq.*other settings"):
            rabbit.declare([QueueConfig(name)])
        names = {r["name"] for r in list_json("queues", "name")}
        assert name not in names, "nothing after the refused declare takes effect"
        rabbit.declare([QueueConfig(other)])
        assert rabbit.queue_counts(other) == (0, 0), "the next declare works"
    finally:
        delete_queues(name, f"{name}.dlq", other)


def test_a_quorum_queue_round_trips(rabbit: RabbitMQBackend) -> None:
    name = unique("it.quorum")

    class QJob(Job):
        NAME: ClassVar[str] = "it.qjob"
        QUEUE: ClassVar[str] = name
        n: int

    queues = QueueSet([QueueConfig(name, kind=QueueKind.QUORUM, prefetch=5)])
    seen: list[int] = []

    def handle(job: QJob, ctx: JobContext) -> None:
        seen.append(job.n)

    try:
        worker = Worker(rabbit, queues, [Handler(QJob, handle)])
        Producer(rabbit, queues).enqueue_many([QJob(n=i) for i in range(10)])
        running = start(worker, None)
        wait_for(lambda: len(seen) == 10)
        running.stop()
        rows = {r["name"]: r for r in list_json("queues", "name", "type")}
        assert rows[name]["type"] == "quorum"
    finally:
        delete_queues(name)


def test_an_unreachable_broker_is_one_clear_error_without_the_password() -> None:
    with pytest.raises(BackendError) as err:
        RabbitMQBackend("amqp://guest:s3cret@127.0.0.1:1/%2F", connect_timeout=1)
    assert "cannot reach RabbitMQ at amqp://guest:***@127.0.0.1:1/" in str(err.value)
    assert "s3cret" not in str(err.value)


def test_wrong_credentials_are_one_clear_error_without_the_password() -> None:
    require_broker()
    with pytest.raises(BackendError) as err:
        RabbitMQBackend(
            f"amqp://guest:wrong-s3cret@{BROKER_HOST}:{BROKER_PORT}/%2F", connect_timeout=2
        )
    assert "refused the credentials" in str(err.value)
    assert "wrong-s3cret" not in str(err.value)


def test_a_malformed_url_is_a_config_error_without_the_password() -> None:
    with pytest.raises(ConfigError) as err:
        RabbitMQBackend("amqp://guest:s3cret@127.0.0.1:notaport/%2F")
    assert "s3cret" not in str(err.value)


def test_a_dead_letter_carries_its_reason_time_and_attempt_in_headers(
    rabbit: RabbitMQBackend,
) -> None:
    name = unique("it.headers")
    rabbit.declare([QueueConfig(name)])
    try:
        env = envelope(name, n=1).next_attempt()
        before = int(time.time() * 1000)
        rabbit.publish_dead_letter(env, "fatal error: bad input")
        with channel() as ch:
            method, props, body = ch.basic_get(f"{name}.dlq", auto_ack=True)
        assert method is not None
        headers = props.headers
        assert headers[topology.REASON_HEADER] == "fatal error: bad input"
        assert headers[topology.ATTEMPT_HEADER] == 2
        assert before <= headers[topology.DEAD_AT_HEADER] <= int(time.time() * 1000)
        assert props.delivery_mode == 2, "persistent"
        assert Envelope.decode(body) == env
    finally:
        delete_queues(name)


def test_a_message_that_is_not_an_envelope_is_dead_lettered_not_lost(
    rabbit: RabbitMQBackend,
) -> None:
    name = unique("it.garbage")

    class G(Job):
        NAME: ClassVar[str] = "it.g"
        QUEUE: ClassVar[str] = name

    queues = QueueSet([QueueConfig(name, prefetch=1, retry=RetryPolicy(1))])
    try:
        worker = Worker(rabbit, queues, [Handler(G, lambda job, ctx: None)])
        with channel() as ch:
            ch.basic_publish("", name, b"\x00not json at all")
        running = start(worker, None)
        with channel() as ch:
            deadline = time.monotonic() + 10
            count = 0
            while count == 0 and time.monotonic() < deadline:
                count = ch.queue_declare(f"{name}.dlq", passive=True).method.message_count
                time.sleep(0.05)
            _, props, body = ch.basic_get(f"{name}.dlq", auto_ack=True)
        assert body == b"\x00not json at all", "the body is kept as it was"
        reason = props.headers[topology.REASON_HEADER]
        assert reason.startswith("not a queuey envelope: Invalid JSON"), reason
        assert not running.is_finished(), "the worker carries on"
        running.stop()
    finally:
        delete_queues(name)


def test_concurrent_single_enqueues_are_all_confirmed(rabbit: RabbitMQBackend) -> None:
    name = unique("it.concurrent")

    class C(Job):
        NAME: ClassVar[str] = "it.c"
        QUEUE: ClassVar[str] = name
        n: int

    queues = QueueSet([QueueConfig(name)])
    producer = Producer(rabbit, queues)
    errors: list[BaseException] = []

    def publish(start: int) -> None:
        try:
            for i in range(start, start + 150):
                producer.enqueue(C(n=i))  # the direct path when free, else the link
        except BaseException as exc:
            errors.append(exc)

    try:
        threads = [threading.Thread(target=publish, args=(k * 150,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        deadline = time.monotonic() + 10
        while rabbit.queue_counts(name)[0] < 1200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert rabbit.queue_counts(name)[0] == 1200
    finally:
        delete_queues(name)
