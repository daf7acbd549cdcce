"""The fault suite's moving parts: ``queuey worker`` processes and a producer thread.

Workers are the console script (``.venv/bin/queuey worker``), as in production, with the
ledger handlers of :mod:`tests.integration.ledger` loaded as a plugin and their logs
(JSON lines) in a file, so that a ``kill -9`` loses nothing the test reads.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from queuey_core import Job
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core.backends.rabbitmq import RabbitMQBackend
from tests.integration import ledger

QUEUEY = Path(sys.executable).with_name("queuey")
REPO = Path(__file__).resolve().parents[2]

PREFETCH = 10
CONCURRENCY = 4


def write_config(path: Path, url: str, *, prefetch: int = PREFETCH) -> Path:
    """A worker's config: the node, both ledger queues, and the example plugin's queues
    (installed beside queuey, its handlers are discovered too)."""
    path.write_text(
        f"""
[broker]
url = "{url}"
heartbeat = 10
connect_timeout = "10s"
recovery_timeout = "60s"

[worker]
concurrency = {CONCURRENCY}
job_timeout = "60s"
shutdown_timeout = "30s"

[queues.alpha]

[queues.beta]

[queues."{ledger.CLASSIC}"]
prefetch = {prefetch}

[queues."{ledger.QUORUM}"]
prefetch = {prefetch}
kind = "quorum"
"""
    )
    return path


class WorkerProcess:
    """One ``queuey worker --queues QUEUE`` process writing to the ledger."""

    def __init__(self, config: Path, ledger_file: Path, folder: Path, queue: str) -> None:
        plugin = ledger.plugin_path(folder / "plugin")
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(plugin), str(REPO)]),
            "PYTHONUNBUFFERED": "1",
            ledger.LEDGER_ENV: str(ledger_file),
        }
        self.log = folder / f"worker-{uuid.uuid4().hex[:6]}.log"
        self.started_at = time.time()
        args = ["--config", str(config), "--log-format", "json", "worker", "--queues", queue]
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [str(QUEUEY), *args],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """``kill -9``: no drain, no acks; the broker takes its deliveries back."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 40.0) -> int:
        """SIGTERM (a graceful drain); its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def events(self) -> list[dict[str, Any]]:
        found = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                found.append(json.loads(line))
        return found

    def settle_failures(self) -> int:
        """Settles the broker refused (a delivery of a dead channel), from the exit log."""
        exits = [e for e in self.events() if e["message"] == "worker exited"]
        assert exits, f"worker {self.pid} logged no exit"
        return int(exits[-1]["settle_failures"])

    def errors(self) -> list[str]:
        return [e["message"] for e in self.events() if e.get("level") in {"error", "critical"}]


class Feeder(threading.Thread):
    """Enqueues ``total`` jobs in batches of ``batch`` (each confirmed before the next),
    while the faults happen; keeps the job ids the producer returned."""

    def __init__(
        self,
        url: str,
        queues: QueueSet,
        make: Callable[[int], Job],
        total: int,
        *,
        batch: int = 100,
        pause: float = 0.0,
    ) -> None:
        super().__init__(name="feeder", daemon=True)
        self._rabbit = RabbitMQBackend(url, publish_timeout=90, recovery_timeout=90)
        self._producer = Producer(self._rabbit, queues)
        self._make = make
        self._total = total
        self._batch = batch
        self._pause = pause
        self.ids: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for start in range(0, self._total, self._batch):
                count = min(self._batch, self._total - start)
                jobs = [self._make(start + i) for i in range(count)]
                self.ids.extend(str(j) for j in self._producer.enqueue_many(jobs))
                if self._pause:
                    time.sleep(self._pause)
        except BaseException as exc:
            self.error = exc
        finally:
            self._rabbit.close()

    def finish(self, timeout: float = 60.0) -> list[str]:
        """Wait for every batch to be confirmed; the ids enqueued."""
        self.join(timeout)
        assert not self.is_alive(), "the producer did not finish"
        assert self.error is None, f"the producer failed: {self.error!r}"
        return self.ids
