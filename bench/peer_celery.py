"""The Celery side of the benchmark: the same no-op job, threads pool, acks_late.

``celery -A peer_celery worker -P threads -c 8 -Q bench_celery`` runs it (bench/procs.py
does); everything else is Celery's default.
"""

from __future__ import annotations

import os

from celery import Celery

URL = os.environ.get("QUEUEY_BENCH_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
_FD = int(os.environ.get("QUEUEY_BENCH_FD", "-1"))

app = Celery("peer_celery", broker=URL)
app.conf.task_acks_late = True
app.conf.task_default_queue = "bench_celery"
app.conf.task_ignore_result = True
app.conf.broker_connection_retry_on_startup = True


@app.task(name="bench.noop")
def noop(mark: bool = False) -> None:
    if mark and _FD >= 0:
        os.write(_FD, b"first\n")
