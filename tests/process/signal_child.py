"""A worker process for the signal-burst tests: the library's main loop (the one
``queuey worker`` runs) over an in-memory backend that always has work.

Run as ``python -m tests.process.signal_child SHUTDOWN_TIMEOUT``; it prints ``ready``
once its signal handlers are in place and the worker runs, then exits as the loop
decides. Jobs take 20 ms, so a drain has something to finish.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import threading
import time

from queuey_core import JobContext
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import Worker
from queuey_core import handler
from queuey_core.process.running import exit_process
from queuey_core.process.running import run_until_stopped
from queuey_core.process.stops import StopRequests
from tests.support import Greet
from tests.support import seed_queues


@handler
def greet(job: Greet, ctx: JobContext) -> None:
    """A short job, so a drain has something to wait for."""
    time.sleep(0.02)


def main() -> None:
    """Run until stopped; exit with the code the loop returns."""
    faulthandler.register(signal.SIGUSR1)  # the test asks where a late one is stuck
    stops = StopRequests().install()
    backend = MemoryBackend()
    queues = seed_queues()
    producer = Producer(backend, queues)
    producer.enqueue_many([Greet(name="x")] * 2000)
    w = Worker(backend, queues, [greet], concurrency=2)

    def announce() -> None:
        while not w.handle.in_flight():
            time.sleep(0.005)
        print("ready", flush=True)

    threading.Thread(target=announce, daemon=True).start()
    try:
        code = run_until_stopped(w, backend, float(sys.argv[1]), False, None, stops)
    finally:
        stops.retire()  # as the console script does: the process ends now
    exit_process(code)


if __name__ == "__main__":
    main()
