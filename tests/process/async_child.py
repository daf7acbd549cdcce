"""A worker process whose async jobs never end on their own, for the second-signal test.

Run as ``python -m tests.process.async_child``: it prints ``started NAME`` as each job's
coroutine starts, ``draining`` once the first signal is applied, and ``finally NAME``
when a job's ``finally`` block runs, under the library's main loop (the one ``queuey
worker`` runs) over an in-memory backend.
"""

from __future__ import annotations

import asyncio

from queuey_core import JobContext
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import Worker
from queuey_core import WorkerHooks
from queuey_core import handler
from queuey_core.process.running import exit_process
from queuey_core.process.running import run_until_stopped
from queuey_core.process.stops import StopRequests
from tests.support import Greet
from tests.support import seed_queues


@handler
async def greet(job: Greet, ctx: JobContext) -> None:
    """Waits for ever; says when it starts and when its clean-up runs."""
    print(f"started {job.name}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        print(f"finally {job.name}", flush=True)


class SaysDraining(WorkerHooks):
    def on_worker_draining(self, worker: object) -> None:
        print("draining", flush=True)


def main() -> None:
    """Run until stopped; exit with the code the loop returns."""
    stops = StopRequests().install()
    backend = MemoryBackend()
    queues = seed_queues()
    Producer(backend, queues).enqueue_many([Greet(name="a"), Greet(name="b")])
    w = Worker(backend, queues, [greet], hooks=[SaysDraining()])
    try:
        code = run_until_stopped(w, backend, 60.0, False, None, stops)
    finally:
        stops.retire()
    exit_process(code)


if __name__ == "__main__":
    main()
