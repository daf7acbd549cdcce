"""``Inspectable.inspect``, what ``queuey queues`` and ``dlq list`` count with, as a
contract over both backends: a queue that does not exist is None, never an error, and
hides nothing after it."""

from __future__ import annotations

import uuid

from queuey_core.backends.base import ConsumerEnded
from queuey_core.backends.base import Delivery
from queuey_core.backends.capabilities import Inspection
from queuey_core.backends.capabilities import QueueCounts
from tests.backend_kinds import ContractEnv
from tests.integration.backends.test_backend_contract import env

__all__ = ["env"]  # the contract suite's fixture: each test runs on both backends


def test_inspect_counts_declared_queues_and_gives_none_for_missing_ones(env: ContractEnv) -> None:
    config = env.queue(max_priority=5)
    for n in range(3):
        env.backend.publish(env.envelope(config, f"job {n}"))
    dead: list[Delivery] = []

    def sink(d: Delivery | ConsumerEnded) -> None:
        if not isinstance(d, ConsumerEnded) and not dead:
            dead.append(d)

    sub = env.backend.consume(config, sink)
    env.wait_until(lambda: bool(dead))
    sub.cancel()
    dead[0].dead_letter("fatal error: counted")
    sub.close()  # the other deliveries go back to the queue
    missing = f"contract.missing.{uuid.uuid4().hex[:8]}"

    def counted() -> QueueCounts | None:
        found: Inspection = env.backend.inspect([missing, config.name])
        return found.queues[config.name]

    env.wait_until(lambda: counted() == QueueCounts(2, 0, 1))
    found = env.backend.inspect([missing, config.name, missing])
    assert found.queues[missing] is None, "a missing queue is None, not NOT_FOUND"
    assert found.queues[config.name] == QueueCounts(ready=2, consumers=0, dead_letters=1), (
        "the queue checked after a missing one is still counted"
    )
    assert isinstance(found.held, int), "declare() declared the delay ladder"
