"""The FastAPI example (examples/fastapi_app/app.py): a request handler enqueues with the
asyncio producer, and a worker runs the job's ``async def`` handler. On the in-memory
backend; FastAPI comes with the ``examples`` extra (in ``dev``)."""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient

from queuey_core import Envelope
from queuey_core import MemoryBackend
from queuey_core import NotEnqueuedError
from queuey_core import Worker
from tests.harness import Wrapping
from tests.support import wait_for

APP = Path(__file__).resolve().parents[2] / "examples" / "fastapi_app" / "app.py"


@pytest.fixture
def example() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("fastapi_example", APP)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fastapi_example"] = module  # pydantic resolves the models' module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["fastapi_example"]


class Refusing(Wrapping):
    def publish(self, envelope: Envelope, *, delay: float | None = None) -> None:
        raise NotEnqueuedError("refused")


def test_a_request_enqueues_a_job_that_a_worker_runs(
    example: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = MemoryBackend()
    monkeypatch.setattr(example, "make_backend", lambda: backend)
    with TestClient(example.app) as client:
        first = client.post("/signups", json={"email": "ada@example.com"})
        keyed = client.post(
            "/signups", json={"email": "bob@example.com"}, headers={"Idempotency-Key": "bob-1"}
        )
        again = client.post(
            "/signups", json={"email": "bob@example.com"}, headers={"Idempotency-Key": "bob-1"}
        )
        bad = client.post("/signups", json={"email": 3})
        assert first.status_code == 202, first.text
        assert keyed.json() == again.json(), "the key is the job id: a retry is recognisable"
        assert bad.status_code == 422, "bad input: a clean HTTP error"
        assert backend.pending("signups") == 3

        # (While the app runs: its producer closes the backend when it stops.)
        worker = Worker(backend, example.QUEUES, [example.send_welcome], concurrency=2)
        running = threading.Thread(target=worker.run)
        running.start()
        wait_for(lambda: len(backend.acked("signups")) == 3)
        worker.handle.shutdown()
        running.join()
    assert backend.is_closed(), "the app's producer closed its backend on the way out"


def test_a_job_the_broker_refused_is_a_503(
    example: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    inner = MemoryBackend()
    monkeypatch.setattr(example, "make_backend", lambda: Refusing(inner))
    with TestClient(example.app) as client:
        answer = client.post("/signups", json={"email": "ada@example.com"})
    assert answer.status_code == 503
    assert "not queued" in answer.json()["detail"]
    assert inner.pending("signups") == 0
