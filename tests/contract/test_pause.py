"""Pausing and resuming a queue, on every backend that can (docs/flow-control.md).

A paused queue keeps taking jobs; no worker starts one until it is resumed; what was
running finishes; nothing is lost, retried or dead-lettered; the pause is read by a
worker that starts after it. Where another process can reach the queues, the pause
comes from another backend on them, as ``queuey queues pause`` would send it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from queuey_core import Backend
from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import Worker
from queuey_core.flow.pause import pause_queue
from queuey_core.flow.pause import paused_queues
from queuey_core.flow.pause import resume_queue
from tests.backend_kinds import BackendKind
from tests.harness import WorkerEnv
from tests.support import ALPHA
from tests.support import BETA
from tests.support import Greet
from tests.support import Ping
from tests.support import Running
from tests.support import start

pytestmark = pytest.mark.requires("pause")


@pytest.fixture
def operator(kind: BackendKind, h: WorkerEnv) -> Iterator[Backend]:
    """Where the pause comes from: another backend on the same queues (another process,
    as far as the broker knows) where there can be one, else the worker's own. Every
    queue is resumed at the end: a pause outlives the test on a broker."""
    other = h.another_backend() if kind.supports("across_processes") else h.backend
    try:
        yield other
    finally:
        for name in h.queues:
            resume_queue(other, name)
        if other is not h.backend:
            other.close()


def greeting_worker(h: WorkerEnv, ran: list[str], gate: threading.Event | None = None) -> Worker:
    """A worker of alpha (Greet: records the name, waits for ``gate`` when given) and
    beta (Ping: records the seq)."""

    def greet(job: Greet, ctx: JobContext) -> None:
        if gate is not None and job.name == "slow":
            assert gate.wait(60), "the test never opened the gate"
        ran.append(job.name)

    def ping(job: Ping, ctx: JobContext) -> None:
        ran.append(f"ping {job.seq}")

    return Worker(h.backend, h.queues, [Handler(Greet, greet), Handler(Ping, ping)], clock=h.clock)


def beta_done(h: WorkerEnv, running: Running, ran: list[str], seq: int) -> None:
    """Enqueue a Ping and wait until it ran: the worker is alive and consuming beta, so
    whatever of alpha it did not run meanwhile, it did not take."""
    h.producer().enqueue(Ping(seq=seq))
    h.wait_for(lambda: f"ping {seq}" in ran)
    assert running.error is None


def test_a_paused_queue_keeps_taking_jobs_that_run_only_once_it_is_resumed(
    h: WorkerEnv, operator: Backend
) -> None:
    ran: list[str] = []
    running = start(greeting_worker(h, ran), h)
    producer = h.producer()
    try:
        h.wait_for(lambda: h.backend.consumer_count(ALPHA) == 1)
        change = pause_queue(operator, ALPHA, known=list(h.queues))
        assert change.paused
        assert change.changed
        assert paused_queues(h.backend, list(h.queues)) == {ALPHA}
        h.wait_for(lambda: h.backend.consumer_count(ALPHA) == 0)

        ids = [producer.enqueue(Greet(name=f"held {i}")) for i in range(5)]
        beta_done(h, running, ran, 1)
        assert not [name for name in ran if name.startswith("held")], "ran while paused"
        assert h.backend.pending(ALPHA) == 5, "a paused queue keeps what is enqueued"

        assert resume_queue(operator, ALPHA, known=list(h.queues)).changed
        h.wait_for(lambda: len(h.backend.acked(ALPHA)) == 5)
        assert sorted(e.job_id for e in h.backend.acked(ALPHA)) == sorted(ids)
        assert {e.attempt for e in h.backend.acked(ALPHA)} == {1}, "a pause spends no attempt"
        assert h.backend.dead_letters(ALPHA) == []
    finally:
        running.stop()


def test_a_worker_that_starts_after_the_pause_consumes_none_of_that_queue(
    h: WorkerEnv, operator: Backend
) -> None:
    pause_queue(operator, ALPHA)
    producer = h.producer()
    held = producer.enqueue(Greet(name="held"))
    ran: list[str] = []
    running = start(greeting_worker(h, ran), h)
    try:
        beta_done(h, running, ran, 1)
        assert h.backend.consumer_count(ALPHA) == 0
        assert "held" not in ran
        assert h.backend.pending(ALPHA) == 1

        resume_queue(operator, ALPHA)
        h.wait_for(lambda: [e.job_id for e in h.backend.acked(ALPHA)] == [held])
        assert ran.count("held") == 1
    finally:
        running.stop()


def test_a_job_running_when_its_queue_is_paused_finishes_and_is_settled(
    h: WorkerEnv, operator: Backend
) -> None:
    gate = threading.Event()
    ran: list[str] = []
    running = start(greeting_worker(h, ran, gate), h)
    producer = h.producer()
    try:
        slow = producer.enqueue(Greet(name="slow"))
        h.wait_for(lambda: running.handle.in_flight() == 1)
        pause_queue(operator, ALPHA)
        h.wait_for(lambda: h.backend.consumer_count(ALPHA) == 0)
        later = producer.enqueue(Greet(name="later"))

        gate.set()
        h.wait_for(lambda: "slow" in ran)
        h.wait_for(lambda: [e.job_id for e in h.backend.acked(ALPHA)] == [slow])
        beta_done(h, running, ran, 1)
        assert "later" not in ran
        assert h.backend.dead_letters(ALPHA) == []

        resume_queue(operator, ALPHA)
        h.wait_for(lambda: [e.job_id for e in h.backend.acked(ALPHA)] == [slow, later])
        assert ran.count("later") == 1
    finally:
        gate.set()
        running.stop()


def test_pausing_twice_and_resuming_twice_say_that_nothing_changed(
    h: WorkerEnv, operator: Backend
) -> None:
    assert pause_queue(operator, BETA).changed
    again = pause_queue(operator, BETA)
    assert again.paused
    assert not again.changed
    assert paused_queues(h.backend, [ALPHA, BETA]) == {BETA}
    assert resume_queue(operator, BETA).changed
    assert not resume_queue(operator, BETA).changed
    assert paused_queues(h.backend, [ALPHA, BETA]) == frozenset()
