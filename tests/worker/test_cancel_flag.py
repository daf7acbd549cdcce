"""A job's cancellation flag behaves as a threading.Event, its lock made on first use."""

from __future__ import annotations

import threading

from queuey_core.worker.cancels import CancelEvent


def test_a_fresh_flag_is_clear_and_makes_no_lock() -> None:
    flag = CancelEvent()
    assert not flag.is_set()
    assert "_cond" not in vars(flag)
    assert flag.wait(0) is False
    assert "_cond" in vars(flag)


def test_set_wakes_a_waiter_in_another_thread() -> None:
    flag = CancelEvent()
    woke: list[bool] = []
    waiting = threading.Thread(target=lambda: woke.append(flag.wait(30)))
    waiting.start()
    flag.set()
    waiting.join(30)
    assert woke == [True]
    assert flag.is_set()
    flag.clear()
    assert not flag.is_set()


def test_threads_using_a_fresh_flag_at_once_share_one_condition() -> None:
    for _ in range(200):
        flag = CancelEvent()
        seen: list[object] = []
        start = threading.Barrier(4)

        def first_use(
            flag: CancelEvent = flag, seen: list[object] = seen, start: threading.Barrier = start
        ) -> None:
            start.wait()
            seen.append(flag._cond)

        threads = [threading.Thread(target=first_use) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({id(c) for c in seen}) == 1
