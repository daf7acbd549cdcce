"""Workflows on the memory backend and a manual clock, their state in a SQLite file:
what a member's end changes, once, whatever is delivered twice or lost on the way."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import pytest
from prometheus_client import CollectorRegistry

from queuey_core import Backend
from queuey_core import Envelope
from queuey_core.errors import BackendError
from queuey_core.errors import Deferred
from queuey_core.errors import NotEnqueuedError
from queuey_core.errors import UnroutableError
from queuey_core.workflows import Workflow
from queuey_core.workflows import WorkflowHook
from queuey_core.workflows import Workflows
from queuey_core.workflows import WorkflowStore
from queuey_core.workflows import chain
from queuey_core.workflows import group
from queuey_core.workflows import open_workflow_store
from queuey_core.workflows import step
from queuey_core.workflows.sql import Ending
from queuey_core.workflows.sql import NewMember
from tests.harness import MemoryEnv
from tests.workflows.support import Add
from tests.workflows.support import Boom
from tests.workflows.support import Mourn
from tests.workflows.support import Rig
from tests.workflows.support import Total


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(MemoryEnv(), f"sqlite:///{tmp_path}/flows.db")
    try:
        yield made
    finally:
        made.stop()


def envelope_of(rig: Rig, job_id: str) -> tuple[str, str]:
    """The member's envelope as the outbox last held it."""
    with rig.store.transaction() as cur:
        cur.execute("SELECT envelope FROM queuey_workflow_members WHERE job_id = ?", [job_id])
        return job_id, str(cur.fetchone()[0])


def succeed(store: WorkflowStore, job_id: str, result: str) -> Ending:
    """Record member ``job_id``'s success with ``result`` (JSON)."""
    return store.ended(job_id, outcome="succeeded", result=result, error="", now=2)


def test_a_second_end_of_the_same_member_changes_nothing(tmp_path: Path) -> None:
    store = open_workflow_store(f"sqlite:///{tmp_path}/flows.db")
    body = Envelope(job_id=uuid.uuid4(), job_type="t", queue="q", enqueued_at=1, payload={})
    members = [
        NewMember("a", 0, "member", "t", (), None, "one", body.model_dump_json()),
        NewMember("b", 1, "member", "t", (), None, "one", body.model_dump_json()),
        NewMember("cb", 2, "member", "t", ("a", "b"), "parts", "all", body.model_dump_json()),
    ]
    try:
        store.create("w", "", "cancel", members, 1)
        assert succeed(store, "a", "1").ready == ()
        assert succeed(store, "a", "1").ready == (), "a redelivered end"
        made = succeed(store, "b", "2")
        assert [j for j, _ in made.ready] == ["cb"], "the last member's end makes the callback"
        assert '"parts":[1,2]' in made.ready[0][1], "with the results in the group's order"
        again = succeed(store, "b", "2")
        assert again.ready == made.ready, "not marked sent: a redelivered end re-sends it"
        assert again.workflow is None, "and changes nothing else"
        store.mark_sent(["cb"])
        assert succeed(store, "b", "2").ready == ()
        found = store.read("w")
        assert found is not None
        assert found[0][5] == 2, "two members counted, not four ends"
    finally:
        store.close()


def test_a_callback_delivered_twice_is_told_it_was_started_before(rig: Rig) -> None:
    wid = rig.flows.start(Workflow(group(Add(x=1), Add(x=2)).then(step(Total(), receives="parts"))))
    callback = rig.view(wid).nodes[2].job_id
    # As if a worker died between publishing the callback and marking it sent: the
    # outbox sends it again, under the same job id.
    again = [envelope_of(rig, callback)]

    def republish_once() -> None:
        if again:
            rig.flows.publish([again.pop()])

    rig.before_total = republish_once
    rig.start()
    rig.h.wait_for(lambda: len(rig.runs("wf.total")) == 2)
    runs = rig.runs("wf.total")
    assert [r.started_before for r in runs] == [False, True], "the second run is told"
    assert {r.job_id for r in runs} == {uuid.UUID(callback)}
    done = rig.wait_state(wid, "succeeded")
    assert done.nodes[2].starts == 2
    assert done.succeeded == done.members == 3, "the second end counted nothing"


class LosesFirstPublish:
    """A backend whose first publish_many is refused (a crash before the publish)."""

    def __init__(self, inner: object) -> None:
        self._inner = inner
        self.refused = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def publish_many(self, items: Sequence[tuple[Envelope, float | None]]) -> None:
        if not self.refused:
            self.refused = True
            raise NotEnqueuedError("lost", not_enqueued=[e.job_id for e, _ in items])
        self._inner.publish_many(items)  # type: ignore[attr-defined]


def test_members_left_in_the_outbox_are_published_by_a_workers_sweep(rig: Rig) -> None:
    lossy = LosesFirstPublish(rig.h.backend)
    starter = Workflows(cast(Backend, lossy), rig.h.queues, rig.store, clock=rig.h.clock)
    wid = starter.start(Workflow(chain(Add(x=1), step(Add(x=2), receives="prev"))))
    assert lossy.refused, "the first members were not published"
    assert rig.view(wid).nodes[0].state == "ready", "they wait in the outbox"
    rig.start()
    done = rig.wait_state(wid, "succeeded")
    assert [n.result for n in done.nodes] == [1, 3]


def test_a_thousand_member_group_calls_back_once_with_every_result(rig: Rig) -> None:
    rig.start()
    shape = group(*[Add(x=i) for i in range(1000)]).then(step(Total(), receives="parts"))
    wid = rig.flows.start(Workflow(shape))
    rig.wait_state(wid, "succeeded")
    totals = rig.runs("wf.total")
    assert len(totals) == 1
    assert totals[0].payload["parts"] == list(range(1000))


def test_a_job_outside_a_workflow_is_never_recorded(rig: Rig) -> None:
    rig.start()
    job_id = rig.h.producer().enqueue(Add(x=1))
    rig.h.wait_for(lambda: len(rig.runs("wf.add")) == 1)
    with rig.store.transaction() as cur:
        cur.execute("SELECT count(*) FROM queuey_workflow_members WHERE job_id = ?", [str(job_id)])
        assert cur.fetchone()[0] == 0
    assert rig.runs("wf.add")[0].started_before is False


def test_a_member_whose_start_cannot_be_counted_waits_unrun_until_it_can(rig: Rig) -> None:
    down = rig.store_down("started")
    rig.start()
    wid = rig.flows.start(Workflow(chain(Add(x=1), step(Add(x=2), receives="prev"))))
    rig.h.wait_for(lambda: rig.hook.held >= 3)
    assert rig.runs("wf.add") == [], "never run while its start is not counted"
    down.back()
    done = rig.wait_state(wid, "succeeded")
    assert [n.starts for n in done.nodes] == [1, 1], "each start counted once"
    assert [r.started_before for r in rig.runs("wf.add")] == [False, False]


class Unroutable(LosesFirstPublish):
    """A backend with no queue for ``wf.boom``: its publish can never succeed."""

    def publish_many(self, items: Sequence[tuple[Envelope, float | None]]) -> None:
        refused = [e.job_id for e, _ in items if e.job_type == "wf.boom"]
        routed = [(e, d) for e, d in items if e.job_id not in refused]
        self._inner.publish_many(routed)  # type: ignore[attr-defined]
        if refused:
            confirmed = [e.job_id for e, _ in routed]
            raise UnroutableError("no queue for it", not_enqueued=refused, confirmed=confirmed)


def test_a_member_no_publish_can_send_fails_the_workflow_instead_of_waiting(rig: Rig) -> None:
    starter = Workflows(cast(Backend, Unroutable(rig.h.backend)), rig.h.queues, rig.store)
    shape = group(Boom(), Add(x=2))
    wid = starter.start(Workflow(shape, on_error=step(Mourn(), receives="failure")))
    failed = rig.view(wid)
    assert failed.state == "failed"
    assert failed.nodes[0].state == "failed"
    assert failed.nodes[0].error.startswith("not enqueued: no queue for it")
    assert failed.nodes[1].state == "sent", "the other member went out"
    rig.start()
    rig.h.wait_for(lambda: len(rig.runs("wf.mourn")) == 1 and len(rig.runs("wf.add")) == 1)
    assert rig.runs("wf.boom") == []


class BrokerDown(LosesFirstPublish):
    """A backend whose first publish fails outright (a plain BackendError)."""

    def publish_many(self, items: Sequence[tuple[Envelope, float | None]]) -> None:
        if not self.refused:
            self.refused = True
            raise BackendError("connection refused")
        self._inner.publish_many(items)  # type: ignore[attr-defined]


def test_a_member_whose_publish_fails_outright_waits_in_the_outbox_for_the_sweep(
    rig: Rig,
) -> None:
    down = BrokerDown(rig.h.backend)
    starter = Workflows(cast(Backend, down), rig.h.queues, rig.store, clock=rig.h.clock)
    wid = starter.start(Workflow(group(Add(x=1), Add(x=2)).then(step(Total(), receives="parts"))))
    view = rig.view(wid)
    assert view.state == "running", "a publish that may pass later fails nothing"
    assert [n.state for n in view.nodes] == ["ready", "ready", "waiting"]
    rig.start()
    done = rig.wait_state(wid, "succeeded")
    assert done.nodes[2].result == 3, "the sweep sent them once the broker answered"


def test_a_workers_sweep_expires_finished_workflows_after_the_retention(
    tmp_path: Path,
) -> None:
    rig = Rig(MemoryEnv(), f"sqlite:///{tmp_path}/flows.db", retention=3600.0)
    try:
        rig.start()
        wid = rig.flows.start(Workflow(chain(Add(x=1), step(Add(x=2), receives="prev"))))
        rig.wait_state(wid, "succeeded")
        ended_at = rig.view(wid).updated_at
        rig.h.elapse(1800)  # sweeps run, the retention is not over
        rig.h.elapse(20)
        assert rig.rows(wid) == (1, 2, 1), "kept while the retention runs"
        rig.h.elapse(1900)
        rig.h.wait_for(lambda: rig.rows(wid) == (0, 0, 0))
        assert rig.h.clock.wall_ms() - ended_at >= 3600_000, "gone after the retention"
    finally:
        rig.stop()


def test_a_member_dead_lettered_because_its_deferral_cannot_be_built_fails_the_workflow(
    rig: Rig,
) -> None:
    bad = Deferred(1.0, "later")
    bad.delay = float("nan")  # built around the check: the dispatcher dead-letters it
    rig.boom_error = bad
    rig.start()
    wid = rig.flows.start(Workflow(chain(Boom(), Add(x=1))))
    failed = rig.wait_state(wid, "failed")
    assert failed.nodes[0].state == "failed"
    assert "could not be scheduled" in failed.error, "the end no guard saw is recorded"


def test_a_workers_metrics_count_workflows_started_finished_and_failed_either_way(
    rig: Rig,
) -> None:
    """Failed by a dead-lettered member, and by a member the worker's publish refused for
    good (here unroutable): both are the worker's failed workflows."""
    starter = rig.flows
    rig.flows = Workflows(
        cast(Backend, Unroutable(rig.h.backend)), rig.h.queues, rig.store, clock=rig.h.clock
    )
    rig.hook = WorkflowHook(rig.flows, clock=rig.h.clock, hold_for=0.3)
    registry = CollectorRegistry()
    registry.register(rig.hook.collector())
    rig.start()
    ok = starter.start(Workflow(chain(Add(x=1), step(Add(x=2), receives="prev"))))
    dead = starter.start(Workflow(Boom()))
    refused = starter.start(Workflow(chain(Add(x=5), Boom())))
    rig.wait_state(ok, "succeeded")
    rig.wait_state(dead, "failed")
    view = rig.wait_state(refused, "failed")
    assert view.nodes[1].error.startswith("not enqueued: no queue for it")

    def sample(name: str) -> float | None:
        return registry.get_sample_value(f"queuey_workflows_{name}_total")

    assert (sample("started"), sample("finished"), sample("failed")) == (3, 1, 2)
    assert sample("held") == 0
