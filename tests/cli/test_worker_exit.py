"""How ``queuey worker`` ends: the exit code tells whether the broker was lost."""

from __future__ import annotations

import threading

from queuey_cli.output import Exit
from queuey_cli.worker import _run
from queuey_core import MemoryBackend
from queuey_core import Worker
from tests.support import ALPHA
from tests.support import Greet
from tests.support import noop
from tests.support import seed_queues
from tests.support import wait_for


def test_a_worker_that_loses_the_broker_exits_3() -> None:
    backend = MemoryBackend()
    w = Worker(backend, seed_queues(), [noop(Greet)])

    def lose_the_broker() -> None:
        wait_for(lambda: backend.consumer_count(ALPHA) == 1)
        backend.close()

    threading.Thread(target=lose_the_broker, daemon=True).start()
    assert _run(w, backend, shutdown_timeout=5, burst=False) == Exit.BROKER_LOST


def test_a_worker_asked_to_stop_exits_0() -> None:
    backend = MemoryBackend()
    w = Worker(backend, seed_queues(), [noop(Greet)])
    threading.Timer(0.2, w.handle.shutdown).start()
    assert _run(w, backend, shutdown_timeout=5, burst=False) == Exit.OK
