"""enqueue_many's hot path: bodies encoded without a model decode to the same envelope
the model would have produced, for any payload, priority and job id."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import ClassVar

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from queuey_core import Envelope
from queuey_core import Job
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core.backends.capabilities import PublishesEncoded
from queuey_core.envelope import EncodedEnvelope
from queuey_core.producer import make_envelope


class Mixed(Job):
    NAME: ClassVar[str] = "mixed"
    QUEUE: ClassVar[str] = "plain"
    text: str
    n: int
    x: float
    flag: bool
    items: list[int]
    tags: dict[str, str]
    maybe: str | None = None


class Tricky(Job):
    """A job type that JSON must escape (quotes, a backslash, non-ASCII)."""

    NAME: ClassVar[str] = 'tricky "type" \\ é ✓'
    QUEUE: ClassVar[str] = "prio.q"
    text: str = ""


QUEUES = QueueSet(
    [
        QueueConfig("plain", prefetch=4),
        QueueConfig("prio.q", prefetch=4, max_priority=10),
    ]
)

texts = st.text(max_size=40)  # any code point: controls, quotes, surrogates excluded
mixed_jobs = st.builds(
    Mixed,
    text=texts,
    n=st.integers(min_value=-(2**63), max_value=2**63),
    x=st.floats(allow_nan=False),
    flag=st.booleans(),
    items=st.lists(st.integers(min_value=-(10**12), max_value=10**12), max_size=5),
    tags=st.dictionaries(texts, texts, max_size=3),
    maybe=st.none() | texts,
)
keys = st.none() | st.uuids().map(str) | st.text(min_size=1, max_size=20).filter(str.strip)


def encoded_by_producer(
    jobs: list[Job], ids: list[str | None], priority: int | None
) -> list[EncodedEnvelope]:
    producer = Producer(MemoryBackend(), QUEUES, clock=ManualClock())
    return producer._encode_many(jobs, ids, priority)


def as_the_model_encodes(
    job: Job, key: str | None, priority: int | None, env: EncodedEnvelope
) -> Envelope:
    model = make_envelope(
        job,
        QUEUES,
        priority=priority,
        enqueued_at=env.enqueued_at,
        job_id=key if key is not None else env.job_id,
    )
    return Envelope.decode(model.encode())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(mixed_jobs, keys), min_size=2, max_size=6))
def test_encoded_bodies_decode_to_the_envelope_the_model_encodes(
    batch: list[tuple[Mixed, str | None]],
) -> None:
    jobs: list[Job] = [job for job, _ in batch]
    ids = [key for _, key in batch]
    encoded = encoded_by_producer(jobs, ids, None)
    assert len(encoded) == len(jobs)
    for job, key, env in zip(jobs, ids, encoded, strict=True):
        expected = as_the_model_encodes(job, key, None, env)
        assert Envelope.decode(env.body) == expected, env.body
        assert (env.job_id, env.job_type, env.queue, env.priority, env.enqueued_at) == (
            expected.job_id,
            expected.job_type,
            expected.queue,
            expected.priority,
            expected.enqueued_at,
        )


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.one_of(mixed_jobs, st.builds(Tricky, text=texts)), min_size=1, max_size=8),
    st.none() | st.integers(min_value=0, max_value=0),
)
def test_mixed_job_types_in_one_batch_each_encode_as_their_model(
    jobs: list[Job], priority: int | None
) -> None:
    ids: list[str | None] = [None] * len(jobs)
    encoded = encoded_by_producer(jobs, ids, priority)
    for job, env in zip(jobs, encoded, strict=True):
        assert Envelope.decode(env.body) == as_the_model_encodes(job, None, priority, env)
    assert len({env.job_id for env in encoded}) == len(jobs), "random ids are distinct"


def test_a_priority_goes_into_the_body_and_the_fields() -> None:
    jobs: list[Job] = [Tricky(text="a"), Tricky(text="b"), Tricky(text="c")]
    encoded = encoded_by_producer(jobs, [None, "k", str(uuid.UUID(int=7))], 7)
    assert [Envelope.decode(e.body).priority for e in encoded] == [7, 7, 7]
    assert [e.priority for e in encoded] == [7, 7, 7]
    assert encoded[2].job_id == uuid.UUID(int=7), "a UUID's text is the id itself"


def test_enqueue_many_hands_a_backend_that_takes_them_encoded_bodies() -> None:
    class Recording(MemoryBackend):
        def __init__(self) -> None:
            super().__init__()
            self.batches: list[list[EncodedEnvelope]] = []

        def publish_encoded(self, items: Sequence[tuple[EncodedEnvelope, float | None]]) -> None:
            self.batches.append([env for env, _ in items])
            super().publish_encoded(items)

    backend = Recording()
    assert isinstance(backend, PublishesEncoded)
    producer = Producer(backend, QUEUES, clock=ManualClock())
    ids = producer.enqueue_many([Tricky(text=str(i)) for i in range(5)])
    assert [e.job_id for e in backend.batches[0]] == ids
    assert backend.pending("prio.q") == 5


def test_an_encoded_envelope_draws_its_id_once_and_writes_it_into_its_body() -> None:
    encoded = encoded_by_producer([Tricky(text="a"), Tricky(text="b")], [None, None], None)
    lazy = encoded[1]
    first = lazy.job_id
    assert lazy.job_id == first, "the id is drawn once"
    assert lazy.message_id == str(first)
    assert Envelope.decode(lazy.body).job_id == first, "the body carries the same id"
    assert lazy.body is lazy.encode(), "the body is written once"


def test_random_ids_from_a_batch_s_entropy_are_version_7_and_distinct() -> None:
    jobs: list[Job] = [Tricky(text=str(i)) for i in range(500)]
    encoded = encoded_by_producer(jobs, [None] * len(jobs), None)
    ids = [env.job_id for env in encoded]
    assert len(set(ids)) == len(ids), "distinct"
    assert {i.version for i in ids} == {7}, "time-ordered (RFC 9562), as the store wants"
    assert {i.variant for i in ids} == {uuid.RFC_4122}
    assert {i.int >> 80 for i in ids} == {env.enqueued_at for env in encoded}, (
        "each id starts with its envelope's enqueue time"
    )


@given(st.binary(min_size=16, max_size=16), st.integers(min_value=0, max_value=2**48 - 1))
def test_an_id_from_entropy_is_its_enqueue_time_then_the_entropy_s_bits(
    entropy: bytes, enqueued_at: int
) -> None:
    env = EncodedEnvelope(
        None, "t", "q", 0, enqueued_at, names=(b'"t"', b'"q"'), payload=b"{}", entropy=entropy
    )
    bits = int.from_bytes(entropy, "big")
    assert env.job_id.int >> 80 == enqueued_at
    assert env.job_id.version == 7
    assert env.job_id.variant == uuid.RFC_4122
    assert (env.job_id.int >> 64) & 0xFFF == (bits >> 64) & 0xFFF, "rand_a from the entropy"
    assert env.job_id.int & (2**62 - 1) == bits & (2**62 - 1), "rand_b from the entropy"
