"""A failed job's log record carries where the handler raised, as a ``traceback`` field:
in JSON at every level, in the Rich line format at debug only. No source line and no
local variable gets into it (either could hold a password).

In memory on the manual clock: the retries' backoff is the clock's, never slept through.
"""

from __future__ import annotations

import json
import logging
from typing import ClassVar

import pytest

from queuey_cli.output import JsonFormatter
from queuey_cli.output import LineFormatter
from queuey_core import Fatal
from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core import Retryable
from queuey_core import Worker
from queuey_core.worker.outcome import MAX_CHAIN
from queuey_core.worker.outcome import format_traceback
from tests.support import ALPHA
from tests.support import seed_queues
from tests.support import start
from tests.support import wait_for

PASSWORD = "Zx9Qw7"


class Explode(Job):
    NAME: ClassVar[str] = "test.explode"
    QUEUE: ClassVar[str] = ALPHA
    how: str  # "crash" (retried, then given up), "fatal"


def connect_to_the_database() -> None:
    url = "postgres://app:" + "Zx9" + "Qw7@db/prod"  # noqa: F841 - a local the traceback must not show
    raise ConnectionError("database unreachable")  # Zx9Qw7 in a source line


def explode(job: Explode, ctx: JobContext) -> None:
    if job.how == "fatal":
        raise Fatal("cannot work")
    try:
        connect_to_the_database()
    except ConnectionError as exc:
        raise Retryable("try later") from exc


@pytest.fixture
def failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Run one crashing job (three attempts) and one fatal job; the failure records."""
    clock = ManualClock()
    queues: QueueSet = seed_queues()
    backend = MemoryBackend(clock=clock)
    worker = Worker(backend, queues, [Handler(Explode, explode)], clock=clock)
    producer = Producer(backend, queues, clock=clock)
    with caplog.at_level(logging.INFO, logger="queuey_core.worker"):
        running = start(worker, clock)
        producer.enqueue(Explode(how="crash"))
        producer.enqueue(Explode(how="fatal"))
        wait_for(lambda: len(backend.dead_letters(ALPHA)) == 2, clock)
        running.stop()
    return [r for r in caplog.records if r.getMessage().startswith("job failed")]


def test_every_failure_record_carries_the_traceback_of_where_the_handler_raised(
    failures: list[logging.LogRecord],
) -> None:
    messages = sorted(r.getMessage().split(":")[0] for r in failures)
    assert messages == [
        "job failed fatally",
        "job failed; giving up after 3 attempts",
        "job failed; retrying in 1s",
        "job failed; retrying in 2s",
    ]
    for record in failures:
        text = record.traceback  # type: ignore[attr-defined]
        assert text.startswith("Traceback (most recent call last):"), text
        assert ", in explode" in text
    crash = next(r for r in failures if "giving up" in r.getMessage())
    text = crash.traceback  # type: ignore[attr-defined]
    assert ", in connect_to_the_database" in text, "the cause's frames too"
    assert "ConnectionError: database unreachable" in text
    assert "The above exception was the direct cause of the following exception:" in text
    assert text.endswith("queuey_core.errors.Retryable: try later")


def test_no_source_line_or_local_variable_reaches_the_traceback(
    failures: list[logging.LogRecord],
) -> None:
    for record in failures:
        text = record.traceback  # type: ignore[attr-defined]
        assert PASSWORD not in text
        assert "raise" not in text, "source lines are left out"


def test_a_succeeding_job_logs_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    backend = MemoryBackend(clock=clock)
    queues = seed_queues()
    worker = Worker(backend, queues, [Handler(Explode, lambda job, ctx: None)], clock=clock)
    with caplog.at_level(logging.INFO, logger="queuey_core.worker"):
        running = start(worker, clock)
        Producer(backend, queues, clock=clock).enqueue(Explode(how="fine"))
        wait_for(lambda: len(backend.acked(ALPHA)) == 1, clock)
        running.stop()
    assert not any(hasattr(r, "traceback") for r in caplog.records)


def test_json_logs_carry_a_failed_jobs_traceback_at_the_default_level(
    failures: list[logging.LogRecord],
) -> None:
    record = next(r for r in failures if "fatally" in r.getMessage())
    data = json.loads(JsonFormatter(tracebacks=False).format(record))
    assert data["traceback"].startswith("Traceback (most recent call last):")
    assert data["traceback"].endswith("queuey_core.errors.Fatal: cannot work")
    assert data["job_type"] == "test.explode"
    assert "\n" not in JsonFormatter().format(record), "still one line"


def test_rich_lines_show_a_failed_jobs_traceback_only_at_debug(
    failures: list[logging.LogRecord],
) -> None:
    record = next(r for r in failures if "fatally" in r.getMessage())
    assert LineFormatter(tracebacks=False).format(record) == "job failed fatally: cannot work"
    lines = LineFormatter(tracebacks=True).format(record).splitlines()
    assert lines[0] == "job failed fatally: cannot work"
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == "queuey_core.errors.Fatal: cannot work"


def test_a_traceback_survives_a_hostile_exception_and_a_cycle() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    with pytest.raises(Unprintable) as caught:
        raise Unprintable
    assert format_traceback(caught.value).endswith("Unprintable: (its message could not be read)")

    first, second = ValueError("a"), ValueError("b")
    first.__context__, second.__context__ = second, first  # a cycle Python can build
    assert format_traceback(first).count("Traceback") == 2

    chain: BaseException = ValueError("0")
    for n in range(1, 20):
        try:
            raise ValueError(str(n)) from chain
        except ValueError as exc:
            chain = exc
    assert format_traceback(chain).count("Traceback") == MAX_CHAIN


def spin_until_interrupted(clock: ManualClock) -> None:
    while True:  # pure Python: the asynchronous JobTimeout lands in this frame
        clock.sleep(1)


def test_a_timed_out_jobs_record_says_where_the_timeout_interrupted_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    backend = MemoryBackend(clock=clock)
    queues = seed_queues()

    def slow(job: Explode, ctx: JobContext) -> None:
        if ctx.attempt == 1:
            spin_until_interrupted(clock)

    worker = Worker(backend, queues, [Handler(Explode, slow)], job_timeout=5, clock=clock)
    with caplog.at_level(logging.INFO, logger="queuey_core.worker"):
        running = start(worker, clock)
        Producer(backend, queues, clock=clock).enqueue(Explode(how="slow"))
        wait_for(lambda: len(backend.acked(ALPHA)) == 1, clock)
        running.stop()
    [retried] = [r for r in caplog.records if r.getMessage().startswith("job failed; retrying")]
    assert "job timed out after 5s" in retried.getMessage()
    text = retried.traceback  # type: ignore[attr-defined]
    assert ", in spin_until_interrupted" in text, "the frame the handler was in"
    assert text.endswith("queuey_core.errors.JobTimeout")
