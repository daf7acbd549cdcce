"""Hooks that take envelopes (the job store's recorder): every event, with what the
recorder needs, no JobInfo, and a sink that raises changes nothing.

In memory on the manual clock.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from queuey_core import Envelope
from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import JobInfo
from queuey_core import Worker
from queuey_core import WorkerHooks
from tests.harness import Memory
from tests.support import ALPHA
from tests.support import Greet
from tests.support import Orphan
from tests.support import act_out
from tests.support import start
from tests.support import wait_for


class Sink(WorkerHooks):
    """Takes envelopes; remembers them, and fails the test if a JobInfo method is called."""

    takes_envelopes = True

    def __init__(self, *, broken: bool = False) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, Envelope, bool, str, object]] = []
        self.infos: list[JobInfo] = []
        self.broken = broken
        self.starting = 0

    def job_event(self, event: str, envelope: Any, ran: bool, text: str, result: object) -> None:
        with self.lock:
            self.events.append((event, envelope, ran, text, result))
        if self.broken:
            raise RuntimeError("sink broke")

    def on_job_started(self, job: JobInfo) -> None:
        self.infos.append(job)

    def on_job_succeeded(self, job: JobInfo) -> None:
        self.infos.append(job)

    def on_worker_starting(self, worker: object) -> None:
        self.starting += 1

    def of(self, job_id: object) -> list[tuple[str, bool, str, object]]:
        with self.lock:
            return [(e, ran, t, r) for e, env, ran, t, r in self.events if env.job_id == job_id]


def test_a_sink_gets_every_event_as_its_envelope_and_no_job_info(mem: Memory) -> None:
    backend, producer, queues, clock = mem

    def greet(job: Greet, ctx: JobContext) -> object:
        act_out(job.name, ctx)
        return {"name": job.name}

    sink = Sink()
    worker = Worker(backend, queues, [Handler(Greet, greet)], clock=clock, hooks=[sink])
    ok = producer.enqueue(Greet(name="ok"))
    flaky = producer.enqueue(Greet(name="flaky"))
    doomed = producer.enqueue(Greet(name="doomed"))
    snooze = producer.enqueue(Greet(name="snooze"))
    orphan = producer.enqueue(Orphan(id=1))
    running = start(worker, clock)
    wait_for(lambda: len(sink.events) == 13, clock)
    running.stop()

    assert sink.of(ok) == [("started", True, "", None), ("succeeded", True, "", {"name": "ok"})]
    assert sink.of(flaky)[1] == ("failed", True, "flaky failure", None)
    assert sink.of(doomed)[1] == ("dead_lettered", True, "fatal error: cannot ever work", None)
    assert sink.of(snooze)[1] == ("deferred", True, "rate limited", None)
    assert sink.of(orphan) == [
        ("dead_lettered", False, f"no handler for job type {Orphan.NAME!r}", None)
    ], "never ran"
    assert sink.infos == [], "a sink's JobInfo methods are not called by a worker"
    assert sink.starting == 1, "worker events still reach it"


def test_a_sink_that_raises_is_logged_and_changes_nothing(
    mem: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    backend, producer, queues, clock = mem

    def greet(job: Greet, ctx: JobContext) -> None:
        act_out(job.name, ctx)

    sink = Sink(broken=True)
    worker = Worker(backend, queues, [Handler(Greet, greet)], clock=clock, hooks=[sink])
    job_id = producer.enqueue(Greet(name="flaky"))
    with caplog.at_level(logging.ERROR, logger="queuey_core.worker.hooks"):
        running = start(worker, clock)
        wait_for(lambda: len(backend.acked(ALPHA)) == 2, clock)
        running.stop()

    assert [e for e, *_ in sink.of(job_id)] == ["started", "failed", "started", "succeeded"]
    assert [e.attempt for e in backend.acked(ALPHA)] == [1, 2], "the outcome is the handler's"
    failures = [r for r in caplog.records if "job_event" in r.getMessage()]
    assert len(failures) == 4
    assert getattr(failures[0], "job_id", None) == str(job_id)
