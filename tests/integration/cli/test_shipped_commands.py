"""The commands the README, docs/cli.md and issue 11 name run verbatim, from the
repository's root, with the shipped ``queuey.toml`` and the example handlers: ``queuey
enqueue greet '{"name":"ada"}'``, ``queuey worker --queues alpha,beta``, ``queuey dlq
list`` and the container's ``queuey worker``.

Only the broker's address differs from a fresh clone's (``QUEUEY_BROKER__URL``, the
tests' virtual host): everything else is read from the files as shipped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AMQP_URL
from tests.integration.broker import clean_queues
from tests.integration.processes import JsonLogProcess

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
QUEUEY = str(Path(sys.executable).parent / "queuey")


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "QUEUEY_CONFIG"}
    return {**env, "QUEUEY_BROKER__URL": AMQP_URL, "PYTHONUNBUFFERED": "1"}


@pytest.fixture(autouse=True)
def fresh_queues() -> Iterator[None]:
    with clean_queues("alpha", "beta"):
        yield


def run(*command: str) -> subprocess.CompletedProcess[str]:
    """A command typed at the root of a clone (``command`` starts with ``queuey``)."""
    assert command[0] == "queuey"
    return subprocess.run(
        [QUEUEY, *command[1:]],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class Worker(JsonLogProcess):
    """``queuey --log-format json worker ...`` from the root of the clone."""

    def __init__(self, *args: str) -> None:
        super().__init__(
            [QUEUEY, "--log-format", "json", "worker", *args], cwd=REPO, env=environment()
        )

    def first(self, message: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in self.events if e["message"] == message]
            if found:
                return found[0]
            assert self.proc.poll() is None, f"the worker exited: {self.events}"
            assert time.monotonic() < deadline, f"never logged {message!r}: {self.events}"
            time.sleep(0.05)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(30)
        self.join_reader()
        return code


def test_enqueue_greet_then_a_worker_on_alpha_and_beta_runs_it() -> None:
    enqueued = run("queuey", "enqueue", "greet", '{"name":"ada"}')
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = uuid.UUID(enqueued.stdout.strip())

    worker = Worker("--queues", "alpha,beta")
    try:
        started = worker.first("worker starting")
        assert started["queues"] == ["alpha", "beta"]
        done = worker.first("job succeeded")
        assert (done["job_id"], done["queue"]) == (str(job_id), "alpha")
    finally:
        assert worker.stop() == 0

    listed = run("queuey", "dlq", "list")
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stdout + listed.stderr


def test_the_container_command_consumes_every_example_queue() -> None:
    worker = Worker()  # the image's ENTRYPOINT ["queuey"] with CMD ["worker"]
    try:
        assert worker.first("worker starting")["queues"] == ["alpha", "beta"]
        nap = run("queuey", "enqueue", "nap", '{"seconds": 0.1}')
        assert nap.returncode == 0, nap.stderr
        done = worker.first("job succeeded")
        assert (done["job_type"], done["queue"]) == ("nap", "beta")
    finally:
        assert worker.stop() == 0
