"""A job's cancellation flag, its lock made only when someone uses it.

Owns: :class:`CancelEvent`, the flag every job gets (a thread job's as it is, an async
job's as :class:`~queuey_core.aio.cancel.LoopCancelEvent`). It lives on its own, with
nothing but :mod:`threading` beneath it, so that the worker and the asyncio side can both
build on it without importing each other.
"""

from __future__ import annotations

import threading
from typing import Any


class CancelEvent(threading.Event):
    """A job's cancellation flag, its lock made only when someone uses it.

    One is made for every job, and most jobs never set, clear or wait on their flag
    (only a cancel, a timeout, a forced stop or ``ctx.wait`` does); ``is_set()`` reads
    a plain attribute. So the Condition an Event is built around is made on first use.
    Two threads using it first at once agree on one: ``dict.setdefault`` is atomic.
    """

    def __init__(self) -> None:
        self._flag = False

    def __getattr__(self, name: str) -> Any:
        if name != "_cond":
            raise AttributeError(name)
        # Over an RLock: an Event's Condition over a plain Lock looks up three RLock
        # methods and catches an AttributeError for each; the Event never waits on its
        # own lock twice, so the reentrancy changes nothing.
        return self.__dict__.setdefault("_cond", threading.Condition(threading.RLock()))
