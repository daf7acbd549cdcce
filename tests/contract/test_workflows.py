"""Workflows on every backend, each with the store a user would give it: the embedded
file keeps them in its own file, RabbitMQ in a SQLite and in a PostgreSQL job store, and
memory (which has no store of its own) in a SQLite file (docs/workflows.md)."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator

import pytest

from queuey_core.backends.capabilities import DeadLetterTools
from queuey_core.backends.capabilities import require
from queuey_core.backends.dead_letter_tools import DeadLetter
from queuey_core.workflows import Graph
from queuey_core.workflows import Workflow
from queuey_core.workflows import chain
from queuey_core.workflows import group
from queuey_core.workflows import step
from tests.backend_kinds import BackendKind
from tests.backend_kinds import drop_schema
from tests.backend_kinds import store_url
from tests.conftest import backend_env
from tests.support import BETA
from tests.workflows.support import Add
from tests.workflows.support import Boom
from tests.workflows.support import Invoice
from tests.workflows.support import Mourn
from tests.workflows.support import Rig
from tests.workflows.support import Total


@pytest.fixture
def rig(stored_kind: BackendKind) -> Iterator[Rig]:
    """A worker recording workflows on ``stored_kind``, not started yet."""
    folder = tempfile.mkdtemp(prefix="queuey-workflows-")
    with backend_env(stored_kind, stored_kind.worker_env) as env:
        url = store_url(stored_kind, env, folder)
        if url.startswith("memory://"):
            url = f"sqlite:///{folder}/workflows.db"
        made = Rig(env, url)
        try:
            yield made
        finally:
            made.stop()
            if stored_kind.store == "postgres":
                drop_schema(url)
            shutil.rmtree(folder, ignore_errors=True)


def dead_ids(tools: DeadLetterTools) -> set[str]:
    """The job ids of the dead letters on BETA that can be read."""
    return {
        str(d.envelope.job_id) for d in tools.list_dead_letters(BETA) if isinstance(d, DeadLetter)
    }


def test_a_chain_hands_each_steps_result_to_the_next(rig: Rig) -> None:
    rig.start()
    shape = chain(Add(x=1), step(Add(x=2), receives="prev"), step(Add(x=3), receives="prev"))
    wid = rig.flows.start(Workflow(shape, name="sum"))
    done = rig.wait_state(wid, "succeeded")
    assert [m.result for m in done.nodes] == [1, 3, 6], "each step got the one before's result"
    assert [r.payload["prev"] for r in rig.runs("wf.add")] == [None, 1, 3], "in order"
    assert (done.members, done.succeeded, done.name) == (3, 3, "sum")


def test_a_group_callback_runs_once_after_every_member_with_results_in_order(rig: Rig) -> None:
    rig.start()
    members = [Add(x=i) for i in range(1, 9)]
    wid = rig.flows.start(Workflow(group(*members).then(step(Total(), receives="parts"))))
    done = rig.wait_state(wid, "succeeded")
    totals = rig.runs("wf.total")
    assert len(totals) == 1, "the callback ran once"
    assert totals[0].payload["parts"] == list(range(1, 9)), "the group's order, not finish order"
    assert done.nodes[-1].result == 36
    assert all(r.started_before is False for r in rig.ledger), "no run was a repeat"


def test_a_graph_node_waits_for_every_node_it_names(rig: Rig) -> None:
    rig.start()
    g = Graph()
    a = g.add(Add(x=1))
    b = g.add(Add(x=10))
    c = g.add(step(Add(x=100), receives="prev"), after=[a])
    g.add(step(Total(), receives="parts"), after=[b, c, a])
    wid = rig.flows.start(Workflow(g))
    done = rig.wait_state(wid, "succeeded")
    assert done.nodes[2].result == 101
    assert rig.runs("wf.total")[0].payload["parts"] == [10, 101, 1], "in the order named"
    assert done.nodes[3].after == (done.nodes[1].job_id, done.nodes[2].job_id, done.nodes[0].job_id)


def test_a_dead_lettered_member_fails_the_workflow_holds_the_rest_and_calls_back_once(
    rig: Rig,
) -> None:
    rig.start()
    shape = chain(Add(x=1), Boom(), Add(x=3))
    errback = step(Mourn(), receives="failure")
    wid = rig.flows.start(Workflow(shape, on_failure="cancel", on_error=errback))
    failed = rig.wait_state(wid, "failed")
    rig.h.wait_for(lambda: len(rig.runs("wf.mourn")) == 1)
    boom = failed.nodes[1]
    assert boom.state == "failed"
    assert failed.error == "fatal error: boom", "the workflow says why it failed"
    assert failed.nodes[2].state == "halted", "the rest is held, not run"
    told = rig.runs("wf.mourn")[0].payload["failure"]
    assert told == {
        "workflow_id": str(wid),
        "job_id": boom.job_id,
        "job_type": "wf.boom",
        "error": "fatal error: boom",
    }
    assert [r.payload["x"] for r in rig.runs("wf.add")] == [1], "the held step never ran"


def test_with_on_failure_continue_the_members_that_can_still_run_do(rig: Rig) -> None:
    rig.start()
    shape = group(Boom(), Add(x=2)).then(step(Total(), receives="parts"))
    wid = rig.flows.start(Workflow(shape, on_failure="continue"))
    rig.wait_state(wid, "failed")
    rig.h.wait_for(lambda: rig.view(wid).nodes[1].state == "succeeded")
    assert rig.view(wid).nodes[2].state == "waiting", "the callback waits on the failed one"
    assert rig.runs("wf.total") == []


def test_requeueing_the_dead_lettered_member_resumes_the_workflow(rig: Rig) -> None:
    rig.start()
    shape = chain(Add(x=1), step(Boom(x=5)), step(Add(x=3), receives="prev"))
    errback = step(Mourn(), receives="failure")
    wid = rig.flows.start(Workflow(shape, on_failure="cancel", on_error=errback))
    boom = rig.wait_state(wid, "failed").nodes[1].job_id
    rig.h.wait_for(lambda: len(rig.runs("wf.mourn")) == 1)
    rig.heal = True
    tools = require(rig.h.backend, DeadLetterTools, "the workflow tests")
    # The workflow fails as the member ends, before its dead letter is settled.
    rig.h.wait_for(lambda: boom in dead_ids(tools))
    assert tools.requeue_dead_letters(BETA, [boom]) == 1
    done = rig.wait_state(wid, "succeeded")
    assert [n.result for n in done.nodes[:3]] == [1, 5, 8], "the held step got the result"
    assert len(rig.runs("wf.mourn")) == 1, "the error callback ran once, not again"


def test_cancelling_a_workflow_cancels_every_member_not_yet_started(rig: Rig) -> None:
    wid = rig.flows.start(Workflow(chain(Add(x=1), Add(x=2), Add(x=3))))
    assert rig.flows.cancel(wid) == 1, "the first step was published, not started"
    view = rig.view(wid)
    assert view.state == "cancelled"
    assert [n.state for n in view.nodes] == ["cancelled"] * 3
    rig.start()
    rig.h.elapse(1)
    assert rig.flows.cancel("00000000-0000-0000-0000-000000000000") is None
    assert rig.view(wid).nodes[1].state == "cancelled", "nothing after it was enqueued"


def test_a_members_end_while_the_store_is_down_is_held_until_the_store_records_it(
    rig: Rig,
) -> None:
    down = rig.store_down("ended")
    rig.start()
    shape = group(Add(x=1), Add(x=2)).then(step(Total(), receives="parts"))
    wid = rig.flows.start(Workflow(shape))
    # Each member ran and its end was refused, more than once: held, deferred, run again.
    rig.h.wait_for(lambda: len(rig.runs("wf.add")) >= 4 and rig.hook.held >= 4)
    assert rig.view(wid).state == "running"
    assert rig.runs("wf.total") == [], "no callback while the ends are not recorded"
    down.back()
    done = rig.wait_state(wid, "succeeded")
    rig.h.wait_for(lambda: len(rig.runs("wf.total")) == 1)
    assert rig.runs("wf.total")[0].payload["parts"] == [1, 2], "both ends were recorded"
    told: dict[object, list[bool]] = {}
    for run in rig.runs("wf.add"):
        told.setdefault(run.job_id, []).append(run.started_before)
    assert all(t == [False] + [True] * (len(t) - 1) for t in told.values()), "reruns are told"
    assert [n.state for n in done.nodes] == ["succeeded"] * 3
    rig.h.elapse(1)
    assert len(rig.runs("wf.total")) == 1, "the callback ran once"


def test_a_member_refused_as_a_duplicate_fails_the_workflow_by_its_policy(rig: Rig) -> None:
    holder = rig.producer().enqueue(Invoice(n=7))  # holds the key while it is queued
    shape = group(Invoice(n=7), Add(x=2)).then(step(Total(), receives="parts"))
    errback = step(Mourn(), receives="failure")
    wid = rig.flows.start(Workflow(shape, on_failure="cancel", on_error=errback))
    failed = rig.view(wid)
    assert failed.state == "failed", "refused at its publish: the workflow fails at once"
    assert failed.nodes[0].state == "failed"
    assert failed.nodes[0].error == f"duplicate of {holder}", "says which job holds the key"
    assert failed.nodes[2].state == "halted", "the callback will not run"
    rig.start()
    rig.h.wait_for(lambda: len(rig.runs("wf.mourn")) == 1 and len(rig.runs("wf.invoice")) == 1)
    told = rig.runs("wf.mourn")[0].payload["failure"]
    assert told["error"] == f"duplicate of {holder}"
    assert [r.job_id for r in rig.runs("wf.invoice")] == [holder], "only the holder ran"
    rig.h.wait_for(lambda: rig.view(wid).nodes[1].state == "succeeded")
    rig.h.elapse(1)
    assert rig.runs("wf.total") == []
    assert len(rig.runs("wf.mourn")) == 1, "the error callback ran once"


def test_a_unique_member_whose_key_is_free_runs_and_lets_its_key_go(rig: Rig) -> None:
    rig.start()
    wid = rig.flows.start(Workflow(chain(Invoice(n=8), step(Add(x=1), receives="prev"))))
    done = rig.wait_state(wid, "succeeded")
    assert [n.result for n in done.nodes] == [8, 9]
    again = rig.producer().enqueue(Invoice(n=8))  # the member let its key go as it ran
    rig.h.wait_for(lambda: again in {r.job_id for r in rig.runs("wf.invoice")})


def test_finished_workflows_expire_after_the_retention_and_running_ones_stay(rig: Rig) -> None:
    rig.start()
    done = rig.flows.start(Workflow(group(Add(x=1), Add(x=2)).then(step(Total()))))
    failed = rig.flows.start(Workflow(chain(Boom(), Add(x=3))))
    rig.wait_state(done, "succeeded")
    rig.wait_state(failed, "failed")
    release = threading.Event()

    def held_until_released() -> None:
        release.wait(30)

    rig.before_total = held_until_released
    running = rig.flows.start(Workflow(group(Add(x=4)).then(step(Total()))))
    rig.h.wait_for(lambda: len(rig.runs("wf.total")) == 2)  # its callback has started
    assert rig.rows(done) == (1, 3, 2)
    rig.h.elapse(5)  # past the retention below, on the backend's clock
    assert rig.flows.expire(older_than=0.3) == 2, "the succeeded and the failed one"
    assert rig.rows(done) == (0, 0, 0), "with every member and edge"
    assert rig.rows(failed) == (0, 0, 0)
    assert rig.flows.get(done) is None
    assert rig.rows(running) == (1, 2, 1), "a running workflow stays, however old"
    release.set()
    rig.wait_state(running, "succeeded")
