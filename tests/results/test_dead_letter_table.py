"""The dead-letter table of a job store (issue 28), on SQLite and PostgreSQL: inserts
are idempotent by key, pages and streams come oldest first whatever the insert order,
filters count only what they keep, claims take each row once, and deletes take only
what they name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from queuey_core.results.dead_letter_sql import Row
from queuey_core.results.dead_letter_table import CHUNK
from queuey_core.results.dead_letter_table import DeadLetterTable
from queuey_core.results.dead_letter_table import open_dead_letter_table
from tests.results.conftest import drop_schema
from tests.results.conftest import pg_store_url


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.integration),
    ]
)
def table(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DeadLetterTable]:
    url = f"sqlite:///{tmp_path / 'store.db'}" if request.param == "sqlite" else pg_store_url()
    t = open_dead_letter_table(url)
    yield t
    t.close()
    if request.param == "postgres":
        drop_schema(url)


def row(i: int, *, queue: str = "q", dead_at: int | None = None, kind: str = "t") -> Row:
    return Row(
        queue,
        f"job-{i}",
        kind if i >= 0 else None,
        "fatal: disk FULL" if i % 3 == 0 else f"max attempts: {i}",
        1000 + i if dead_at is None else dead_at,
        3,
        f"digest-{i}",
        b'{"i": %d}' % i,
        "{}",
    )


def handles(stored: list) -> list[str | None]:  # type: ignore[type-arg]
    return [s.row.handle for s in stored]


def test_inserting_a_row_twice_keeps_one(table: DeadLetterTable) -> None:
    table.insert([row(1), row(2)])
    table.insert([row(2), row(3)])  # an import read row 2 again after a cut
    assert table.count("q") == 3
    assert table.count("other") == 0


def test_pages_and_streams_are_oldest_first_whatever_the_insert_order(
    table: DeadLetterTable,
) -> None:
    n = CHUNK * 2 + 7
    order = list(range(n))
    table.insert([row(i) for i in reversed(order)])  # imported late, older
    page, total = table.page("q", 10, 5)
    assert total == n
    assert handles(page) == [f"job-{i}" for i in range(10, 15)]
    assert handles(list(table.stream("q"))) == [f"job-{i}" for i in order]


def test_ties_in_time_keep_their_arrival_order_across_stream_chunks(
    table: DeadLetterTable,
) -> None:
    n = CHUNK + 3
    table.insert([row(i, dead_at=5) for i in range(n)])
    assert handles(list(table.stream("q"))) == [f"job-{i}" for i in range(n)]


def test_filters_count_and_page_only_what_they_keep(table: DeadLetterTable) -> None:
    table.insert([row(i, kind="a" if i % 2 else "b") for i in range(30)])
    page, total = table.page("q", 0, 100, reason="DISK full")
    assert total == 10
    assert handles(page) == [f"job-{i}" for i in range(0, 30, 3)]
    page, total = table.page("q", 2, 3, job_type="a", reason="max")
    kept = [i for i in range(30) if i % 2 and i % 3]
    assert total == len(kept)
    assert handles(page) == [f"job-{i}" for i in kept[2:5]]
    assert handles(list(table.stream("q", job_type="b"))) == [f"job-{i}" for i in range(0, 30, 2)]


def test_claims_take_each_row_once_and_only_envelopes(table: DeadLetterTable) -> None:
    table.insert([row(i) for i in range(10)])
    table.insert([row(-1)._replace(handle=None, digest="undecodable")])
    first = table.claim("q", "a", None, 4)
    second = table.claim("q", "b", None, 100)
    assert handles(first) == [f"job-{i}" for i in range(4)]
    assert handles(second) == [f"job-{i}" for i in range(4, 10)], "not the undecodable one"
    assert table.claim("q", "c", None, 100) == []
    table.release("b")
    assert table.release_stale("q") == 4, "a's rows are left claimed"
    assert handles(table.claim("q", "d", ["job-7", "job-8"], 100)) == ["job-7", "job-8"]
    assert table.delete_claimed("d") == 2
    assert table.count("q") == 9


def test_deletes_take_what_they_name_and_purges_one_queue(table: DeadLetterTable) -> None:
    table.insert([row(i) for i in range(5)])
    table.insert([row(i, queue="other") for i in range(5)])
    undecodable = row(-1)._replace(handle=None, digest="u")
    table.insert([undecodable])
    seq = next(s.seq for s in table.stream("q") if s.row.handle is None)
    found = table.find("q", f"#{seq}")
    assert found is not None
    assert found.row.digest == "u"
    assert table.delete("q", ["job-1", f"#{seq}", "job-404"]) == 2
    assert table.find("q", "job-1") is None
    assert table.find("other", "job-1") is not None
    assert table.purge("q") == 4
    assert table.counts() == {"other": 5}


def test_ids_come_back_as_they_went_in(table: DeadLetterTable) -> None:
    rows = [row(i) for i in range(3)]
    table.insert(rows)
    got = [s.row for s in table.stream("q")]
    assert got == rows
    stream = table.stream("q")
    assert next(stream).row == rows[0]
    stream.close()  # a stream left early holds nothing
