"""Which processes keep RabbitMQ's dead letters in the job store (issue 28): a backend
that can, with ``[results] url`` naming a SQLite or PostgreSQL store; never a memory
store, nor a backend without the capability, nor without a URL."""

from __future__ import annotations

from typing import Any

import pytest

from queuey_core import MemoryBackend
from queuey_core.results.dead_letter_table import DeadLetterTable
from queuey_core.results.setup import with_dead_letter_store
from queuey_core.settings import Settings


class Keeper:
    """A backend with the capability, remembering the table it was given."""

    def __init__(self) -> None:
        self.table: Any = None

    def keep_dead_letters_in(self, table: Any) -> None:
        self.table = table

    def has_dead_letter_store(self) -> bool:
        return self.table is not None

    def import_dead_letters(self, queue: str, *, progress: Any = None) -> int | None:
        return None

    def unimported_dead_letters(self, queue: str) -> int:
        return 0

    def stored_dead_letters(self) -> dict[str, int]:
        return {}

    def with_stored_dead_letters(self, inspection: Any) -> Any:
        return inspection

    @property
    def dead_letter_fallbacks(self) -> int:
        return 0


def settings(url: str | None) -> Settings:
    results = {} if url is None else {"url": url}
    return Settings(broker={"url": "amqp://guest:guest@127.0.0.1:5672/%2F"}, results=results)


@pytest.mark.parametrize("url", ["sqlite:///{tmp}/jobs.db", "postgresql://db/queuey?schema=s"])
def test_a_sqlite_or_postgresql_store_keeps_the_dead_letters(url: str, tmp_path: Any) -> None:
    backend = Keeper()
    assert with_dead_letter_store(backend, settings(url.format(tmp=tmp_path))) is backend
    assert isinstance(backend.table, DeadLetterTable), "connected on first use, not here"
    backend.table.close()


@pytest.mark.parametrize("url", [None, "memory://demo"])
def test_without_a_store_that_can_hold_them_nothing_changes(url: str | None) -> None:
    backend = Keeper()
    with_dead_letter_store(backend, settings(url))
    assert backend.table is None


def test_a_backend_without_the_capability_is_left_as_it_is(tmp_path: Any) -> None:
    memory = MemoryBackend()
    assert with_dead_letter_store(memory, settings(f"sqlite:///{tmp_path}/jobs.db")) is memory
