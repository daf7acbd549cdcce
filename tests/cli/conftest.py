from __future__ import annotations

import uuid
from collections.abc import Callable
from collections.abc import Generator
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_core import DeadLetter
from queuey_core import Envelope
from queuey_core.backends.capabilities import DeadLetterPage
from queuey_core.backends.capabilities import Inspection
from queuey_core.backends.capabilities import QueueCounts
from queuey_core.backends.dead_letter_query import DeadLetterFilter
from queuey_core.backends.dead_letter_query import page_of

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


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def offline(write_config: Callable[[str], Path]) -> Path:
    """A valid config whose broker cannot be reached: anything that connects fails."""
    return write_config(BASE.format(url=UNREACHABLE))


class FakeBroker:
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

    def list_dead_letters(self, queue: str, *, limit: int | None = None) -> list[DeadLetter]:
        return [d for d in self.dead if d.envelope.queue == queue][:limit]

    def dead_letter_page(
        self,
        queue: str,
        *,
        offset: int = 0,
        limit: int = 100,
        job_type: str | None = None,
        reason: str | None = None,
    ) -> DeadLetterPage:
        return page_of(
            self.iter_dead_letters(queue, job_type=job_type, reason=reason), offset, limit
        )

    def get_dead_letter(self, queue: str, handle: str) -> DeadLetter | None:
        return next((d for d in self.list_dead_letters(queue) if d.handle == handle), None)

    def iter_dead_letters(
        self, queue: str, *, job_type: str | None = None, reason: str | None = None
    ) -> Generator[DeadLetter, None, None]:
        wanted = DeadLetterFilter(job_type, reason)
        return (d for d in self.list_dead_letters(queue) if wanted.keeps(d))

    def delete_dead_letters(self, queue: str, handles: list[str]) -> int:
        doomed = [d for d in self.dead if d.envelope.queue == queue and d.handle in handles]
        self.dead = [d for d in self.dead if d not in doomed]
        return len(doomed)

    def requeue_dead_letters(
        self, queue: str, job_ids: list[str] | None = None, *, progress: object = None
    ) -> int:
        return 0

    def purge_dead_letters(self, queue: str, *, progress: object = None) -> int:
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
