"""The two ways to write a handler, for tests that run with both: a plain ``def`` on a
job thread, and an ``async def`` on the worker's event loop.

A test writes its handler's body once, as ``async def``, sleeping with
``await style.sleep(x)``. The ``thread`` style runs that body as a plain function: it
drives the coroutine by hand on the job thread, where ``style.sleep`` blocks (it never
suspends, so the body runs start to end in one call, exactly as a ``def`` would, and a
timeout's asynchronous exception lands in it as in any job thread). The ``async`` style
registers the ``async def`` itself, as a user would, and ``style.sleep`` awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Coroutine
from typing import Any
from typing import TypeVar

from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import ManualClock
from tests.harness import WorkerEnv
from tests.support import Recorder

J = TypeVar("J", bound=Job)
Body = Callable[[J, JobContext], Awaitable[object]]

STYLES = ["thread", "async"]


def drive(coro: Coroutine[Any, Any, object]) -> object:
    """Run a coroutine that never suspends to its end, on this thread."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("a thread-style body awaited something that suspends")


class Style:
    """One way of writing handlers (``thread`` or ``async``), in one test environment."""

    def __init__(self, name: str, env: WorkerEnv) -> None:
        self.name = name
        self.env = env

    def __repr__(self) -> str:
        return self.name

    @property
    def is_async(self) -> bool:
        return self.name == "async"

    def handler(self, job_type: type[J], body: Body[J]) -> Handler[J]:
        """``body`` as a handler of this style."""
        if self.is_async:

            async def run_async(job: J, ctx: JobContext) -> object:
                return await body(job, ctx)

            return Handler(job_type, run_async)

        def run_thread(job: J, ctx: JobContext) -> object:
            return drive(body(job, ctx))  # type: ignore[arg-type]

        return Handler(job_type, run_thread)

    def noop(self, job_type: type[J]) -> Handler[J]:
        async def nothing(job: J, ctx: JobContext) -> None:
            return None

        return self.handler(job_type, nothing)

    async def sleep(self, seconds: float) -> None:
        """Sleep the seed's ``seconds`` (as ``env.sleep``): blocking the job thread, or
        awaiting on the event loop; a timeout interrupts either."""
        if not self.is_async:
            self.env.sleep(seconds)
            return
        clock = getattr(self.env, "manual", None)
        if isinstance(clock, ManualClock):
            await manual_sleep(clock, seconds)
        else:
            await asyncio.sleep(self.env.d(seconds))


async def manual_sleep(clock: ManualClock, seconds: float) -> None:
    """Await until ``clock`` has been advanced by ``seconds``."""
    loop = asyncio.get_running_loop()
    woken = loop.create_future()

    def wake() -> None:
        def done() -> None:
            if not woken.done():
                woken.set_result(None)

        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
            loop.call_soon_threadsafe(done)

    timer = clock.call_later(seconds, wake)
    try:
        await woken
    finally:
        timer.cancel()


class StyledRecorder(Recorder):
    """A :class:`Recorder` whose handlers are of one style."""

    def __init__(self, style: Style) -> None:
        super().__init__()
        self.style = style

    def handler(self, job_type: type[J], fn: Callable[[J, JobContext], object]) -> Handler[J]:
        body: Body[J] = fn  # type: ignore[assignment]

        async def checked(job: J, ctx: JobContext) -> object:
            try:
                return await body(job, ctx)
            except AssertionError as exc:
                self.failed_assertions.append(exc)
                raise

        return self.style.handler(job_type, checked)
