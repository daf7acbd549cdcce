"""The Huey side of the embedded benchmark: the same jobs on Huey's SQLite storage.

``huey_consumer peer_huey.huey -w 8 -k thread`` runs it (bench/embedded.py does), on
the file ``QUEUEY_BENCH_HUEY_DB``; results are off (queuey stores none either).
"""

from __future__ import annotations

import os
import time

from huey import SqliteHuey

_FD = int(os.environ.get("QUEUEY_BENCH_FD", "-1"))

huey = SqliteHuey(
    "bench", filename=os.environ.get("QUEUEY_BENCH_HUEY_DB", "huey.db"), results=False
)


def report(line: str) -> None:
    if _FD >= 0:
        os.write(_FD, line.encode() + b"\n")


@huey.task()
def noop(mark: bool = False) -> None:
    if mark:
        report("first")


@huey.task()
def stamped(sent: float) -> None:
    report(str(round((time.time() - sent) * 1e6)))
