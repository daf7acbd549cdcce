"""Dead letters kept in the job store (issue 28) under faults: a requeue cut by closed
connections says what it moved and moved it once; a store that is down when a job
dies sends its dead letter to ``<queue>.dlq``, and the next command imports it; an
import cut between its commit and its acks neither loses nor duplicates; a requeue
that died between the broker's commit and the store's delete is reported in doubt by
the next one; two operators at once (one requeues, the other lists) see each dead
letter once, in order."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path

import pika
import pytest

from queuey_core import DeadLetterMoveError
from queuey_core import Envelope
from queuey_core import QueueConfig
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq.dead_letter_index import BATCH
from queuey_core.backends.rabbitmq.dead_letter_index import IMPORT_BATCH
from queuey_core.results.dead_letter_sql import Row
from queuey_core.results.dead_letter_table import DeadLetterTable
from queuey_core.results.dead_letter_table import open_dead_letter_table
from queuey_core.trace_context import TraceContext
from tests.harness import AMQP_URL
from tests.integration.backends.rabbitmq.test_dead_letter_faults import books
from tests.integration.backends.rabbitmq.test_dead_letter_faults import fill
from tests.integration.backends.rabbitmq.test_dead_letter_faults import two_operators
from tests.integration.backends.test_backend_contract import Collector
from tests.integration.nodes import Node
from tests.support import named_envelope

pytestmark = pytest.mark.integration

N = BATCH * 4


class Broker:
    """What :func:`fill` and :func:`books` need of a node: its URL (the test vhost)."""

    def url(self) -> str:
        return AMQP_URL


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def declared(url: str) -> Iterator[str]:
    name = f"store.dlq.{uuid.uuid4().hex[:8]}"
    backend = RabbitMQBackend(url)
    backend.declare([QueueConfig(name)])
    backend.close()
    yield name
    with contextlib.suppress(pika.exceptions.AMQPError):
        conn = pika.BlockingConnection(pika.URLParameters(url))
        ch = conn.channel()
        ch.queue_delete(name)
        ch.queue_delete(f"{name}.dlq")
        conn.close()


@pytest.fixture
def queue() -> Iterator[str]:
    """A queue of the test vhost (deleted after)."""
    yield from declared(AMQP_URL)


@pytest.fixture
def node_queue(node: Node) -> Iterator[str]:
    """A queue of the test's own node (deleted after)."""
    yield from declared(node.url())


def with_store(url: str, store: str) -> tuple[RabbitMQBackend, DeadLetterTable]:
    backend = RabbitMQBackend(url, publish_timeout=10)
    table = open_dead_letter_table(store)
    backend.keep_dead_letters_in(table)
    return backend, table


def rows(table: DeadLetterTable, queue: str) -> list[str]:
    return [str(s.row.handle) for s in table.stream(queue)]


def test_a_requeue_cut_by_closed_connections_says_what_it_moved_and_moved_it_once(
    node: Node, node_queue: str, store: str
) -> None:
    ids = fill(node, node_queue)
    backend, table = with_store(node.url(), store)
    assert backend.import_dead_letters(node_queue) == N
    faulted: list[int] = []

    def progress(moved: int) -> None:
        if not faulted:
            faulted.append(moved)
            node.close_all_connections()

    try:
        with pytest.raises(DeadLetterMoveError) as cut:
            backend.requeue_dead_letters(node_queue, progress=progress)
    finally:
        backend.close()
    assert faulted == [BATCH]
    assert cut.value.moved == BATCH
    assert f"interrupted after {BATCH} moved" in str(cut.value)
    on_queue, dead = books(node, node_queue)
    assert sorted(on_queue) == sorted(ids[:BATCH]), "what it said it moved, once each"
    assert dead == []
    table = open_dead_letter_table(store)
    assert rows(table, node_queue) == ids[BATCH:], "the rest are dead letters, in order"
    assert table.release_stale(node_queue) == 0, "nothing left claimed"
    table.close()


def test_a_dead_letter_made_while_the_store_is_down_lands_in_the_dlq_and_is_imported(
    queue: str, store: str, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    down, _ = with_store(AMQP_URL, f"sqlite:///{tmp_path / 'a-file' / 'store.db'}")
    q = QueueConfig(queue)
    sent = [named_envelope(queue, f"j{i}") for i in range(5)]
    down.publish_many([(e, None) for e in sent])
    got = Collector(lambda: 0.0)
    sub = down.consume(q, got)
    try:
        deadline = 200
        while len(got.deliveries()) < 5 and deadline:
            threading.Event().wait(0.05)
            deadline -= 1
        for d in got.deliveries():
            d.dead_letter("boom")
    finally:
        sub.close()
    assert down.dead_letter_fallbacks == 5
    down.close()
    assert books(Broker(), queue)[1] == [str(e.job_id) for e in sent], "in <queue>.dlq"  # type: ignore[arg-type]
    backend, _ = with_store(AMQP_URL, store)
    try:
        listed = [d.handle for d in backend.list_dead_letters(queue)]
        assert listed == [str(e.job_id) for e in sent], "imported, nothing lost"
        assert backend.unimported_dead_letters(queue) == 0
        assert backend.dead_letter_fallbacks == 0
    finally:
        backend.close()


def test_an_import_cut_between_its_commit_and_its_acks_loses_and_duplicates_nothing(
    queue: str, store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = IMPORT_BATCH * 2 + 10
    ids = fill(Broker(), queue, n)  # type: ignore[arg-type]
    backend, table = with_store(AMQP_URL, store)
    insert = table.insert
    calls: list[int] = []

    def cut_after_second_commit(batch: Sequence[Row]) -> None:
        insert(batch)
        calls.append(len(batch))
        if len(calls) == 2:
            raise ConnectionResetError("cut after the commit, before the acks")

    monkeypatch.setattr(table, "insert", cut_after_second_commit)
    try:
        with pytest.raises(ConnectionResetError):
            backend.import_dead_letters(queue)
        monkeypatch.setattr(table, "insert", insert)
        assert table.count(queue) == IMPORT_BATCH * 2, "two batches committed"
        assert backend.unimported_dead_letters(queue) == n - IMPORT_BATCH, "one acked"
        assert backend.import_dead_letters(queue) == n - IMPORT_BATCH
        assert rows(table, queue) == ids, "each once, in order"
        assert backend.unimported_dead_letters(queue) == 0
    finally:
        backend.close()


def test_a_requeue_that_died_before_deleting_its_claim_is_reported_in_doubt(
    queue: str, store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = fill(Broker(), queue, BATCH * 2)  # type: ignore[arg-type]
    backend, table = with_store(AMQP_URL, store)

    def crash(token: str) -> int:
        raise KeyboardInterrupt  # the process dies between the broker's commit and this

    delete_claimed = table.delete_claimed
    monkeypatch.setattr(table, "delete_claimed", crash)
    try:
        with pytest.raises(KeyboardInterrupt):
            backend.requeue_dead_letters(queue)
        monkeypatch.setattr(table, "delete_claimed", delete_claimed)
        with pytest.raises(DeadLetterMoveError) as doubt:
            backend.requeue_dead_letters(queue)
        assert doubt.value.in_doubt == BATCH
        assert doubt.value.moved == 0
        assert rows(table, queue) == ids, "dead letters again, none lost"
        assert backend.requeue_dead_letters(queue) == BATCH * 2, "the next one goes on"
    finally:
        backend.close()
    on_queue, dead = books(Broker(), queue)  # type: ignore[arg-type]
    assert sorted(on_queue) == sorted(ids + ids[:BATCH]), "the batch in doubt, twice"
    assert dead == []


def test_two_operators_at_once_lose_duplicate_and_reorder_nothing(queue: str, store: str) -> None:
    ids = fill(Broker(), queue, N)  # type: ignore[arg-type]
    mover, _ = with_store(AMQP_URL, store)
    reader, _ = with_store(AMQP_URL, store)
    two_operators(Broker(), queue, ids, mover, reader)  # type: ignore[arg-type]


def test_a_requeued_row_keeps_its_trace_and_starts_again_at_attempt_1(
    queue: str, store: str
) -> None:
    trace = TraceContext.from_headers(
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    )
    assert trace is not None
    envelope = named_envelope(queue, "traced").model_copy(update={"attempt": 3})
    backend, table = with_store(AMQP_URL, store)
    try:
        backend.publish_dead_letter(envelope.with_trace(trace), "max attempts (3) reached")
        assert table.count(queue) == 1, "a row, not a message of <queue>.dlq"
        assert backend.requeue_dead_letters(queue, [str(envelope.job_id)]) == 1
    finally:
        backend.close()
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    method, props, body = conn.channel().basic_get(queue, auto_ack=True)
    conn.close()
    assert method is not None
    assert props.headers["traceparent"] == trace.traceparent
    assert props.message_id == str(envelope.job_id)
    assert Envelope.decode(body) == envelope.model_copy(update={"attempt": 1})
