"""A worker's watch on paused queues, and its consumers, on fakes: a read that fails
keeps the last state (it never resumes a queue), and a cancelled consumer is closed only
once nothing of the worker is in flight."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import pytest

from queuey_core import MemoryBackend
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core.backends.base import ConsumerEnded
from queuey_core.backends.base import Delivery
from queuey_core.control import worker_statuses
from queuey_core.errors import BackendError
from queuey_core.flow.pause import PauseWatch
from queuey_core.flow.pause import resume_queue
from queuey_core.flow.pause_consumers import Consumers
from tests.support import named_envelope
from tests.support import start
from tests.support import wait_for


class Flaky:
    """A SupportsPause whose reads fail while ``down`` is set."""

    def __init__(self) -> None:
        self.paused: set[str] = set()
        self.down = threading.Event()
        self.reads = 0

    def set_paused(self, queue: str, paused: bool) -> bool:
        was = queue in self.paused
        if paused:
            self.paused.add(queue)
        else:
            self.paused.discard(queue)
        return was != paused

    def paused_queues(self, names: Sequence[str]) -> frozenset[str]:
        self.reads += 1
        if self.down.is_set():
            raise BackendError("the broker is out of reach")
        return frozenset(self.paused.intersection(names))

    def pause_poll(self) -> float:
        return 0.01


def test_a_failed_read_keeps_the_last_state_and_a_later_one_applies() -> None:
    backend = Flaky()
    backend.set_paused("alpha", True)
    told: list[frozenset[str]] = []
    watch = PauseWatch(backend, ["alpha", "beta"], told.append)
    try:
        assert watch.start() == {"alpha"}
        backend.down.set()
        reads = backend.reads
        wait_for(lambda: backend.reads >= reads + 5, None)
        assert watch.paused == {"alpha"}, "a failed read is not a resume"
        assert all(state == {"alpha"} for state in told)

        backend.set_paused("alpha", False)
        backend.down.clear()
        wait_for(lambda: watch.paused == frozenset(), None)
        assert told[-1] == frozenset()
    finally:
        watch.close()


def test_a_paused_queue_s_consumer_is_closed_only_when_nothing_is_in_flight() -> None:
    backend = MemoryBackend()
    config = QueueConfig("alpha", prefetch=2)
    backend.declare([config])
    got: list[Delivery] = []

    def sink(item: Delivery | ConsumerEnded) -> None:
        if not isinstance(item, ConsumerEnded):
            got.append(item)

    in_flight = [0]
    consumers = Consumers(backend, [config], sink, in_flight=lambda: in_flight[0])
    consumers.start(threading.Event())
    try:
        backend.publish(named_envelope("alpha", "first"))
        wait_for(lambda: len(got) == 1, None)
        in_flight[0] = 1  # the delivery runs

        backend.set_paused("alpha", True)
        consumers.look_now()
        wait_for(lambda: consumers.paused == ("alpha",), None)
        assert backend.consumer_count("alpha") == 0
        for _ in range(3):  # later looks, as the watch's thread makes them
            consumers._apply(frozenset({"alpha"}))
        assert backend.pending("alpha") == 0, "the running delivery was given back"

        backend.publish(named_envelope("alpha", "second"))
        got[0].ack()
        in_flight[0] = 0
        consumers._apply(frozenset({"alpha"}))  # now the cancelled consumer is closed
        assert len(got) == 1, "nothing more was delivered while paused"
        assert backend.pending("alpha") == 1
        assert backend.acked("alpha") == [got[0].envelope]

        backend.set_paused("alpha", False)
        consumers.look_now()
        wait_for(lambda: len(got) == 2, None)
        assert consumers.paused == ()
    finally:
        consumers.stop()
        consumers.close()


def test_a_worker_whose_queues_are_all_paused_stays_up_idle_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = MemoryBackend()
    queues = QueueSet([QueueConfig("alpha"), QueueConfig("beta")])
    backend.set_paused("alpha", True)
    backend.set_paused("beta", True)
    worker = Worker(backend, queues, [])
    caplog.set_level(logging.WARNING, logger="queuey_core.flow.pause_consumers")
    running = start(worker, None)
    try:
        wait_for(lambda: "idle until one is resumed" in caplog.text, None)
        wait_for(lambda: worker_statuses(backend, timeout=0)[0].state == "consuming", None)
        [status] = worker_statuses(backend, timeout=0)
        assert status.paused == ("alpha", "beta")
        assert not running.is_finished()

        resume_queue(backend, "beta")
        wait_for(lambda: worker_statuses(backend, timeout=0)[0].paused == ("alpha",), None)
        assert backend.consumer_count("beta") == 1
    finally:
        running.stop()
