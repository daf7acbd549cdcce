"""The Dramatiq side of the benchmark: the same jobs, Dramatiq's defaults.

``dramatiq peer_dramatiq --processes 1 --threads 8`` runs it (bench/procs.py does);
the harness enqueues with :func:`noop.send` (unconfirmed, Dramatiq's default).
"""

from __future__ import annotations

import os
import time

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

URL = os.environ.get("QUEUEY_BENCH_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
_FD = int(os.environ.get("QUEUEY_BENCH_FD", "-1"))

broker = RabbitmqBroker(url=URL)
dramatiq.set_broker(broker)


def report(line: str) -> None:
    if _FD >= 0:
        os.write(_FD, line.encode() + b"\n")


@dramatiq.actor(queue_name="bench_dramatiq", max_retries=0)
def noop(mark: bool = False) -> None:
    if mark:
        report("first")


@dramatiq.actor(queue_name="bench_dramatiq_io", max_retries=0)
def wait(seconds: float = 0.02, mark: bool = False) -> None:
    if mark:
        report("first")
    time.sleep(seconds)  # Dramatiq has no cancellable wait; a sleep is not busy either
