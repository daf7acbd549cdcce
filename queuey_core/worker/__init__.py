"""The worker: consumes queues and runs each delivery's handler on a thread pool.

The behaviour is the seed's, the original Rust runtime kept in this repository at
``docs/seed/worker.rs`` (its module comment and its 28 tests, ported in
``tests/worker/test_worker.py``). One module a duty:

* :mod:`.runner`: :class:`Worker`, its run loop, job threads and graceful shutdown;
* :mod:`.dispatch`: one delivery from its envelope to its settle (the seed's algorithm);
* :mod:`.tracked`: the delivery as the dispatcher holds it (was a settle attempted?);
* :mod:`.outcome`: how a handler's run ended, told apart;
* :mod:`.redelivery`: counting messages that come back unsettled, so none loops for ever;
* :mod:`.timeout`: job timeouts, and threads that ignore them;
* :mod:`.handle`: :class:`WorkerHandle`, shutdown from another thread and the counters;
* :mod:`.hooks`: :class:`WorkerHooks`, what library users are told as jobs run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queuey_core._lazy import lazy_exports
from queuey_core.worker.handle import WorkerHandle
from queuey_core.worker.hooks import JobInfo, WorkerHooks

if TYPE_CHECKING:
    from queuey_core.worker.runner import Worker

# The Worker on first use: the control channel's responder (which a worker runs, and
# which imports the hooks from here) must not need the worker loaded first.
__getattr__ = lazy_exports(__name__, {"Worker": "queuey_core.worker.runner"})

__all__ = ["JobInfo", "Worker", "WorkerHandle", "WorkerHooks"]
