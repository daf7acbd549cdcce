"""The limits' stores every state test runs on: in process, a queuey file, PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from queuey_core.flow.limit_setup import limit_state_for
from queuey_core.flow.limit_spec import LimitBook
from queuey_core.flow.limit_state import LimitState
from tests.backend_kinds import PG_URL

#: A factory of the limits' state for a book, on one kind of store.
MakeState = Callable[[LimitBook], LimitState]


@pytest.fixture(
    params=[
        "memory",
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.integration),
    ]
)
def make_state(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeState]:
    """Opens limits' states on one store (two opened see the same state, except in
    process); closes them after."""
    kind: str = request.param
    schema = f"queuey_test_{uuid.uuid4().hex[:12]}"
    url = {
        "memory": "memory:",
        "sqlite": f"sqlite:///{tmp_path}/state.db",
        "postgres": f"{PG_URL}?schema={schema}",
    }[kind]
    opened: list[LimitState] = []

    def make(book: LimitBook) -> LimitState:
        state = limit_state_for(url, book)
        opened.append(state)
        return state

    yield make
    for state in opened:
        state.close()
    if kind == "postgres":
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
