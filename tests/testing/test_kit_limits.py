"""Rate and concurrency limits in the testing kit, through the ``queuey`` fixture: a
backlog drained by moving the manual clock, a key parked and let go, limits from the
config the kit reads; on memory and on the kit's SQLite file."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from queuey_core import ConfigError
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Limit
from queuey_core import QueueConfig
from queuey_core import handler
from queuey_core.testing import KitError
from queuey_core.testing import QueueyKit
from queuey_core.testing import Status

QUEUES = [QueueConfig("kitl.work", max_priority=5)]

#: What the handlers saw, in order: (job, attempt, seconds of clock since the enqueue).
starts: list[tuple[str, int, float]] = []


class Call(Job):
    """Calls an API that allows two calls a second."""

    NAME: ClassVar[str] = "kitl.call"
    QUEUE: ClassVar[str] = "kitl.work"
    LIMITS: ClassVar[tuple[Limit, ...]] = (Limit("api", rate="2/s"),)
    n: int


class Export(Job):
    """One export per tenant at a time."""

    NAME: ClassVar[str] = "kitl.export"
    QUEUE: ClassVar[str] = "kitl.work"
    LIMITS: ClassVar[tuple[Limit, ...]] = (Limit("exports", concurrency=1, key="tenant"),)
    tenant: str
    n: int = 0


class Report(Job):
    """Limited only by the configuration (see the config tests)."""

    NAME: ClassVar[str] = "kitl.report"
    QUEUE: ClassVar[str] = "kitl.work"
    n: int


@handler
def call(job: Call, ctx: JobContext) -> int:
    starts.append((f"call {job.n}", ctx.attempt, ctx.age))
    return job.n


@handler
def export(job: Export, ctx: JobContext) -> None:
    starts.append((f"export {job.tenant} {job.n}", ctx.attempt, ctx.age))


@handler
def report(job: Report, ctx: JobContext) -> None:
    starts.append((f"report {job.n}", ctx.attempt, ctx.age))


both_backends = pytest.mark.parametrize("queuey", ["memory", "sqlite"], indirect=True)
pytestmark = pytest.mark.queuey(handlers=[call, export, report], queues=QUEUES)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    starts.clear()


@both_backends
def test_a_rate_limited_backlog_waits_unrun_then_drains_on_the_clock(queuey: QueueyKit) -> None:
    for n in range(4):
        queuey.enqueue(Call(n=n))

    first_pass = queuey.drain()

    assert [o.status for o in first_pass] == [Status.SUCCEEDED] + [Status.WAITED] * 3
    waited = first_pass[1:]
    assert [o.delay for o in waited] == [0.5, 1.0, 1.5], "booked one interval apart"
    assert all(o.limit == "api" and not o.ran and o.attempt == 1 for o in waited), waited
    assert waited[0].reason == "waited on limit api for 0.5s"
    assert [(e.attempt, e.delay) for e in queuey.enqueued(Call)] == [(1, 0.5), (1, 1.0), (1, 1.5)]

    rest = queuey.drain(advance_time=True)

    assert [o.status for o in rest] == [Status.SUCCEEDED] * 3, "each came back at its time"
    assert [(name, attempt) for name, attempt, _ in starts] == [
        ("call 0", 1),
        ("call 1", 1),
        ("call 2", 1),
        ("call 3", 1),
    ], "no attempt spent waiting"
    # Two a second on the clock (the file reckons in whole milliseconds).
    assert [age for _, _, age in starts] == pytest.approx([0.0, 0.5, 1.0, 1.5], abs=0.005)
    assert queuey.enqueued(Call) == []


@both_backends
def test_a_concurrency_limited_key_parks_and_is_let_go(queuey: QueueyKit) -> None:
    with queuey.running(Export(tenant="acme", n=1)) as first:
        parked = queuey.run(Export(tenant="acme", n=2))
        other = queuey.run(Export(tenant="zeta", n=3))

        assert parked.parked, parked
        assert parked.limit == "exports"
        assert parked.reason == "parked behind concurrency limit exports"
        assert not parked.ran
        assert parked.delay is None
        assert other.succeeded, "another key is not held up"
        assert queuey.enqueued(Export) == [], "a parked job waits with the limit, not queued"
        assert queuey.limits is not None
        [acme] = [c for c in queuey.limits.key_counts() if c.key == "acme"]
        assert (acme.running, acme.parked) == (1, 1)

    assert first.outcome is not None
    assert first.outcome.succeeded
    [let_go] = queuey.enqueued(Export)
    assert let_go.job == Export(tenant="acme", n=2), "the first job's end let it go"
    assert queuey.run(let_go).succeeded
    # The first handler was held at its start until the block ended.
    assert [s[0] for s in starts] == ["export zeta 3", "export acme 1", "export acme 2"]


def test_drain_runs_a_job_let_go_by_a_job_it_ran() -> None:
    with QueueyKit([export], queues=QUEUES) as kit:
        with kit.running(Export(tenant="acme", n=1)):
            assert kit.run(Export(tenant="acme", n=2)).parked
            kit.enqueue(Export(tenant="acme", n=3))
        # 2 was let go when 1 ended, its slot reserved: 3 parks behind it; 2's end lets
        # 3 go, published after 2's settle, and the same drain runs it.
        outcomes = kit.drain()

        assert [(o.status, o.job_id) for o in outcomes] == [
            (Status.PARKED, outcomes[0].job_id),
            (Status.SUCCEEDED, outcomes[1].job_id),
            (Status.SUCCEEDED, outcomes[0].job_id),
        ]
        assert [s[0] for s in starts] == ["export acme 1", "export acme 2", "export acme 3"]
        assert kit.limits is not None
        assert kit.limits.parked() == 0


def test_the_limits_heartbeat_runs_as_the_clock_moves() -> None:
    with QueueyKit([export], queues=QUEUES) as kit:
        with kit.running(Export(tenant="acme", n=1)):
            kit.advance(60)  # far past a slot's 15 s lease: the running job's is renewed
            assert kit.run(Export(tenant="acme", n=2)).parked
            assert kit.run(Export(tenant="acme", n=3)).parked
        assert [e.job.n for e in kit.enqueued(Export)] == [2], "1's end let 2 go"

        # 2 does not come back for longer than a let-go job's slot is kept for it (300 s):
        # the heartbeat, at this move of the clock, takes the slot back and lets 3 go.
        kit.advance(301)

        assert [e.job.n for e in kit.enqueued(Export)] == [2, 3]


def test_a_job_a_limit_holds_back_cannot_be_held_running(queuey: QueueyKit) -> None:
    with queuey.running(Export(tenant="acme", n=1)):
        refused = pytest.raises(KitError, match="did not start: parked behind concurrency limit")
        with refused, queuey.running(Export(tenant="acme", n=2)):
            pass  # never reached
        assert queuey.outcomes[-1].parked


def test_a_limits_store_out_of_reach_makes_the_job_wait_unrun(queuey: QueueyKit) -> None:
    assert queuey.limits is not None
    queuey.limits.state.close()  # as a store that stopped answering

    waited = queuey.run(Call(n=1))

    assert waited.waited, "fails closed: never run outside its limit"
    assert waited.delay == 5.0
    assert waited.reason.startswith("waited: the limits' store is out of reach")
    [back] = queuey.enqueued(Call)
    assert (back.attempt, back.delay) == (1, 5.0)


CONFIG = """
[queues."kitl.work"]
max_priority = 5

[limits.reports]
rate = "1/min"
burst = 1
jobs = ["kitl.report"]
"""


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_limits_come_from_the_config_the_kit_reads(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "queuey.toml"
    path.write_text(CONFIG, encoding="utf-8")

    with QueueyKit([report], config=path, backend=backend) as kit:  # type: ignore[arg-type]
        for n in range(3):
            kit.enqueue(Report(n=n))
        outcomes = kit.drain()
        assert [o.status for o in outcomes] == [Status.SUCCEEDED] * 2 + [Status.WAITED]
        assert (outcomes[2].limit, outcomes[2].delay) == ("reports", 60.0), outcomes[2]
        kit.advance(60)
        assert [o.succeeded for o in kit.drain()] == [True]


def test_a_limit_naming_an_unknown_job_type_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "queuey.toml"
    path.write_text(CONFIG.replace('"kitl.report"', '"kitl.reprot"'), encoding="utf-8")

    with pytest.raises(ConfigError, match=r"^\[limits.reports\] jobs: no job type named"):
        QueueyKit([report], config=path)
