"""Dead letters under the fault suite's faults (issue 28), on the tests' own node: a
requeue of all cut by closed connections or by the broker stopping has moved whole
transactions only and says how many; a listing cut short gives everything back in
order; two operators at once (one requeues everything while the other pages and
streams) lose, duplicate and reorder nothing."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterator

import pika
import pytest

from queuey_core import BackendError
from queuey_core import DeadLetterMoveError
from queuey_core import Envelope
from queuey_core import QueueConfig
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq.dead_letter_moves import BATCH
from queuey_core.backends.rabbitmq.dead_letter_pass import HEAD
from queuey_core.backends.rabbitmq.dead_letters import dead_letter_pub
from tests.integration.nodes import Node

pytestmark = pytest.mark.integration

N = BATCH * 4


@pytest.fixture
def queue(node: Node) -> Iterator[str]:
    """A queue of the node whose dead-letter queue holds N dead letters (deleted after)."""
    name = f"faults.dlq.{uuid.uuid4().hex[:8]}"
    backend = RabbitMQBackend(node.url())
    backend.declare([QueueConfig(name)])
    backend.close()
    yield name
    with contextlib.suppress(pika.exceptions.AMQPError):
        conn = pika.BlockingConnection(pika.URLParameters(node.url()))
        ch = conn.channel()
        ch.queue_delete(name)
        ch.queue_delete(f"{name}.dlq")
        conn.close()


def fill(node: Node, queue: str, n: int = N) -> list[str]:
    """``n`` dead letters of ``queue``, as a worker publishes them; their ids in order."""
    conn = pika.BlockingConnection(pika.URLParameters(node.url()))
    ch = conn.channel()
    ch.confirm_delivery()
    ids = []
    for i in range(n):
        env = Envelope(
            job_id=uuid.uuid4(),
            job_type="t",
            queue=queue,
            attempt=3,
            enqueued_at=int(time.time() * 1000),
            payload={"i": i},
        )
        pub = dead_letter_pub(env, "max attempts (3) reached")
        ch.basic_publish(pub.exchange, pub.routing_key, pub.body, pub.props)
        ids.append(str(env.job_id))
    conn.close()
    return ids


def books(node: Node, queue: str) -> tuple[list[str], list[str]]:
    """The job ids on ``queue`` and, in order, in its dead-letter queue (read, then given
    back: the test is done with both)."""
    conn = pika.BlockingConnection(pika.URLParameters(node.url()))
    ch = conn.channel()
    found: dict[str, list[str]] = {}
    for name in (queue, f"{queue}.dlq"):
        found[name] = []
        while (got := ch.basic_get(name))[0] is not None:
            found[name].append(str(got[1].message_id))
    conn.close()  # everything goes back
    return found[queue], found[f"{queue}.dlq"]


def cut_requeue(node: Node, queue: str, fault: Callable[[], None]) -> DeadLetterMoveError:
    backend = RabbitMQBackend(node.url())
    faulted: list[int] = []

    def progress(moved: int) -> None:
        if not faulted:
            faulted.append(moved)
            fault()

    try:
        with pytest.raises(DeadLetterMoveError) as cut:
            backend.requeue_dead_letters(queue, progress=progress)
    finally:
        backend.close()
    assert faulted == [BATCH], "the fault struck after the first transaction"
    return cut.value


def assert_moved_exactly(node: Node, queue: str, ids: list[str], moved: int) -> None:
    on_queue, dead = books(node, queue)
    assert sorted(on_queue) == sorted(ids[:moved]), "what it said it moved, once each"
    assert dead == ids[moved:], "the rest are dead letters still, in order"


def test_a_requeue_cut_by_closed_connections_says_what_it_moved_and_moved_it_once(
    node: Node, queue: str
) -> None:
    ids = fill(node, queue)
    cut = cut_requeue(node, queue, node.close_all_connections)
    assert cut.moved == BATCH
    assert f"interrupted after {BATCH} moved" in str(cut)
    assert_moved_exactly(node, queue, ids, cut.moved)


def test_a_requeue_cut_by_the_broker_stopping_loses_nothing_once_it_is_back(
    node: Node, queue: str
) -> None:
    ids = fill(node, queue)
    cut = cut_requeue(node, queue, node.stop_app)
    node.start_app()
    assert cut.moved == BATCH
    assert_moved_exactly(node, queue, ids, cut.moved)


def test_a_stream_cut_by_a_closed_connection_gives_every_dead_letter_back_in_order(
    node: Node, queue: str
) -> None:
    ids = fill(node, queue)
    backend = RabbitMQBackend(node.url())
    seen = []
    with pytest.raises(BackendError):  # noqa: PT012 (the fault comes mid-iteration)
        for dead in backend.iter_dead_letters(queue):
            seen.append(dead.handle)
            if len(seen) == 100:
                node.close_all_connections()
    backend.close()
    assert seen[:100] == ids[:100]
    assert books(node, queue) == ([], ids)


def test_two_operators_at_once_lose_duplicate_and_reorder_nothing(node: Node, queue: str) -> None:
    ids = fill(node, queue)
    two_operators(node, queue, ids, RabbitMQBackend(node.url()), RabbitMQBackend(node.url()))


def two_operators(
    node: Node, queue: str, ids: list[str], mover: RabbitMQBackend, reader: RabbitMQBackend
) -> None:
    """``mover`` requeues every dead letter of ``queue`` while ``reader`` pages and
    streams: what is listed is in order and never twice, and each is requeued once."""
    errors: list[BaseException] = []

    def requeue_all() -> None:
        try:
            while mover.dead_letter_page(queue, limit=1).total:
                mover.requeue_dead_letters(queue)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=requeue_all)
    thread.start()
    position = {h: i for i, h in enumerate(ids)}
    listings = 0
    while thread.is_alive() or listings < 2:
        page = reader.dead_letter_page(queue, offset=0, limit=200)
        streamed = [d.handle for d in reader.iter_dead_letters(queue)]
        for shown in ([d.handle for d in page.letters], streamed):
            assert len(shown) == len(set(shown)), "nothing listed twice"
            assert [position[h] for h in shown] == sorted(position[h] for h in shown), (
                "what is listed is in dead-letter order"
            )
        listings += 1
    thread.join()
    mover.close()
    reader.close()
    assert errors == []
    on_queue, dead = books(node, queue)
    assert dead == []
    assert sorted(on_queue) == sorted(ids), "every dead letter requeued exactly once"


def test_a_dead_letter_past_the_head_is_found_and_the_queue_stays_whole(
    node: Node, queue: str
) -> None:
    ids = fill(node, queue, HEAD + 20)
    backend = RabbitMQBackend(node.url())
    try:
        for job_id in (ids[3], ids[HEAD + 10], ids[-1]):
            found = backend.get_dead_letter(queue, job_id)
            assert found is not None, f"{ids.index(job_id)} found in the head, or after it"
            assert found.handle == job_id
        assert backend.get_dead_letter(queue, str(uuid.uuid4())) is None
        page = backend.dead_letter_page(queue, offset=HEAD + 5, limit=10)
        assert [d.handle for d in page.letters] == ids[HEAD + 5 : HEAD + 15]
    finally:
        backend.close()
    assert books(node, queue) == ([], ids)
