"""The control plane in memory: requests, selections, status counts, hostile requests.

A worker on ``MemoryBackend`` answers the in-memory control channel exactly as it answers
RabbitMQ's (``tests/integration/test_workers_cli.py``); time is the manual clock.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import MissingCapabilityError
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core.control import VERSION
from queuey_core.control import Command
from queuey_core.control import ControlReply
from queuey_core.control import ControlRequest
from queuey_core.control import JobCounts
from queuey_core.control import Selection
from queuey_core.control import WorkerStatus
from queuey_core.control import ask
from queuey_core.control import shutdown_workers
from queuey_core.control import worker_statuses
from queuey_core.errors import DecodeError
from tests.harness import Memory
from tests.support import ALPHA
from tests.support import BETA
from tests.support import Greet
from tests.support import Orphan
from tests.support import Ping
from tests.support import Running
from tests.support import act_out
from tests.support import noop
from tests.support import start
from tests.support import wait_for

# -- documents --------------------------------------------------------------------------


def test_a_request_round_trips_and_says_its_version() -> None:
    request = ControlRequest(v=VERSION, command=Command.SHUTDOWN, select=Selection(pids=(12,)))
    data = json.loads(request.encode())
    assert data == {
        "v": 1,
        "command": "shutdown",
        "select": {"ids": [], "hosts": [], "pids": [12], "all": False},
    }
    assert ControlRequest.decode(request.encode()) == request


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"not json", "body"),
        (b"[1, 2]", "body"),
        (b'{"command": "status"}', "v"),
        (b'{"v": 2, "command": "status"}', "v"),
        (b'{"v": 1, "command": "reboot"}', "command"),
        (b'{"v": 1, "command": "status", "select": {"pids": ["x"]}}', "select.pids"),
        (b'{"v": 1, "command": "status", "select": {"everyone": true}}', "select.everyone"),
        (b'{"v": 1, "command": "status", "select": {"hosts": ["' + b"h" * 300 + b'"]}}', "hosts"),
        (b" " * 70_000, "more than"),
    ],
)
def test_a_malformed_request_is_a_decode_error_naming_the_field(body: bytes, says: str) -> None:
    with pytest.raises(DecodeError) as caught:
        ControlRequest.decode(body)
    assert says in str(caught.value)


def test_a_selection_narrows_by_each_criterion_given() -> None:
    assert Selection().matches("h:1:a", "h", 1), "no criterion: every worker"
    assert Selection(hosts=("h",)).matches("h:1:a", "h", 1)
    assert not Selection(hosts=("g",)).matches("h:1:a", "h", 1)
    assert Selection(pids=(1, 2)).matches("h:2:a", "h", 2)
    assert not Selection(hosts=("h",), pids=(3,)).matches("h:1:a", "h", 1), "every list narrows"
    assert Selection(ids=("h:1:a",)).matches("h:1:a", "h", 1)
    assert not Selection(ids=("h:1:b",)).matches("h:1:a", "h", 1)
    assert Selection(hosts=("a",), pids=(1,)).describe() == "host=a pid=1"
    assert Selection(all=True).describe() == "every worker"


# -- a worker answering -----------------------------------------------------------------


def mixed_outcomes(clock: ManualClock) -> Callable[[Greet, JobContext], None]:
    """A handler whose outcome its job's name picks: ok, flaky (fails once), doomed
    (fatal) or snooze (deferred once); each takes a second of the manual clock."""

    def greet(job: Greet, ctx: JobContext) -> None:
        clock.sleep(1)
        act_out(job.name, ctx)

    return greet


def enqueue_each_outcome(producer: Producer) -> None:
    """One job of each name ``mixed_outcomes`` knows: ok, flaky, doomed, snooze."""
    for name in ("ok", "flaky", "doomed", "snooze"):
        producer.enqueue(Greet(name=name))


def test_a_worker_reports_its_identity_queues_and_outcome_counts(
    backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock
) -> None:
    greet = mixed_outcomes(clock)
    worker = Worker(
        backend, queues, [noop(Ping), Handler(Greet, greet)], consume=[ALPHA, BETA], clock=clock
    )
    enqueue_each_outcome(producer)
    producer.enqueue(Ping(seq=1))
    producer.enqueue(Orphan(id=1))
    status = _status_after(worker, backend, clock, succeeded=4)

    assert (status.host, status.pid) == (socket.gethostname(), os.getpid())
    assert status.id.startswith(f"{status.host}:{status.pid}:")
    assert status.queues == (ALPHA, BETA)
    assert status.job_types == tuple(sorted([Greet.NAME, Ping.NAME]))
    assert status.concurrency == worker.concurrency
    assert status.state == "consuming"
    assert (status.succeeded, status.failed, status.retried) == (4, 2, 1), (
        "ok, flaky's retry, snooze's second run and the ping succeeded; flaky's first run "
        "and doomed failed, and flaky's was retried"
    )
    assert (status.deferred, status.dead_lettered) == (1, 2), "doomed, and the orphan (no handler)"
    assert (status.running, status.in_flight, status.settle_failures) == (0, 0, 0)
    assert status.stuck_job_threads == 0
    assert status.uptime >= 30, "the worker's clock: the deferral alone waited 30s"
    assert status.started_at.endswith("Z")
    assert (status.supervisor_pid, status.child) == (None, None)


def test_job_counts_given_as_a_hook_count_as_the_workers_own(
    backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock
) -> None:
    greet = mixed_outcomes(clock)
    counts = JobCounts()
    worker = Worker(
        backend,
        queues,
        [noop(Ping), Handler(Greet, greet)],
        consume=[ALPHA, BETA],
        clock=clock,
        hooks=[counts],
    )
    enqueue_each_outcome(producer)
    producer.enqueue(Orphan(id=1))
    status = _status_after(worker, backend, clock, succeeded=3)

    mine = (counts.succeeded, counts.failed, counts.retried, counts.deferred)
    assert mine == (status.succeeded, status.failed, status.retried, status.deferred)
    assert mine == (3, 2, 1, 1)
    assert (counts.dead_lettered, counts.timed_out) == (status.dead_lettered, 0) == (2, 0)
    assert counts.running == status.running == 0
    assert counts.state == "stopped", "told of the worker's lifecycle as a hook"


def test_a_job_running_now_is_counted_running(
    backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock
) -> None:
    release = clock.sleep  # the handler waits on the manual clock, so it stays running

    worker = Worker(backend, queues, [Handler(Greet, lambda _j, _c: release(100))], clock=clock)
    producer.enqueue(Greet(name="slow"))
    running = start(worker, clock)
    try:
        _wait_serving(backend, 1)
        wait_for(lambda: _status(backend).running == 1, None)
        assert _status(backend).in_flight == 1
        wait_for(lambda: _status(backend).succeeded == 1, clock, step=10)
        assert _status(backend).running == 0
    finally:
        running.stop()


def test_the_children_of_a_supervisor_say_whose_and_which(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUEY_SUPERVISOR_PID", "4242")
    monkeypatch.setenv("QUEUEY_CHILD_INDEX", "3")
    with idle_worker(backend, queues, clock):
        status = _status(backend)
    assert (status.supervisor_pid, status.child) == (4242, 3)


def test_only_the_chosen_workers_answer(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    a = start(Worker(backend, queues, [], consume=[ALPHA], clock=clock), clock)
    b = start(Worker(backend, queues, [], consume=[BETA], clock=clock), clock)
    try:
        _wait_serving(backend, 2)
        everyone = worker_statuses(backend, timeout=0)
        first = everyone[0]
        chosen = worker_statuses(backend, Selection(ids=(first.id,)), timeout=0)
        assert [s.id for s in chosen] == [first.id]
        assert worker_statuses(backend, Selection(hosts=("no-such-host",)), timeout=0) == []
        same_process = worker_statuses(backend, Selection(pids=(os.getpid(),)), timeout=0)
        assert len(same_process) == 2, "both run in this process"
    finally:
        a.stop()
        b.stop()
    assert worker_statuses(backend, timeout=0) == [], "a stopped worker no longer answers"


def test_a_shutdown_drains_only_the_chosen_worker(
    backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock
) -> None:
    a = start(Worker(backend, queues, [noop(Greet)], consume=[ALPHA], clock=clock), clock)
    b = start(Worker(backend, queues, [noop(Ping)], consume=[BETA], clock=clock), clock)
    try:
        _wait_serving(backend, 2)
        target = next(s for s in worker_statuses(backend, timeout=0) if s.queues == (ALPHA,))
        accepted = shutdown_workers(backend, Selection(ids=(target.id,)), timeout=0)
        assert [s.id for s in accepted] == [target.id]
        assert a.join() is None, "it drained and returned normally"
        assert not b.is_finished(), "the other worker keeps running"
        producer.enqueue(Ping(seq=1))
        wait_for(lambda: backend.acked(BETA) != [], clock)
    finally:
        b.stop()


def test_a_shutdown_that_chooses_no_worker_must_say_all(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    running = start(Worker(backend, queues, [], clock=clock), clock)
    try:
        _wait_serving(backend, 1)
        with pytest.raises(ValueError, match="all=True"):
            shutdown_workers(backend, Selection(), timeout=0)
        # Sent anyway (an older or hand-made client): the worker ignores it.
        unguarded = ControlRequest(v=VERSION, command=Command.SHUTDOWN).encode()
        assert backend.broadcast_control(unguarded, timeout=0) == []
        assert not running.handle.is_shutdown()
        accepted = shutdown_workers(backend, Selection(all=True), timeout=0)
        assert len(accepted) == 1
        assert running.join() is None
    finally:
        running.handle.shutdown()


def test_a_worker_can_be_asked_to_do_something_else_on_shutdown(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    asked: list[str] = []
    worker = Worker(backend, queues, [], clock=clock, on_shutdown_request=lambda: asked.append("x"))
    running = start(worker, clock)
    try:
        _wait_serving(backend, 1)
        assert len(shutdown_workers(backend, Selection(all=True), timeout=0)) == 1
        assert asked == ["x"]
        assert not running.handle.is_shutdown(), "the callback decides, not the default"
        assert len(shutdown_workers(backend, Selection(all=True), timeout=0)) == 1
        assert asked == ["x"], "asked again, it accepts without asking twice (no 2nd SIGTERM)"
    finally:
        running.stop()


def test_a_worker_already_draining_accepts_a_shutdown_without_being_asked_again(
    backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock
) -> None:
    asked: list[str] = []
    release = clock.sleep
    worker = Worker(
        backend,
        queues,
        [Handler(Greet, lambda _j, _c: release(50))],
        clock=clock,
        on_shutdown_request=lambda: asked.append("x"),
    )
    producer.enqueue(Greet(name="slow"))
    running = start(worker, clock)
    try:
        _wait_serving(backend, 1)
        wait_for(lambda: _status(backend).running == 1, None)
        running.handle.shutdown()  # SIGTERM, say
        wait_for(lambda: _status(backend).state == "draining", None)
        assert len(shutdown_workers(backend, Selection(all=True), timeout=0)) == 1
        assert asked == [], "a draining worker is not asked to stop again"
    finally:
        running.stop()


def test_a_worker_without_control_does_not_answer(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    running = start(Worker(backend, queues, [], clock=clock, control=False), clock)
    try:
        wait_for(lambda: backend.consumer_count(ALPHA) == 1, None)
        assert worker_statuses(backend, timeout=0) == []
    finally:
        running.stop()


# -- hostile requests and replies -------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x80\x81 not utf-8",
        b"null",
        b'{"v": 1}',
        b'{"v": 99, "command": "status"}',
        b'{"v": 1, "command": "rm -rf /"}',
        b'{"v": 1, "command": "status", "select": {"pids": [1e400]}}',
        b'{"v": 1, "command": "status", "select": []}',
        b"{" * 100_000,
        json.dumps({"v": 1, "command": "status", "select": {"ids": ["x"] * 5000}}).encode(),
    ],
)
def test_a_hostile_control_message_is_logged_and_ignored(
    body: bytes, mem: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    backend, producer, queues, clock = mem
    running = start(Worker(backend, queues, [noop(Greet)], consume=[ALPHA], clock=clock), clock)
    try:
        _wait_serving(backend, 1)
        with caplog.at_level(logging.WARNING, logger="queuey_core.control"):
            assert backend.broadcast_control(body, timeout=0) == [], "no reply"
        assert "control request ignored" in caplog.text
        assert not running.handle.is_shutdown()
        producer.enqueue(Greet(name="still working"))
        wait_for(lambda: len(backend.acked(ALPHA)) == 1, clock)
        assert len(worker_statuses(backend, timeout=0)) == 1, "and it still answers"
    finally:
        running.stop()


def test_a_flood_of_bad_requests_logs_once_a_minute(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    with idle_worker(backend, queues, clock):
        with caplog.at_level(logging.WARNING, logger="queuey_core.control"):
            for _ in range(500):
                backend.broadcast_control(b"junk", timeout=0)
        assert caplog.text.count("control request ignored") == 1


def test_a_reply_that_does_not_parse_or_answers_another_command_is_skipped(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    with idle_worker(backend, queues, clock):
        rogue = backend.serve_control(lambda _body: b"<html>")
        status = worker_statuses(backend, timeout=0)
        other = ControlReply(v=VERSION, command=Command.SHUTDOWN, worker=status[0]).encode()
        impostor = backend.serve_control(lambda _body: other)
        try:
            replies = ask(backend, Command.STATUS, Selection(), timeout=0)
            assert [r.worker.id for r in replies] == [status[0].id]
        finally:
            rogue.close()
            impostor.close()


def test_asking_a_backend_without_a_control_channel_names_the_missing_capability() -> None:
    with pytest.raises(MissingCapabilityError, match="cannot talk to live workers"):
        worker_statuses(object(), timeout=0)


def _status(backend: MemoryBackend) -> WorkerStatus:
    found = worker_statuses(backend, timeout=0)
    assert len(found) == 1, found
    return found[0]


def _status_after(
    worker: Worker, backend: MemoryBackend, clock: ManualClock, *, succeeded: int
) -> WorkerStatus:
    """Run the worker until it has run ``succeeded`` jobs: its status then."""
    running = start(worker, clock)
    try:
        _wait_serving(backend, 1)
        wait_for(lambda: _status(backend).succeeded == succeeded, clock)
        return _status(backend)
    finally:
        running.stop()


@contextmanager
def idle_worker(backend: MemoryBackend, queues: QueueSet, clock: ManualClock) -> Iterator[Running]:
    """A worker with no handlers, answering the control channel until the block ends."""
    running = start(Worker(backend, queues, [], clock=clock), clock)
    try:
        _wait_serving(backend, 1)
        yield running
    finally:
        running.stop()


def _wait_serving(backend: MemoryBackend, workers: int) -> None:
    """Until ``workers`` answer: a worker serves from the start of its ``run()``."""
    wait_for(lambda: len(worker_statuses(backend, timeout=0)) == workers, None)
