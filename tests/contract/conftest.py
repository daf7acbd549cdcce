"""The contract suite's backends: skipped by declared feature, never by name."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from queuey_core.backends.features import declared_flags
from queuey_core.results import JobStore
from queuey_core.results import open_job_store
from tests.backend_kinds import BackendKind
from tests.backend_kinds import backend_params
from tests.backend_kinds import drop_schema
from tests.backend_kinds import store_url
from tests.backend_kinds import stored_params
from tests.conftest import backend_env
from tests.harness import WorkerEnv


def skip_unless_declared(request: pytest.FixtureRequest, kind: BackendKind) -> None:
    """Skip the test when ``kind`` lacks a feature its ``requires`` marks name."""
    for mark in request.node.iter_markers("requires"):
        for feature in mark.args:
            if not kind.supports(feature):
                what = declared_flags().get(feature, f"have the capability {feature}")
                pytest.skip(f"the {kind.name} backend does not declare that it {what}")


@pytest.fixture(params=backend_params())
def kind(request: pytest.FixtureRequest) -> BackendKind:
    """Each backend of tests/backend_kinds.py that declares what the test requires."""
    found: BackendKind = request.param
    skip_unless_declared(request, found)
    return found


@pytest.fixture
def h(kind: BackendKind) -> Iterator[WorkerEnv]:
    """The worker environment of ``kind`` (tests/harness.py)."""
    with backend_env(kind, kind.worker_env) as env:
        yield env


@dataclass
class Stored:
    """A backend's worker environment and the job store its jobs are recorded in."""

    kind: BackendKind
    h: WorkerEnv
    url: str
    store: JobStore


@pytest.fixture(params=stored_params())
def stored_kind(request: pytest.FixtureRequest) -> BackendKind:
    """Each backend with the store a user would give it (RabbitMQ: SQLite, PostgreSQL),
    that declares what the test requires."""
    found: BackendKind = request.param
    skip_unless_declared(request, found)
    return found


@pytest.fixture
def stored(stored_kind: BackendKind) -> Iterator[Stored]:
    """:func:`stored_kind`'s worker environment, with its job store open."""
    found = stored_kind
    folder = tempfile.mkdtemp(prefix="queuey-contract-")
    with backend_env(found, found.worker_env) as env:
        url = store_url(found, env, folder)
        store = open_job_store(url)
        try:
            yield Stored(found, env, url, store)
        finally:
            store.close()
            if found.store == "postgres":
                drop_schema(url)
            shutil.rmtree(folder, ignore_errors=True)
