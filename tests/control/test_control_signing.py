"""Signed control requests, in memory: with ``[control] secret`` a worker answers only
requests signed with it, fresh and never seen before; everything else is refused,
counted, logged once a while and never answered.

The worker's clock is a manual clock started at the real time, so that what the asker
signs now is fresh, and moving the clock ages it without waiting.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core.backends.capabilities import ControlHandler
from queuey_core.backends.capabilities import ControlServer
from queuey_core.control import VERSION
from queuey_core.control import Command
from queuey_core.control import ControlRequest
from queuey_core.control import ControlResponder
from queuey_core.control import Selection
from queuey_core.control import shutdown_workers
from queuey_core.control import worker_statuses
from queuey_core.control.signing import MAX_SKEW
from queuey_core.control.signing import Verifier
from queuey_core.control.signing import sign
from queuey_core.control.signing import unwrap
from queuey_core.errors import DecodeError
from tests.support import ALPHA
from tests.support import Greet
from tests.support import Running
from tests.support import noop
from tests.support import start
from tests.support import wait_for

SECRET = "correct horse battery staple"
OTHER = "another secret, just as long"


class Serving(MemoryBackend):
    """A memory backend that keeps the control handlers (the workers' responders)."""

    def __init__(self) -> None:
        super().__init__()
        self.responders: list[ControlResponder] = []

    def serve_control(self, handler: ControlHandler) -> ControlServer:
        assert isinstance(handler, ControlResponder)
        self.responders.append(handler)
        return super().serve_control(handler)


@pytest.fixture
def backend() -> Serving:
    return Serving()


@pytest.fixture
def now_clock() -> ManualClock:
    return ManualClock(start_wall_ms=time.time_ns() // 1_000_000)


@contextmanager
def serving(
    backend: Serving, queues: QueueSet, clock: ManualClock, secret: str | None
) -> Iterator[tuple[Running, Worker]]:
    """A worker answering the control channel (signed with ``secret``) until the block
    ends."""
    worker = Worker(
        backend, queues, [noop(Greet)], consume=[ALPHA], clock=clock, control_secret=secret
    )
    running = start(worker, clock)
    try:
        wait_for(lambda: len(backend.responders) == 1, clock)
        yield running, worker
    finally:
        running.stop()


def status_request() -> bytes:
    return ControlRequest(v=VERSION, command=Command.STATUS).encode()


def test_a_worker_with_a_secret_answers_only_requests_signed_with_it(
    backend: Serving,
    queues: QueueSet,
    now_clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with serving(backend, queues, now_clock, SECRET):
        assert len(worker_statuses(backend, timeout=0, secret=SECRET)) == 1, "signed: answered"
        with caplog.at_level(logging.WARNING, logger="queuey_core.control"):
            assert worker_statuses(backend, timeout=0) == [], "unsigned: refused"
            assert worker_statuses(backend, timeout=0, secret=OTHER) == [], "another secret"
            for _ in range(50):
                backend.broadcast_control(status_request(), timeout=0)
        assert backend.responders[0].refused == 52, "every refusal is counted"
        assert caplog.text.count("control request ignored") == 1, "logged once a while"
        assert "this worker requires signed requests" in caplog.text
        assert SECRET not in caplog.text


def test_an_unsigned_or_badly_signed_shutdown_does_not_stop_a_worker(
    backend: Serving, queues: QueueSet, now_clock: ManualClock
) -> None:
    with serving(backend, queues, now_clock, SECRET) as (running, worker):
        everyone = Selection(all=True)
        assert shutdown_workers(backend, everyone, timeout=0) == []
        assert shutdown_workers(backend, everyone, timeout=0, secret=OTHER) == []
        assert not worker.handle.is_shutdown(), "publishing rights alone do not drain it"
        accepted = shutdown_workers(backend, everyone, timeout=0, secret=SECRET)
        assert len(accepted) == 1
        assert running.join() is None, "the signed shutdown drained it"


def test_a_stale_or_replayed_request_is_refused(
    backend: Serving, queues: QueueSet, now_clock: ManualClock
) -> None:
    with serving(backend, queues, now_clock, SECRET):
        signed = sign(status_request(), SECRET, now_ms=now_clock.wall_ms())
        assert len(backend.broadcast_control(signed, timeout=0)) == 1
        assert backend.broadcast_control(signed, timeout=0) == [], "the same request again"
        early = sign(status_request(), SECRET, now_ms=now_clock.wall_ms() + 61_000)
        assert backend.broadcast_control(early, timeout=0) == [], "from the future"
        old = sign(status_request(), SECRET, now_ms=now_clock.wall_ms())
        now_clock.advance(MAX_SKEW + 1)
        assert backend.broadcast_control(old, timeout=0) == [], "signed over a minute ago"
        assert len(worker_statuses(backend, timeout=0, secret=SECRET)) == 0, (
            "the asker's clock is now a minute behind the worker's"
        )


def test_a_worker_without_a_secret_answers_signed_and_unsigned_requests(
    backend: Serving, queues: QueueSet, now_clock: ManualClock
) -> None:
    """So that askers can be given the secret before the workers."""
    with serving(backend, queues, now_clock, None):
        assert len(worker_statuses(backend, timeout=0)) == 1
        assert len(worker_statuses(backend, timeout=0, secret=SECRET)) == 1


def test_a_tampered_request_fails_its_signature() -> None:
    verifier = Verifier(SECRET)
    now = 1_800_000_000_000
    signed = json.loads(sign(status_request(), SECRET, now_ms=now))
    assert verifier.verify(json.dumps(signed).encode(), now_ms=now) == status_request()
    shutdown = ControlRequest(v=VERSION, command=Command.SHUTDOWN, select=Selection(all=True))
    tampered = {**signed, "body": shutdown.encode().decode(), "nonce": "another"}
    with pytest.raises(DecodeError, match="bad signature"):
        verifier.verify(json.dumps(tampered).encode(), now_ms=now)
    moved = {**signed, "ts": now + 1, "nonce": "another"}
    with pytest.raises(DecodeError, match="bad signature"):
        verifier.verify(json.dumps(moved).encode(), now_ms=now)
    for junk in (b"{}", b'{"signed": 1}', b'{"signed": 1, "ts": "x"}', b"\xff"):
        with pytest.raises(DecodeError):
            verifier.verify(junk, now_ms=now)
    with pytest.raises(DecodeError, match="not signed"):
        verifier.verify(status_request(), now_ms=now)


def test_a_short_secret_is_refused_and_a_verifier_never_shows_its_secret() -> None:
    with pytest.raises(ValueError, match="at least 16 bytes"):
        Verifier("short")
    with pytest.raises(ValueError, match="at least 16 bytes"):
        sign(status_request(), "short", now_ms=0)
    assert SECRET not in repr(Verifier(SECRET))
    signed = sign(status_request(), SECRET, now_ms=0)
    assert SECRET.encode() not in signed
    assert unwrap(signed) == status_request()
    assert unwrap(status_request()) == status_request()
