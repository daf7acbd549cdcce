"""No message and no handler can wedge a worker: every delivery ends settled.

Each test runs twice, like the seed's: in memory on the manual clock (nothing sleeps),
and on a real RabbitMQ, where hostile bodies are published straight into the queue with
raw pika, as any other program could. The books are checked each time: the message is
acked or in the dead-letter queue with a reason naming the problem, its handler ran a
bounded number of times, no settle failed, and a good job enqueued afterwards still runs.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from typing import Any
from typing import TypeVar

import pika
import pytest

from queuey_core import Backoff
from queuey_core import DeadLetter
from queuey_core import Deferred
from queuey_core import Envelope
from queuey_core import Fatal
from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Retryable
from queuey_core import RetryPolicy
from queuey_core import UndecodableDeadLetter
from queuey_core import Worker
from queuey_core.backends.memory import MemoryBackend
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.limits import MAX_DELAY_MS
from tests.harness import Inspectable
from tests.harness import RecordingSqlite
from tests.harness import WorkerEnv
from tests.integration.broker import channel
from tests.support import ALPHA
from tests.support import BETA
from tests.support import Greet
from tests.support import Ping
from tests.support import Recorder
from tests.support import Running
from tests.support import start

MakeRecorder = Callable[[], Recorder]
T = TypeVar("T")


def inject(h: WorkerEnv, queue: str, body: bytes, *, message_id: str | None = None) -> None:
    """Put ``body`` straight into ``queue``, past the producer and its checks."""
    raw = h.backend.sqlite if isinstance(h.backend, RecordingSqlite) else h.backend
    if isinstance(raw, MemoryBackend | SqliteBackend):
        raw.publish_raw(queue, body, message_id=message_id)
        return
    with channel() as ch:
        ch.basic_publish("", queue, body, pika.BasicProperties(message_id=message_id))


def envelope_dict(queue: str = ALPHA, job_type: str = Greet.NAME, **fields: Any) -> dict[str, Any]:
    """The JSON of a valid envelope of a Greet, with ``fields`` changed."""
    return {
        "v": 1,
        "job_id": str(uuid.uuid4()),
        "job_type": job_type,
        "queue": queue,
        "attempt": 1,
        "deferrals": 0,
        "priority": 0,
        "enqueued_at": 1_700_000_000_000,
        "payload": {"name": "hostile"},
        **fields,
    }


def everything_dead(backend: Inspectable, queue: str) -> list[DeadLetter | UndecodableDeadLetter]:
    return backend.list_dead_letters(queue)


def noting(
    recorder: MakeRecorder, what: Callable[[Greet, JobContext], T]
) -> tuple[Recorder, list[T], Handler[Greet]]:
    """A greet handler that writes down ``what`` of each job it runs: its Recorder, the
    notes, and the handler."""
    seen = recorder()
    notes: list[T] = []

    def handle(job: Greet, ctx: JobContext) -> None:
        seen.enter()
        notes.append(what(job, ctx))
        seen.leave()

    return seen, notes, Handler(Greet, handle)


def noting_names(recorder: MakeRecorder) -> tuple[Recorder, list[str], Handler[Greet]]:
    """A greet handler that writes down the name of each job it runs."""
    return noting(recorder, lambda job, ctx: job.name)


def stop_cleanly(running: Running) -> None:
    """Stop the worker, which never failed to settle a delivery."""
    assert running.handle.settle_failures() == 0
    running.stop()


def good_job_still_runs(h: WorkerEnv, producer: Producer, seen_names: list[str]) -> None:
    producer.enqueue(Greet(name="good"))
    h.wait_for(lambda: "good" in seen_names)


def test_an_envelope_naming_another_queue_is_dead_lettered_unrun(
    h: WorkerEnv, recorder: MakeRecorder
) -> None:
    seen, names, handler = noting_names(recorder)
    running = start(Worker(h.backend, h.queues, [handler], clock=h.clock), h)
    inject(h, ALPHA, json.dumps(envelope_dict(queue="nowhere.never.declared")).encode())

    h.wait_for(lambda: bool(h.backend.dead_letters(ALPHA)))
    dead = h.backend.dead_letters(ALPHA)
    assert len(dead) == 1
    assert "envelope queue 'nowhere.never.declared' is not the queue" in dead[0].reason
    assert seen.attempts() == 0, "a job that lies about its queue never runs"
    good_job_still_runs(h, h.producer(), names)
    stop_cleanly(running)


#: Bodies an envelope refuses, and the words its reason must hold.
REFUSED: list[tuple[dict[str, Any] | bytes, str]] = [
    (envelope_dict(job_type="x" * 256), "job_type: longer than 255 UTF-8 bytes"),
    (envelope_dict(job_type="a\x00b"), "job_type: contains a control character"),
    (envelope_dict(attempt=2**63), "attempt: Input should be less than or equal to"),
    (envelope_dict(deferrals=-1), "deferrals: Input should be greater than or equal to 0"),
    (envelope_dict(priority=300), "priority: Input should be less than or equal to 255"),
    (envelope_dict(enqueued_at=-1), "enqueued_at: Input should be greater than or equal"),
    (envelope_dict(v=2, payload="other shape"), "unknown envelope version 2"),
    (envelope_dict(queue=""), "queue: String should have at least 1 character"),
    ([1, 2, 3], "Input should be an object"),  # type: ignore[list-item]
    (b"\x00\xff not json", "Invalid JSON"),
]


def test_bodies_an_envelope_refuses_are_dead_lettered_with_the_field_named(
    h: WorkerEnv, recorder: MakeRecorder
) -> None:
    seen, names, handler = noting_names(recorder)
    running = start(Worker(h.backend, h.queues, [handler], clock=h.clock), h)
    for body, _ in REFUSED:
        inject(h, ALPHA, body if isinstance(body, bytes) else json.dumps(body).encode())

    h.wait_for(lambda: len(everything_dead(h.backend, ALPHA)) == len(REFUSED))
    dead = everything_dead(h.backend, ALPHA)
    assert all(isinstance(d, UndecodableDeadLetter) for d in dead), dead
    for d, (_, words) in zip(dead, REFUSED, strict=True):
        assert words in d.reason, f"reason {d.reason!r} should say {words!r}"
        assert d.reason.isascii()
    assert seen.attempts() == 0
    good_job_still_runs(h, h.producer(), names)
    stop_cleanly(running)


def test_eight_unsettleable_attempts_do_not_keep_the_next_good_job_waiting(
    h: WorkerEnv, recorder: MakeRecorder
) -> None:
    _seen, names, handler = noting_names(recorder)
    running = start(Worker(h.backend, h.queues, [handler], clock=h.clock), h)
    for _ in range(8):  # twice ALPHA's prefetch
        inject(h, ALPHA, json.dumps(envelope_dict(attempt=9223372036854775808)).encode())
    good_job_still_runs(h, h.producer(), names)

    h.wait_for(lambda: len(everything_dead(h.backend, ALPHA)) == 8)
    assert names == ["good"]
    stop_cleanly(running)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


def deferred_bypassing_validation(delay: float) -> Deferred:
    """A Deferred whose delay its constructor would refuse (an old handler, a hack)."""
    d = Deferred(1, "hand-built")
    d.delay = delay
    return d


def raising(exc: BaseException) -> Callable[[Greet, JobContext], object]:
    def handle(job: Greet, ctx: JobContext) -> object:
        raise exc

    return handle


#: Handlers that misbehave, and what must become of their job: "acked", or the words of
#: its dead letter's reason.
MISBEHAVING: dict[str, tuple[Callable[[Greet, JobContext], object], str]] = {
    "fatal with a lone surrogate": (raising(Fatal("bad \udc80 byte")), "fatal error: bad"),
    "an exception whose __str__ raises": (
        raising(Unprintable()),
        "Unprintable: (its message could not be read)",
    ),
    "SystemExit": (raising(SystemExit(3)), "SystemExit: 3"),
    "KeyboardInterrupt": (raising(KeyboardInterrupt()), "KeyboardInterrupt"),
    "GeneratorExit": (raising(GeneratorExit()), "GeneratorExit"),
    "a deferral beyond the ladder": (
        raising(deferred_bypassing_validation(1e11)),
        "deferral delay of 1.15741e+06 days is longer than the broker can hold",
    ),
    "a deferral of NaN seconds": (
        raising(deferred_bypassing_validation(float("nan"))),
        "deferral delay is not a number (NaN)",
    ),
    "a deferral of minus one second": (
        raising(deferred_bypassing_validation(-1.0)),
        "deferral delay cannot be negative",
    ),
    "returning a value": (lambda job, ctx: {"unexpected": "value"}, "acked"),
}


@pytest.mark.parametrize("behaviour", list(MISBEHAVING))
def test_a_misbehaving_handler_cannot_leave_its_job_unsettled(
    h: WorkerEnv, behaviour: str, recorder: MakeRecorder
) -> None:
    misbehave, expected = MISBEHAVING[behaviour]
    seen = recorder()
    names: list[str] = []

    def handle(job: Greet, ctx: JobContext) -> object:
        seen.enter()
        seen.leave()
        names.append(job.name)
        if job.name == "bad":
            return misbehave(job, ctx)
        return None

    # One attempt: a transient failure is dead-lettered at once, so the test is short.
    queues = QueueSet([QueueConfig(ALPHA, prefetch=4, max_priority=10, retry=RetryPolicy(1))])
    worker = Worker(h.backend, queues, [Handler(Greet, handle)], clock=h.clock)
    running = start(worker, h)
    producer = h.producer()
    producer.enqueue(Greet(name="bad"))

    if expected == "acked":
        h.wait_for(lambda: len(h.backend.acked(ALPHA)) == 1)
        assert h.backend.dead_letters(ALPHA) == []
    else:
        h.wait_for(lambda: bool(h.backend.dead_letters(ALPHA)))
        reason = h.backend.dead_letters(ALPHA)[0].reason
        assert expected in reason, f"reason {reason!r} should say {expected!r}"
        assert reason.encode(), "a reason always encodes"
    assert seen.attempts() == 1, "the handler ran once"
    good_job_still_runs(h, producer, names)
    stop_cleanly(running)


def test_a_retry_policy_whose_backoff_is_beyond_the_ladder_dead_letters_with_the_reason(
    h: WorkerEnv, recorder: MakeRecorder
) -> None:
    seen = recorder()
    too_long = MAX_DELAY_MS / 1000 * 2
    queues = QueueSet(
        [
            QueueConfig(
                ALPHA,
                prefetch=4,
                max_priority=10,
                retry=RetryPolicy(3, Backoff(initial=too_long, max=too_long)),
            )
        ]
    )

    def handle(job: Greet, ctx: JobContext) -> None:
        seen.enter()
        seen.leave()
        raise Retryable("try again in a few years")

    running = start(Worker(h.backend, queues, [Handler(Greet, handle)], clock=h.clock), h)
    h.producer().enqueue(Greet(name="patient"))

    h.wait_for(lambda: bool(h.backend.dead_letters(ALPHA)))
    reason = h.backend.dead_letters(ALPHA)[0].reason
    assert reason.startswith("the retry could not be scheduled: ValueError: retry delay"), reason
    assert "is longer than the broker can hold" in reason
    assert seen.attempts() == 1
    assert h.backend.deferred(ALPHA) == 0, "nothing was put on the ladder"
    stop_cleanly(running)


def test_a_handler_that_leaks_a_thread_does_not_hold_the_worker(
    h: WorkerEnv, recorder: MakeRecorder
) -> None:
    seen = recorder()
    release = threading.Event()
    leaked: list[threading.Thread] = []

    def handle(job: Greet, ctx: JobContext) -> None:
        seen.enter()
        seen.leave()
        thread = threading.Thread(target=release.wait, daemon=True)
        thread.start()
        leaked.append(thread)

    running = start(Worker(h.backend, h.queues, [Handler(Greet, handle)], clock=h.clock), h)
    producer = h.producer()
    for i in range(3):
        producer.enqueue(Greet(name=f"leaky-{i}"))
    h.wait_for(lambda: len(h.backend.acked(ALPHA)) == 3)
    assert all(t.is_alive() for t in leaked), "the threads outlive their jobs"
    running.stop()
    assert running.is_finished(), "shutdown does not wait for threads it does not own"
    release.set()


def test_a_handler_is_told_when_its_delivery_is_a_redelivery(
    h: WorkerEnv, recorder: MakeRecorder
) -> None:
    _seen, told, handler = noting(recorder, lambda job, ctx: (job.name, ctx.redelivered))
    producer = h.producer()
    producer.enqueue(Greet(name="once-delivered"))
    # A consumer takes it and goes away without settling it: the broker gives it back.
    taken: list[object] = []
    sub = h.backend.consume(h.queues[ALPHA], taken.append)
    h.wait_for(lambda: len(taken) == 1)
    sub.close()
    producer.enqueue(Greet(name="fresh"))

    running = start(Worker(h.backend, h.queues, [handler], clock=h.clock), h)
    h.wait_for(lambda: len(told) == 2)
    assert sorted(told) == [("fresh", False), ("once-delivered", True)]
    running.stop()


def test_undecodable_dead_letters_are_listed_deleted_by_handle_and_never_requeued(
    h: WorkerEnv,
) -> None:
    running = start(Worker(h.backend, h.queues, [Handler(Greet, lambda j, c: None)]), h)
    inject(h, ALPHA, b"garbage with an id", message_id="m-1")
    inject(h, ALPHA, b"\x00garbage without one")
    h.wait_for(lambda: len(everything_dead(h.backend, ALPHA)) == 2)
    inject(h, ALPHA, json.dumps(envelope_dict(job_type="test.unknown")).encode())
    h.wait_for(lambda: len(everything_dead(h.backend, ALPHA)) == 3)
    running.stop()

    first, second, third = everything_dead(h.backend, ALPHA)
    assert isinstance(first, UndecodableDeadLetter)
    assert isinstance(second, UndecodableDeadLetter)
    assert isinstance(third, DeadLetter)
    assert (first.handle, second.handle) == ("m-1", "#2")
    assert first.preview == "garbage with an id"
    assert second.preview == "\\x00garbage without one", "escaped to printable ASCII"
    assert "Invalid JSON" in second.error
    assert third.handle == str(third.envelope.job_id)
    assert "no handler for job type 'test.unknown'" in third.reason

    assert h.backend.requeue_dead_letters(ALPHA) == 1, "only the envelope goes back"
    assert [d.handle for d in everything_dead(h.backend, ALPHA)] == ["m-1", "#2"]
    assert h.backend.delete_dead_letters(ALPHA, ["m-1"]) == 1
    assert [d.handle for d in everything_dead(h.backend, ALPHA)] == ["#1"], "positions move up"
    assert h.backend.delete_dead_letters(ALPHA, ["#1", "no-such-handle"]) == 1
    assert everything_dead(h.backend, ALPHA) == []


def test_a_replacement_that_cannot_be_held_dead_letters_the_original(
    h: WorkerEnv,
) -> None:
    got: list[Any] = []
    h.producer().enqueue(Greet(name="x"))
    sub = h.backend.consume(h.queues[ALPHA], got.append)
    h.wait_for(lambda: len(got) == 1)
    delivery = got[0]
    assert delivery.queue == ALPHA
    delivery.retry(delivery.envelope.next_attempt(), float("nan"))  # no error escapes
    h.wait_for(lambda: bool(h.backend.dead_letters(ALPHA)))
    reason = h.backend.dead_letters(ALPHA)[0].reason
    assert reason.startswith("could not publish the retry: ValueError"), reason
    sub.close()


def test_a_retry_goes_to_the_queue_it_came_from_whatever_its_envelope_says(
    h: WorkerEnv,
) -> None:
    got: list[Any] = []
    h.producer().enqueue(Ping(seq=1))
    sub = h.backend.consume(h.queues[BETA], got.append)
    h.wait_for(lambda: len(got) == 1)
    first = got[0]
    lying: Envelope = first.envelope.next_attempt().model_copy(update={"queue": ALPHA})
    first.retry(lying, 0)
    h.wait_for(lambda: len(got) == 2)
    assert got[1].queue == BETA
    assert got[1].envelope.queue == BETA
    got[1].ack()
    sub.close()


# -- what an envelope cannot check: its job type's queue, its priority ------------------


def test_a_job_type_published_to_another_queue_than_its_own_is_dead_lettered_unrun(
    h: WorkerEnv, recorder: MakeRecorder
) -> None:
    seen = recorder()
    names: list[str] = []

    def greet(job: Greet, ctx: JobContext) -> None:
        names.append(job.name)

    def ping(job: Ping, ctx: JobContext) -> None:
        seen.enter()
        seen.leave()

    worker = Worker(
        h.backend, h.queues, [Handler(Greet, greet), Handler(Ping, ping)], clock=h.clock
    )
    running = start(worker, h)
    # Ping is bound to BETA; this one says ALPHA and is published there, as a foreign
    # producer that guessed the queue would.
    body = envelope_dict(queue=ALPHA, job_type=Ping.NAME, payload={"seq": 1})
    inject(h, ALPHA, json.dumps(body).encode())

    h.wait_for(lambda: bool(h.backend.dead_letters(ALPHA)))
    [dead] = h.backend.dead_letters(ALPHA)
    assert dead.reason == (
        f"job type {Ping.NAME!r} is bound to queue {BETA!r}, not {ALPHA!r} "
        "(the queue it was delivered from)"
    )
    assert str(dead.envelope.job_id) == body["job_id"], "the job is kept whole"
    assert seen.attempts() == 0, "it never ran on the wrong queue"
    good_job_still_runs(h, h.producer(), names)
    stop_cleanly(running)


def test_a_priority_above_its_queues_max_priority_is_dead_lettered_with_the_field_named(
    h: WorkerEnv, recorder: MakeRecorder
) -> None:
    _seen, runs, greet = noting(recorder, lambda job, ctx: (job.name, ctx.priority))

    def ping(job: Ping, ctx: JobContext) -> None:
        runs.append((f"ping {job.seq}", ctx.priority))

    worker = Worker(h.backend, h.queues, [greet, Handler(Ping, ping)], clock=h.clock)
    running = start(worker, h)
    # ALPHA's max_priority is 10; BETA has no priorities.
    inject(h, ALPHA, json.dumps(envelope_dict(priority=11, payload={"name": "11"})).encode())
    inject(h, ALPHA, json.dumps(envelope_dict(priority=10, payload={"name": "10"})).encode())
    on_beta = envelope_dict(queue=BETA, job_type=Ping.NAME, priority=1, payload={"seq": 1})
    inject(h, BETA, json.dumps(on_beta).encode())
    inject(h, BETA, json.dumps({**on_beta, "priority": 0, "payload": {"seq": 0}}).encode())

    h.wait_for(lambda: bool(h.backend.dead_letters(ALPHA)) and bool(h.backend.dead_letters(BETA)))
    h.wait_for(lambda: len(runs) == 2)
    [on_alpha] = h.backend.dead_letters(ALPHA)
    assert (
        on_alpha.reason == f"envelope priority 11 is above the max_priority of queue {ALPHA!r} (10)"
    )
    assert on_alpha.envelope.payload == {"name": "11"}
    [no_priorities] = h.backend.dead_letters(BETA)
    assert no_priorities.reason == (
        f"envelope priority 1 on queue {BETA!r}, which has no priorities (send 0)"
    )
    assert sorted(runs) == [("10", 10), ("ping 0", 0)], "the ones within the limit run"
    stop_cleanly(running)
