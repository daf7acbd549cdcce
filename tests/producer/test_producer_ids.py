"""Caller-chosen job ids, and what an enqueue's errors say about each job."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest

from queuey_core import Deferred
from queuey_core import EnqueueUnknownError
from queuey_core import Envelope
from queuey_core import Fatal
from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import MemoryBackend
from queuey_core import NotEnqueuedError
from queuey_core import Producer
from queuey_core import PublishFailure
from queuey_core import Retryable
from queuey_core import UnroutableError
from queuey_core import Worker
from queuey_core import job_id_for
from queuey_core.producer import JOB_ID_NAMESPACE
from tests.harness import Inspectable
from tests.harness import WorkerEnv
from tests.support import ALPHA
from tests.support import Greet
from tests.support import drain
from tests.support import seed_queues
from tests.support import start


def test_a_key_always_gives_the_same_id_and_a_uuid_is_its_own_id() -> None:
    assert job_id_for("order-17") == job_id_for("order-17")
    assert job_id_for("order-17") == uuid.uuid5(JOB_ID_NAMESPACE, "order-17")
    assert job_id_for("order-17") != job_id_for("order-18")
    some = uuid.uuid4()
    assert job_id_for(some) is some
    assert job_id_for(str(some)) == some, "a printed id, given back, is the same id"


@pytest.mark.parametrize("bad", ["", "   ", 17, None, b"order-17"])
def test_an_empty_or_non_string_key_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="a job id is a UUID or a non-empty string"):
        job_id_for(bad)  # type: ignore[arg-type]


def test_enqueue_publishes_under_the_chosen_id(backend: MemoryBackend, producer: Producer) -> None:
    job_id = producer.enqueue(Greet(name="ada"), job_id="order-17")
    assert job_id == job_id_for("order-17")
    [env] = drain(backend, ALPHA)
    assert env.job_id == job_id


def test_enqueue_many_takes_one_id_per_job_and_none_for_a_random_one(
    backend: MemoryBackend, producer: Producer
) -> None:
    chosen = uuid.uuid4()
    ids = producer.enqueue_many(
        [Greet(name="a"), Greet(name="b"), Greet(name="c")], job_ids=["a", None, chosen]
    )
    assert ids[0] == job_id_for("a")
    assert ids[2] == chosen
    assert ids[1] not in (ids[0], ids[2])
    assert [env.job_id for env in drain(backend, ALPHA)] == ids


@pytest.mark.parametrize("job_ids", [["a"], ["a", ""]])
def test_bad_job_ids_publish_nothing(
    backend: MemoryBackend, producer: Producer, job_ids: Sequence[str]
) -> None:
    with pytest.raises(ValueError, match=r"job ids for|non-empty string"):
        producer.enqueue_many([Greet(name="a"), Greet(name="b")], job_ids=job_ids)
    with pytest.raises(ValueError, match="non-empty string"):
        producer.enqueue(Greet(name="a"), job_id="")
    assert backend.pending(ALPHA) == 0


class Failing(MemoryBackend):
    """Raises ``error`` on every publish without saying which jobs it is about."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def publish(self, envelope: Envelope, *, delay: float | None = None) -> None:
        raise self.error

    def publish_many(self, items: Sequence[tuple[Envelope, float | None]]) -> None:
        raise self.error


def test_an_error_that_names_no_jobs_is_about_every_job_of_the_call() -> None:
    producer = Producer(
        Failing(EnqueueUnknownError("no confirm", reason=PublishFailure.BLOCKED)), seed_queues()
    )
    with pytest.raises(EnqueueUnknownError) as unknown:
        producer.enqueue_many([Greet(name="a"), Greet(name="b")], job_ids=["a", "b"])
    assert unknown.value.unknown == (job_id_for("a"), job_id_for("b"))
    assert unknown.value.not_enqueued == unknown.value.confirmed == ()
    assert unknown.value.reason is PublishFailure.BLOCKED

    producer = Producer(Failing(UnroutableError("no queue")), seed_queues())
    with pytest.raises(NotEnqueuedError) as refused:
        producer.enqueue(Greet(name="a"), job_id="a")
    assert refused.value.not_enqueued == (job_id_for("a"),)
    assert refused.value.job_ids == (job_id_for("a"),)
    assert refused.value.reason is PublishFailure.UNROUTABLE


def test_the_two_kinds_of_failure_are_distinct_backend_errors() -> None:
    assert issubclass(UnroutableError, NotEnqueuedError)
    assert not issubclass(EnqueueUnknownError, NotEnqueuedError)
    assert not issubclass(NotEnqueuedError, EnqueueUnknownError)


def test_a_chosen_id_is_kept_through_deferral_retry_and_dead_letter(h: WorkerEnv) -> None:
    backend: Inspectable = h.backend
    seen: list[JobContext] = []

    def handle(job: Greet, ctx: JobContext) -> None:
        seen.append(ctx)
        if len(seen) == 1:
            raise Deferred(h.d(1))
        if len(seen) == 2:
            raise Retryable("once more")
        raise Fatal("enough")

    running = start(Worker(backend, h.queues, [Handler(Greet, handle)], clock=h.clock), h)
    job_id = h.producer().enqueue(Greet(name="kept"), job_id="order-17")
    h.wait_for(lambda: len(backend.dead_letters(ALPHA)) == 1)
    running.stop()

    assert job_id == job_id_for("order-17")
    assert [ctx.job_id for ctx in seen] == [job_id] * 3
    assert [(ctx.attempt, ctx.deferrals) for ctx in seen] == [(1, 0), (1, 1), (2, 1)]
    assert backend.dead_letters(ALPHA)[0].envelope.job_id == job_id
