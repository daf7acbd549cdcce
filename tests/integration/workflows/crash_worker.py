"""A worker process for the kill -9 test: the workflow rig's jobs on a backend URL, every
handler run appended to a ledger file as one line (an O_APPEND write: whole or nothing).

``python -m tests.integration.workflows.crash_worker BROKER_URL STORE_URL LEDGER``
runs until killed (or SIGTERM).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import Worker
from queuey_core.backends.open import open_backend
from queuey_core.settings import BrokerSettings
from queuey_core.workflows import WorkflowHook
from queuey_core.workflows import Workflows
from queuey_core.workflows import open_workflow_store
from queuey_core.workflows import started_before
from tests.support import seed_queues
from tests.workflows.support import Add
from tests.workflows.support import Total


def main(broker: str, store_url: str, ledger: str) -> None:
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def note(ctx: JobContext, extra: str = "") -> None:
        line = f"{ctx.job_type} {ctx.job_id} {int(started_before(ctx))} {os.getpid()} {extra}\n"
        os.write(fd, line.encode())

    def add(job: Add, ctx: JobContext) -> int:
        note(ctx)
        return job.x

    def total(job: Total, ctx: JobContext) -> int:
        note(ctx, ",".join(map(str, job.parts)))
        return sum(job.parts)

    backend: Any = open_backend(BrokerSettings(url=broker))
    queues = seed_queues()
    flows = Workflows(backend, queues, open_workflow_store(store_url))
    worker = Worker(
        backend,
        queues,
        [Handler(Add, add), Handler(Total, total)],
        hooks=[WorkflowHook(flows)],
        concurrency=4,
    )
    signal.signal(signal.SIGTERM, lambda *_: worker.handle.shutdown())
    worker.run()


if __name__ == "__main__":
    main(*sys.argv[1:4])
