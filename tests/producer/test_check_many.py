"""``Producer.check_many``: every check of ``enqueue_many``, nothing published; what the
async producer runs before it sends a large batch in slices."""

from __future__ import annotations

import pytest

from queuey_core import InvalidPriorityError
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import UnknownQueueError
from queuey_core import job_id_for
from tests.producer.test_producer import Misrouted
from tests.support import ALPHA
from tests.support import Greet


def test_it_publishes_nothing_and_returns_the_ids_the_batch_will_carry(
    backend: MemoryBackend, producer: Producer
) -> None:
    ids = producer.check_many(
        [Greet(name="a"), Greet(name="b"), Greet(name="c")], job_ids=["order-1", None, None]
    )

    assert backend.pending(ALPHA) == 0
    assert ids[0] == job_id_for("order-1")
    assert len(set(ids)) == 3, "a random id for each job without one"


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"job_ids": ["a"]}, ValueError),  # one id for two jobs
        ({"job_ids": ["a", ""]}, ValueError),  # an empty key
        ({"delay": -1.0}, ValueError),
        ({"priority": 99}, InvalidPriorityError),
    ],
)
def test_a_bad_batch_is_refused_before_anything_is_sent(
    backend: MemoryBackend, producer: Producer, options: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        producer.check_many([Greet(name="a"), Greet(name="b")], **options)  # type: ignore[arg-type]
    assert backend.pending(ALPHA) == 0


def test_a_job_of_an_unknown_queue_late_in_the_batch_is_refused(producer: Producer) -> None:
    with pytest.raises(UnknownQueueError):
        producer.check_many([Greet(name="a"), Misrouted(id=1)])
