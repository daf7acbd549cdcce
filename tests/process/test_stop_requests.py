"""How a worker process takes what asks it to stop: recorded where it arrives, applied
by the main loop; a signal counts, a supervisor's drain or death never does."""

from __future__ import annotations

import os
import signal

import pytest

from queuey_core import MemoryBackend
from queuey_core import Worker
from queuey_core.process import running
from queuey_core.process.stops import StopRequests
from tests.support import Greet
from tests.support import noop
from tests.support import seed_queues


class StoppedAtOnce(Exception):
    pass


@pytest.fixture
def stopping(monkeypatch: pytest.MonkeyPatch) -> running._Stopping:
    def stop_now(w: Worker, why: str) -> None:
        raise StoppedAtOnce(why)

    monkeypatch.setattr(running, "stop_now", stop_now)
    w = Worker(MemoryBackend(), seed_queues(), [noop(Greet)])
    return running._Stopping(w, 25.0, None)


def test_a_signal_is_only_recorded_by_its_handler_and_applied_by_the_loop() -> None:
    stops = StopRequests().install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        stops.wait(5)
        assert stops.take() == ["SIGTERM"], "recorded, nothing else done"
        assert stops.take() == [], "taken once"
    finally:
        stops.close()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, "the handler was put back"


def test_a_request_from_another_thread_wakes_the_loop() -> None:
    stops = StopRequests()
    try:
        stops.request("drain")
        stops.wait(5)
        assert stops.take() == ["drain"]
    finally:
        stops.close()


def test_the_first_signal_drains_and_the_second_stops_at_once(
    stopping: running._Stopping,
) -> None:
    stopping.apply("SIGTERM")
    assert stopping.w.handle.is_shutdown(), "draining"
    assert stopping.deadline < float("inf"), "with a deadline"
    with pytest.raises(StoppedAtOnce, match="second signal"):
        stopping.apply("SIGINT")


def test_a_supervisors_death_drains_however_often_it_is_told(
    stopping: running._Stopping,
) -> None:
    for what in ["orphaned", "drain", "orphaned", "drain", "orphaned"] * 20:
        stopping.apply(what)  # never StoppedAtOnce
    assert stopping.w.handle.is_shutdown()
    deadline = stopping.deadline
    stopping.apply("SIGTERM")  # systemd's own SIGTERM too: the first signal
    assert stopping.deadline == deadline, "the deadline is the first drain's, not moved"
    with pytest.raises(StoppedAtOnce):
        stopping.apply("SIGTERM")


def test_a_sighup_while_the_supervisor_lives_is_ignored(stopping: running._Stopping) -> None:
    stopping.apply("SIGHUP")  # no link: nobody died
    assert not stopping.w.handle.is_shutdown()


def test_the_supervisors_stop_stops_at_once(stopping: running._Stopping) -> None:
    with pytest.raises(StoppedAtOnce, match="signalled twice"):
        stopping.apply("stop")
