"""The delay ladder's routing, simulated with RabbitMQ's topic matching rules."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queuey_core.backends.rabbitmq import topology
from queuey_core.queues import QueueKind


def topic_matches(pattern: str, key: str) -> bool:
    """RabbitMQ topic semantics: ``*`` is one word, ``#`` zero or more."""
    parts = []
    for word in pattern.split("."):
        parts.append(r"[^.]+" if word == "*" else r".*" if word == "#" else re.escape(word))
    regex = r"\.".join(parts).replace(r"\..*", r"(\..*)?")
    return re.fullmatch(regex, key) is not None


def ride_the_ladder(key: str, queues: list[str]) -> tuple[int, list[str]]:
    """Total ms held and the queues the deliver exchange routes to, for ``key``."""
    held = 0
    for level in reversed(range(topology.DELAY_LEVELS)):
        parks = topic_matches(topology.level_binding(level, "1"), key)
        passes = topic_matches(topology.level_binding(level, "0"), key)
        assert parks != passes, f"level {level} must route {key!r} exactly one way"
        if parks:
            held += 2**level
    targets = [q for q in queues if topic_matches(topology.deliver_binding(q), key)]
    return held, targets


@given(st.integers(min_value=1, max_value=topology.MAX_DELAY_MS))
def test_every_delay_is_held_exactly_and_delivered_to_its_queue(ms: int) -> None:
    queues = ["alpha", "test.alpha", "to.alpha", "a.b.c"]
    for queue in queues:
        held, targets = ride_the_ladder(topology.delay_routing_key(ms, queue), queues)
        assert held == ms
        assert targets == [queue], "a queue whose name ends like another's gets nothing"


def test_delays_round_up_to_the_millisecond_and_have_a_ceiling() -> None:
    assert topology.delay_ms(0.0001) == 1, "a job never runs early"
    assert topology.delay_ms(1.5) == 1500
    assert topology.delay_ms(86_400 * 700) == 86_400 * 700 * 1000
    with pytest.raises(ValueError, match="exceed"):
        topology.delay_ms(86_400 * 800)
    with pytest.raises(ValueError, match="negative"):
        topology.delay_ms(-1)


def test_a_dead_letter_queue_is_of_its_queues_kind() -> None:
    # A classic .dlq lives on one node of a cluster: a quorum queue's dead letters are
    # replicated as its jobs are.
    assert topology.dead_letter_queue_arguments() == {"x-queue-type": "classic"}
    assert topology.dead_letter_queue_arguments(QueueKind.CLASSIC) == {"x-queue-type": "classic"}
    assert topology.dead_letter_queue_arguments(QueueKind.QUORUM) == {"x-queue-type": "quorum"}
    # The ladder is quorum whatever the queues are: it must survive a node's loss.
    assert all(
        topology.delay_queue_arguments(k)["x-queue-type"] == "quorum"
        for k in range(topology.DELAY_LEVELS)
    )
