"""The clients of the cluster tests, and where they are: a producer thread that runs
until told to stop, and what the worker's log and the backends say about their nodes."""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from queuey_core import NotEnqueuedError
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core.backends.rabbitmq import RabbitMQBackend
from tests.integration import ledger
from tests.integration.cluster import Cluster
from tests.integration.fleet import WorkerProcess
from tests.integration.ledger import Books
from tests.integration.nodes import Node
from tests.integration.nodes import port_open

T = TypeVar("T")

BATCH = 50
#: The producer's pace: a batch, then this pause (about 80 jobs/s), until told to stop.
PAUSE = 0.5


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what} (waited {timeout:g}s)"
        time.sleep(0.1)


def worker_moved_off(worker: WorkerProcess, gone: Node, since: float) -> str:
    """The node the worker's consumer reconnected to after ``since``, once it is not
    ``gone`` (from the worker's own log: it names the node it reached)."""
    found: list[str] = []

    def reconnected() -> bool:
        for e in worker.events():
            at = e.get("time", "")
            if (
                e.get("link") == "consumer"
                and e["message"].startswith("reconnected to RabbitMQ")
                and _epoch(at) >= since
                and f":{gone.amqp_port}/" not in e.get("node", "")
            ):
                found.append(e["node"])
                return alive(worker)
        return False

    wait_until(reconnected, "the worker's consumer never reconnected to another node")
    return found[-1]


def producer_moved_off(feeder: Stream, gone: Node) -> str:
    """The node the producer's publisher connection is open on, once it is not ``gone``
    (the backend says where each connection is)."""

    def elsewhere() -> bool:
        link = feeder.rabbit.connection_status().get("publisher")
        return link is not None and link.state == "open" and f":{gone.amqp_port}/" not in link.node

    wait_until(elsewhere, f"the producer never reconnected to another node: {feeder.state()}")
    return feeder.rabbit.connection_status()["publisher"].node


def node_at(cluster: Cluster, url: str) -> Node | None:
    """The node a (redacted) URL points at, by its port."""
    return next((n for n in cluster.nodes if f":{n.amqp_port}/" in url), None)


def worker_node(cluster: Cluster, worker: WorkerProcess) -> Node | None:
    """The node the worker consumes from: the last one its log says it reconnected to,
    else (never reconnected) the one ``rabbitmqctl list_connections`` shows."""
    nodes = [
        e["node"]
        for e in worker.events()
        if e.get("link") == "consumer" and e["message"].startswith("reconnected to RabbitMQ")
    ]
    return node_at(cluster, nodes[-1]) if nodes else cluster.node_of(worker.pid, "consumer")


def _epoch(iso: str) -> float:
    """A log record's ``time`` (``2026-11-30T08:16:41.958Z``) as seconds since the epoch."""
    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def port_of(node_url: str) -> str:
    return node_url.rsplit(":", 1)[-1].split("/", maxsplit=1)[0]  # the port


def alive(worker: WorkerProcess) -> bool:
    """True while the worker runs; fails the test with its errors once it has exited."""
    code = worker.proc.poll()
    assert code is None, (
        f"the worker exited with {code}: {worker.errors()} {worker.log.read_text()[-500:]}"
    )
    return True


class Stream(threading.Thread):
    """A producer that enqueues batches of ledger jobs (each confirmed before the next)
    until :meth:`finish`: it runs for as long as the faults take, however slow the
    machine, and keeps the job ids it got."""

    def __init__(self, url: str, queues: QueueSet) -> None:
        super().__init__(name="stream", daemon=True)
        self.rabbit = RabbitMQBackend(url, publish_timeout=90, recovery_timeout=90)
        self._producer = Producer(self.rabbit, queues)
        self._halt = threading.Event()
        self.ids: list[str] = []
        self.refusals = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                jobs = [ledger.Quorum(ms=1) for _ in range(BATCH)]
                try:
                    self.ids.extend(str(j) for j in self._producer.enqueue_many(jobs))
                except NotEnqueuedError as exc:
                    # Refused while a queue elects a new leader: what was confirmed is
                    # kept, the rest is safe to send again (docs/scaling.md).
                    self.ids.extend(str(j) for j in exc.confirmed)
                    self.refusals += 1
                    self._halt.wait(0.5)
                    continue
                self._halt.wait(PAUSE)
        except BaseException as exc:
            self.error = exc
        finally:
            self.rabbit.close()

    def state(self) -> str:
        """Where the producer stands, for a failure's message."""
        return (
            f"{len(self.ids)} enqueued, {self.refusals} batches refused, alive "
            f"{self.is_alive()}, error {self.error!r}, "
            f"connections {self.rabbit.connection_status()}"
        )

    def stop(self) -> None:
        """Stop after the batch in hand."""
        self._halt.set()

    def finish(self, timeout: float) -> list[str]:
        """Stop after the batch in hand is confirmed; the ids enqueued."""
        self.stop()
        self.join(timeout)
        assert not self.is_alive(), "the producer did not finish"
        assert self.error is None, f"the producer failed: {self.error!r}"
        return self.ids


def feeder_reconnects(feeder: Stream) -> int:
    """Connections the producer regained after a loss (its backend keeps the count)."""
    status = feeder.rabbit.connection_status()
    return status["publisher"].reconnects if "publisher" in status else 0


def first_finish_after(
    ledger_file: Path,
    since: float,
    timeout: float = 90.0,
    explain: Callable[[], str] = lambda: "",
) -> float:
    """Seconds from ``since`` (a time.time()) to the first job finished after it; on
    failure, the message ends with what ``explain()`` says."""
    deadline = time.monotonic() + timeout
    while (took := Books.read(ledger_file).first_finish_after(since)) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"no job finished after the node was stopped; {explain()}")
        time.sleep(0.05)
    return took


def cluster_state(cluster: Cluster, queue: str, worker: WorkerProcess | None = None) -> str:
    """What the nodes still up say of ``queue`` (its Raft members) and what the worker
    logged last, for a failure's message; never raises."""
    parts = []
    if worker is not None:
        parts.append(
            "worker: "
            + " | ".join(f"{e.get('level')} {e.get('message')}" for e in worker.events()[-8:])
        )
    for node in cluster.nodes:
        if not port_open(node.amqp_port):
            parts.append(f"{node.short_name}: down")
            continue
        try:
            channels = node.ctl(
                "list_channels",
                "name",
                "messages_unconfirmed",
                "consumer_count",
                "messages_unacknowledged",
                "-q",
                timeout=30,
            )
            parts.append(
                f"{node.short_name} channels (unconfirmed, consumers, unacked):\n{channels}"
            )
        except Exception as exc:  # the failure's message must come whatever this does
            parts.append(f"{node.short_name}: list_channels failed: {exc}")
    for node in cluster.nodes:
        if not port_open(node.amqp_port):
            continue
        try:
            parts.append(f"{node.short_name} quorum_status {queue}: {node.quorum_status(queue)}")
            break
        except Exception as exc:  # the failure's message must come whatever this does
            parts.append(f"{node.short_name}: quorum_status failed: {exc}")
    return "\n".join(parts)


def settle(ledger_file: Path, ids: list[str], admin: RabbitMQBackend) -> Books:
    """Wait until every job finished, the queue is empty and the ledger quiet for 1 s."""
    deadline = time.monotonic() + 60
    while True:
        books = Books.read(ledger_file)
        missing = books.missing(ids)
        ready = admin.queue_counts(ledger.QUORUM)[0]
        if not missing and ready == 0 and time.time() - books.last_write > 1.0:
            return books
        assert time.monotonic() < deadline, f"{len(missing)} jobs never finished, {ready} ready"
        time.sleep(0.2)


def enqueue_retrying(enqueue: Callable[[], T], timeout: float = 30.0) -> T:
    """``enqueue()``, again while RabbitMQ refuses it (NotEnqueuedError: safe to retry)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return enqueue()
        except NotEnqueuedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
