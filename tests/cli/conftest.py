from __future__ import annotations

import uuid
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core import DeadLetter
from queuey_core import Envelope
from queuey_core.backends.capabilities import DeadLetterWindow
from queuey_core.backends.capabilities import Inspection
from queuey_core.backends.capabilities import QueueCounts
from queuey_core.backends.dead_letter_query import DeadLetterFilter
from queuey_core.backends.dead_letter_query import DeadLetterToolsBase
from queuey_core.backends.dead_letter_query import cut

UNREACHABLE = "amqp://guest:s3cret@127.0.0.1:1/%2F"

BASE = """
[broker]
url = "{url}"
connect_timeout = "1s"

[queues.alpha]
prefetch = 4
max_priority = 10
retry = {{ max_attempts = 2, backoff = "fixed", initial = "100ms", max = "100ms" }}

[queues.beta]
kind = "quorum"
prefetch = 1
"""


def run_with_config(config: Path, *args: str) -> tuple[int, str, str]:
    """``queuey --config CONFIG ARGS...`` in process: the exit code, stdout and stderr
    (never a traceback, nor an exception other than the exit)."""
    result = CliRunner().invoke(app, ["--config", str(config), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def offline(write_config: Callable[[str], Path]) -> Path:
    """A valid config whose broker cannot be reached: anything that connects fails."""
    return write_config(BASE.format(url=UNREACHABLE))


class FakeBroker(DeadLetterToolsBase):
    """What the dlq and queues commands ask of a backend, answering from memory."""

    def __init__(self, dead: list[DeadLetter] | None = None) -> None:
        self.dead = dead or []
        self.closed = False
        #: The queues that exist on this broker (with their dead-letter queues).
        self.declared = {"alpha", "beta"}

    def inspect(self, names: Sequence[str]) -> Inspection:
        return Inspection(
            {
                name: QueueCounts(0, 0, sum(d.envelope.queue == name for d in self.dead))
                if name in self.declared
                else None
                for name in names
            },
            0,
        )

    def _window(
        self, queue: str, wanted: DeadLetterFilter, offset: int, limit: int | None
    ) -> DeadLetterWindow:
        mine = [d for d in self.dead if d.envelope.queue == queue and wanted.keeps(d)]
        return DeadLetterWindow(cut(mine, offset, limit), offset=offset, limit=limit)

    def _delete(self, queue: str, handles: list[str]) -> int:
        doomed = [d for d in self.dead if d.envelope.queue == queue and d.handle in handles]
        self.dead = [d for d in self.dead if d not in doomed]
        return len(doomed)

    def _requeue(
        self, queue: str, job_ids: list[str] | None, progress: Callable[[int], None] | None
    ) -> int:
        return 0

    def _purge(self, queue: str) -> int:
        purged = [d for d in self.dead if d.envelope.queue == queue]
        self.dead = [d for d in self.dead if d not in purged]
        return len(purged)

    def queue_counts(self, queue: str) -> tuple[int, int]:
        return (0, 0)

    def held_count(self) -> int:
        return 0

    def unroutable_count(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True


def dead_letter(
    job_type: str = "greet", reason: object = "fatal error: x", dead_at: object = 1_700_000_000_000
) -> DeadLetter:
    """A dead letter on queue ``alpha``; reason and dead_at may be of any type, as a
    header of a message anyone published could be."""
    # Built without validation: the envelope model refuses control characters in a job
    # type now, but the command line must show any text literally all the same.
    env = Envelope.model_construct(
        v=1,
        job_id=uuid.uuid4(),
        job_type=job_type,
        queue="alpha",
        attempt=1,
        deferrals=0,
        priority=0,
        enqueued_at=0,
        payload={},
    )
    return DeadLetter(env, reason, dead_at, str(env.job_id))  # type: ignore[arg-type]


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> FakeBroker:
    """A FakeBroker every command gets instead of RabbitMQ."""
    fake = FakeBroker()
    for module in ("queuey_cli.dlq", "queuey_cli.queues"):
        monkeypatch.setattr(f"{module}.backend", lambda settings: fake)
    return fake
