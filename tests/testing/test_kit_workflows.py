"""Workflows in the testing kit: started in the kit, their store in it, drained in the
order their dependencies allow, their state read back; on memory and on the file."""

from __future__ import annotations

from typing import ClassVar

import pytest
from pydantic import Field

from queuey_core import Fatal
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Limit
from queuey_core import QueueConfig
from queuey_core import handler
from queuey_core.testing import KitError
from queuey_core.testing import QueueyKit
from queuey_core.workflows import Graph
from queuey_core.workflows import Workflow
from queuey_core.workflows import chain
from queuey_core.workflows import group
from queuey_core.workflows import step

QUEUES = [QueueConfig("kitw.work")]


class Fetch(Job):
    NAME: ClassVar[str] = "kitw.fetch"
    QUEUE: ClassVar[str] = "kitw.work"
    n: int


class Double(Job):
    NAME: ClassVar[str] = "kitw.double"
    QUEUE: ClassVar[str] = "kitw.work"
    value: int = 0


class Total(Job):
    NAME: ClassVar[str] = "kitw.total"
    QUEUE: ClassVar[str] = "kitw.work"
    parts: list[int] = Field(default_factory=list)


class Throttled(Job):
    NAME: ClassVar[str] = "kitw.throttled"
    QUEUE: ClassVar[str] = "kitw.work"
    LIMITS: ClassVar[tuple[Limit, ...]] = (Limit("kitw.api", rate="1/s"),)
    n: int


class Broken(Job):
    NAME: ClassVar[str] = "kitw.broken"
    QUEUE: ClassVar[str] = "kitw.work"


class Alert(Job):
    NAME: ClassVar[str] = "kitw.alert"
    QUEUE: ClassVar[str] = "kitw.work"
    failure: dict[str, str] = Field(default_factory=dict)


@handler
def fetch(job: Fetch, ctx: JobContext) -> int:
    return job.n


@handler
def double(job: Double, ctx: JobContext) -> int:
    return job.value * 2


@handler
def total(job: Total, ctx: JobContext) -> int:
    return sum(job.parts)


@handler
def throttled(job: Throttled, ctx: JobContext) -> int:
    return job.n


@handler
def broken(job: Broken, ctx: JobContext) -> None:
    raise Fatal("the disk is full")


@handler
def alert(job: Alert, ctx: JobContext) -> str:
    return f"alerted: {job.failure['job_type']} failed with {job.failure['error']}"


both_backends = pytest.mark.parametrize("queuey", ["memory", "sqlite"], indirect=True)
pytestmark = pytest.mark.queuey(
    handlers=[fetch, double, total, throttled, broken, alert], queues=QUEUES
)


@both_backends
def test_a_chain_runs_step_by_step_each_receiving_the_result_before(queuey: QueueyKit) -> None:
    workflow_id = queuey.start_workflow(
        chain(Fetch(n=5), step(Double(), receives="value"), step(Double(), receives="value"))
    )
    assert [e.job for e in queuey.enqueued(Fetch)] == [Fetch(n=5)], "only the first step waits"
    assert queuey.enqueued(Double) == []
    assert queuey.workflow(workflow_id).state == "running"

    outcomes = queuey.drain()

    assert [(o.job_type, o.result) for o in outcomes] == [
        ("kitw.fetch", 5),
        ("kitw.double", 10),
        ("kitw.double", 20),
    ]
    view = queuey.workflow(workflow_id)
    assert view.state == "succeeded"
    assert [(n.job_type, n.state, n.result) for n in view.nodes] == [
        ("kitw.fetch", "succeeded", 5),
        ("kitw.double", "succeeded", 10),
        ("kitw.double", "succeeded", 20),
    ]


@both_backends
def test_a_group_with_a_callback_runs_it_once_after_every_member(queuey: QueueyKit) -> None:
    workflow_id = queuey.start_workflow(
        Workflow(group(Fetch(n=1), Fetch(n=2), Fetch(n=3)).then(step(Total(), receives="parts")))
    )

    outcomes = queuey.drain()

    assert [o.job_type for o in outcomes] == ["kitw.fetch"] * 3 + ["kitw.total"]
    assert outcomes[-1].result == 6, "the callback got every result, in the group's order"
    assert queuey.workflow(workflow_id).succeeded == 4


@both_backends
def test_a_failed_member_fails_the_workflow_halts_the_rest_and_calls_on_error(
    queuey: QueueyKit,
) -> None:
    graph = Graph()
    first = graph.add(Fetch(n=1))
    graph.add(Broken(), after=[first])
    graph.add(Fetch(n=2))
    workflow_id = queuey.start_workflow(
        Workflow(
            chain(Fetch(n=0), Broken(), Double()),
            on_error=step(Alert(), receives="failure"),
        )
    )
    graph_id = queuey.start_workflow(graph)

    outcomes = queuey.drain()

    assert [o.status.value for o in outcomes if o.job_type == "kitw.broken"] == [
        "dead-lettered",
        "dead-lettered",
    ]
    view = queuey.workflow(workflow_id)
    assert view.state == "failed"
    assert "the disk is full" in view.error
    assert [(n.job_type, n.state) for n in view.nodes] == [
        ("kitw.fetch", "succeeded"),
        ("kitw.broken", "failed"),
        ("kitw.double", "halted"),
        ("kitw.alert", "succeeded"),
    ]
    [alerted] = [o for o in outcomes if o.job_type == "kitw.alert"]
    assert alerted.result == "alerted: kitw.broken failed with fatal error: the disk is full"
    assert queuey.workflow(graph_id).state == "failed", "a graph's nodes run after theirs too"


def test_members_start_under_their_limits_on_the_clock(queuey: QueueyKit) -> None:
    workflow_id = queuey.start_workflow(
        group(Throttled(n=1), Throttled(n=2), Throttled(n=3)).then(step(Total(), receives="parts"))
    )

    outcomes = queuey.drain(advance_time=True)

    assert [o.status.value for o in outcomes] == [
        "succeeded",
        "waited",
        "waited",
        "succeeded",
        "succeeded",
        "succeeded",
    ], "one a second: two members wait their turn, then the callback"
    assert outcomes[-1].result == 6
    assert queuey.clock.monotonic() == pytest.approx(2.0, abs=0.005)
    assert queuey.workflow(workflow_id).state == "succeeded"


def test_an_unknown_workflow_is_one_clear_error(queuey: QueueyKit) -> None:
    with pytest.raises(KitError, match="no workflow 0190"):
        queuey.workflow("01900000-0000-7000-8000-000000000000")
