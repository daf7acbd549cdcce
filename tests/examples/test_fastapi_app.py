"""The FastAPI example (examples/fastapi_app/app.py): a request handler enqueues with the
asyncio producer, and a worker runs the job's ``async def`` handler. On the in-memory
backend; FastAPI comes with the ``examples`` extra (in ``dev``)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient

from queuey_core import Envelope
from queuey_core import MemoryBackend
from queuey_core import NotEnqueuedError
from queuey_core.testing import QueueyKit
from tests.harness import Wrapping

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
    # The testing kit's backend behind the app, its worker running the handler.
    kit = QueueyKit([example.send_welcome], queues=example.QUEUES)
    monkeypatch.setattr(example, "make_backend", lambda: kit.backend)
    with kit, TestClient(example.app) as client:
        first = client.post("/signups", json={"email": "ada@example.com"})
        keyed = client.post(
            "/signups", json={"email": "bob@example.com"}, headers={"Idempotency-Key": "bob-1"}
        )
        again = client.post(
            "/signups", json={"email": "bob@example.com"}, headers={"Idempotency-Key": "bob-1"}
        )
        bad = client.post("/signups", json={"email": 3})
        assert first.status_code == 202, first.text
        assert again.status_code == 202, again.text
        assert keyed.json() == again.json(), "the key is the job id: a retry is the same job"
        assert bad.status_code == 422, "bad input: a clean HTTP error"
        waiting = kit.enqueued(example.SendWelcome)
        # The in-memory backend holds a chosen job id as a unique key: the retry under the
        # same Idempotency-Key is a duplicate, not a second job.
        assert [w.job.email for w in waiting] == ["ada@example.com", "bob@example.com"]

        # (While the app runs: its producer closes the backend when it stops.)
        outcomes = kit.drain()
        assert [o.succeeded for o in outcomes] == [True] * 2
    assert isinstance(kit.backend, MemoryBackend)
    assert kit.backend.is_closed(), "the app's producer closed its backend on the way out"


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
