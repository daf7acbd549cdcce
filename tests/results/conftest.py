"""Fixtures of the job-store tests: one store of each kind.

PostgreSQL is shared (CI and other sessions use the ``test`` database): every test
gets a schema of its own, random, dropped after it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from queuey_core.results import JobStore
from queuey_core.results import open_job_store
from queuey_core.results.postgres_store import PostgresJobStore

#: The PostgreSQL the integration tests use (trust auth, database ``test``).
PG_URL = os.environ.get("QUEUEY_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def pg_store_url() -> str:
    """A URL on a schema no one else uses."""
    return f"{PG_URL}?schema=queuey_test_{uuid.uuid4().hex[:12]}"


STORE_KINDS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.integration),
]


@pytest.fixture(params=STORE_KINDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A job-store URL of each kind, fresh for the test."""
    kind = request.param
    if kind == "memory":
        yield f"memory://{uuid.uuid4().hex}"
    elif kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        url = pg_store_url()
        yield url
        drop_schema(url)


def drop_schema(url: str) -> None:
    """Drop the schema of a PostgreSQL store URL, and all in it."""
    store = open_job_store(url)
    assert isinstance(store, PostgresJobStore)
    store.drop()
    store.close()


@pytest.fixture
def store(store_url: str) -> Iterator[JobStore]:
    """An open store of each kind."""
    s = open_job_store(store_url)
    yield s
    s.close()
