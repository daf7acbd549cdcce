"""What a signal does to an ``enqueue --file`` run's bookkeeping: the first asks it to
stop after the batches in flight, a second stops it at once, except inside a
``deferred`` block (a batch being counted), whose end it waits for."""

from __future__ import annotations

import signal

import pytest

from queuey_cli.enqueue_file import _Stop


def test_the_first_signal_asks_and_a_second_interrupts() -> None:
    stop = _Stop()
    stop(signal.SIGTERM, None)
    assert stop.requested
    with pytest.raises(KeyboardInterrupt):
        stop(signal.SIGTERM, None)


def test_a_second_signal_inside_a_deferred_block_waits_for_its_end() -> None:
    stop = _Stop()
    stop(signal.SIGINT, None)
    done: list[str] = []

    def count() -> None:
        with stop.deferred():
            stop(signal.SIGINT, None)  # returns: the block goes on
            done.append("counted")

    with pytest.raises(KeyboardInterrupt):
        count()
    assert done == ["counted"], "the block ran to its end before the interrupt"


def test_a_deferred_block_without_a_signal_ends_quietly() -> None:
    stop = _Stop()
    with stop.deferred():
        pass
    stop(signal.SIGINT, None)
    with stop.deferred():
        pass  # one signal only asks: nothing to raise
    assert stop.requested
