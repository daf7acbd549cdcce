"""The producer's outcomes (docs/enqueueing.md) on every backend: a returned id is a job
that runs; a closed backend is *not enqueued*, never an error of another kind."""

from __future__ import annotations

import uuid

import pytest

from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import NotEnqueuedError
from queuey_core import PublishFailure
from queuey_core import Worker
from queuey_core import job_id_for
from tests.harness import WorkerEnv
from tests.support import Greet
from tests.support import start


def test_an_enqueue_that_returns_is_a_job_that_runs_once_under_its_id(h: WorkerEnv) -> None:
    ran: list[tuple[uuid.UUID, str]] = []

    def greet(job: Greet, ctx: JobContext) -> None:
        ran.append((ctx.job_id, job.name))

    producer = h.producer()
    one = producer.enqueue(Greet(name="ada"), job_id="contract-one")
    many = producer.enqueue_many([Greet(name="bob"), Greet(name="cy")])
    assert one == job_id_for("contract-one")
    running = start(Worker(h.backend, h.queues, [Handler(Greet, greet)], clock=h.clock), h)
    try:
        h.wait_for(lambda: len(ran) == 3)
    finally:
        running.stop()
    assert sorted(ran) == sorted([(one, "ada"), (many[0], "bob"), (many[1], "cy")])


def test_a_closed_backend_does_not_enqueue(h: WorkerEnv) -> None:
    producer = h.producer()
    h.backend.close()
    with pytest.raises(NotEnqueuedError) as caught:
        producer.enqueue(Greet(name="late"), job_id="late")
    assert caught.value.reason is PublishFailure.CLOSED
    assert caught.value.not_enqueued == (job_id_for("late"),)
    with pytest.raises(NotEnqueuedError) as many:
        producer.enqueue_many([Greet(name="later")], job_ids=["later"])
    assert many.value.not_enqueued == (job_id_for("later"),)
