"""Producer.enqueue_raw: a job by type name, without its class; the worker still checks it."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from queuey_core import InvalidPriorityError
from queuey_core import JobContext
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core import UnknownQueueError
from queuey_core import Worker
from queuey_core import job_id_for
from tests.harness import Inspectable
from tests.harness import WorkerEnv
from tests.support import ALPHA
from tests.support import GAMMA
from tests.support import Greet
from tests.support import Recorder
from tests.support import start

MakeRecorder = Callable[[], Recorder]


def test_a_raw_job_runs_like_one_enqueued_from_its_class(
    h: WorkerEnv, recorder: MakeRecorder
) -> None:
    backend: Inspectable = h.backend
    seen = recorder()

    def handle(job: Greet, ctx: JobContext) -> None:
        seen.enter()
        seen.leave()
        assert job.name == "ada"
        assert ctx.priority == 3
        assert ctx.attempt == 1

    worker = Worker(backend, h.queues, [seen.handler(Greet, handle)], clock=h.clock)
    running = start(worker, h)
    job_id = h.producer().enqueue_raw(Greet.NAME, {"name": "ada"}, queue=ALPHA, priority=3)
    h.wait_for(lambda: len(backend.acked(ALPHA)) == 1)
    (acked,) = backend.acked(ALPHA)
    assert acked.job_id == job_id
    assert (acked.job_type, acked.queue, acked.payload) == (Greet.NAME, ALPHA, {"name": "ada"})
    assert seen.attempts() == 1
    running.stop()


def test_the_worker_dead_letters_a_raw_payload_that_does_not_fit_its_model(
    h: WorkerEnv, recorder: MakeRecorder
) -> None:
    backend: Inspectable = h.backend
    seen = recorder()
    worker = Worker(backend, h.queues, [seen.handler(Greet, lambda job, ctx: None)], clock=h.clock)
    running = start(worker, h)
    job_id = h.producer().enqueue_raw(Greet.NAME, {"nam": "ada"}, queue=ALPHA)
    h.wait_for(lambda: len(backend.dead_letters(ALPHA)) == 1)
    (dead,) = backend.dead_letters(ALPHA)
    assert dead.envelope.job_id == job_id
    assert "decode error" in dead.reason, dead.reason
    assert "name: Field required" in dead.reason, dead.reason
    assert seen.attempts() == 0, "the handler never ran"
    running.stop()


def test_a_delayed_raw_job_waits_and_keeps_the_chosen_id(
    backend: MemoryBackend, producer: Producer, clock: ManualClock
) -> None:
    job_id = producer.enqueue_raw(
        "anything.at.all", {"n": [1, 2.5, None, True]}, queue=GAMMA, delay=30, job_id="key-1"
    )
    assert job_id == job_id_for("key-1")
    assert backend.pending(GAMMA) == 0
    assert backend.held(GAMMA) == 1
    clock.advance(30)
    assert backend.pending(GAMMA) == 1


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([1, 2], "a payload is a JSON object"),
        ({"x": math.nan}, "cannot be encoded as JSON"),
        ({"x": object()}, "cannot be encoded as JSON"),
        ({"x": {1: "int key"}}, "would not come back from JSON unchanged"),
        ({"x": (1, 2)}, "would not come back from JSON unchanged"),
    ],
)
def test_a_payload_json_would_not_carry_exactly_is_refused_before_publishing(
    backend: MemoryBackend, producer: Producer, payload: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        producer.enqueue_raw("t", payload, queue=ALPHA)
    assert backend.pending(ALPHA) == 0


@pytest.mark.parametrize(
    ("job_type", "message"),
    [
        ("", "job_type: String should have at least 1 character"),
        ("é" * 128, "job_type: longer than 255 UTF-8 bytes"),
        ("a\x1bb", "job_type: contains a control character"),
    ],
)
def test_a_job_type_the_wire_cannot_carry_is_refused(
    backend: MemoryBackend, producer: Producer, job_type: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        producer.enqueue_raw(job_type, {}, queue=ALPHA)
    assert backend.pending(ALPHA) == 0


def test_the_queue_priority_delay_and_id_are_checked_as_enqueue_checks_them(
    backend: MemoryBackend, producer: Producer, queues: QueueSet
) -> None:
    with pytest.raises(UnknownQueueError, match="nowhere"):
        producer.enqueue_raw("t", {}, queue="nowhere")
    with pytest.raises(InvalidPriorityError, match="maximum is 10"):
        producer.enqueue_raw("t", {}, queue=ALPHA, priority=11)
    with pytest.raises(InvalidPriorityError, match="not a priority queue"):
        producer.enqueue_raw("t", {}, queue=GAMMA, priority=1)
    with pytest.raises(ValueError, match="longer than the broker can hold"):
        producer.enqueue_raw("t", {}, queue=ALPHA, delay=10**12)
    with pytest.raises(ValueError, match="a job id is a UUID or a non-empty string"):
        producer.enqueue_raw("t", {}, queue=ALPHA, job_id="")
    assert backend.pending(ALPHA) == backend.pending(GAMMA) == 0
    assert isinstance(producer.enqueue_raw("t", {}, queue=ALPHA, job_id=uuid.uuid4()), uuid.UUID)
