"""Time-ordered job ids (queuey_core.uuid7): the layout of RFC 9562's version 7."""

from __future__ import annotations

import time
import uuid

from hypothesis import given
from hypothesis import strategies as st

from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core.uuid7 import uuid7
from tests.support import Greet
from tests.support import seed_queues


def test_an_id_is_version_7_with_the_time_in_its_first_48_bits() -> None:
    before = time.time_ns() // 1_000_000
    made = uuid7()
    after = time.time_ns() // 1_000_000
    assert made.version == 7
    assert made.variant == uuid.RFC_4122
    assert before <= made.int >> 80 <= after


@given(st.integers(min_value=0, max_value=2**48 - 2), st.binary(min_size=10, max_size=16))
def test_ids_of_later_milliseconds_sort_after_as_uuids_and_as_text(ms: int, entropy: bytes) -> None:
    earlier = uuid7(ms, b"\xff" * 16)  # the largest id of its millisecond
    later = uuid7(ms + 1, entropy)
    assert earlier < later
    assert str(earlier) < str(later), "a B-tree on the text keeps them in time order too"


def test_ids_of_one_millisecond_are_distinct() -> None:
    ids = {uuid7(1_700_000_000_000) for _ in range(10_000)}
    assert len(ids) == 10_000


def test_the_producer_s_ids_start_with_their_enqueue_time() -> None:
    clock = ManualClock()
    producer = Producer(MemoryBackend(), seed_queues(), clock=clock)
    first = producer.enqueue(Greet(name="ada"))
    clock.advance(0.002)
    batch = producer.enqueue_many([Greet(name=str(i)) for i in range(3)])
    assert {i.version for i in [first, *batch]} == {7}
    assert all(first < later for later in batch), "enqueued later, sorted after"
