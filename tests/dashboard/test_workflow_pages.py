"""The workflow pages through Starlette's TestClient: the layout of the graph, the
clean answers to a missing store, a malformed id and an unknown one, and the page that
follows a workflow while it can still move."""

from __future__ import annotations

import uuid
from pathlib import Path

from starlette.testclient import TestClient

from queuey_core.backends import open_backend
from queuey_core.settings import load_settings
from queuey_core.workflows import MemberView
from queuey_core.workflows import Workflow
from queuey_core.workflows import chain
from queuey_core.workflows import group
from queuey_core.workflows import read_workflow
from queuey_core.workflows import workflows_for
from queuey_dashboard import create_app
from queuey_dashboard.workflow_pages import layout
from tests.dashboard.conftest import LOCAL
from tests.dashboard.conftest import Board
from tests.support import ALPHA
from tests.workflows.support import Add


def member(
    job_id: str, position: int, after: tuple[str, ...] = (), role: str = "member"
) -> MemberView:
    return MemberView(job_id, position, role, "t", "waiting", 0, "", None, after)


def test_a_member_is_drawn_one_column_right_of_the_deepest_it_waits_for() -> None:
    nodes = (
        member("a", 0),
        member("b", 1, ("a",)),
        member("c", 2, ("a",)),
        member("d", 3, ("b", "a")),
        member("e", 4, role="on_error"),
    )
    boxes, edges, width, height = layout(nodes)
    columns = {b.node.job_id: b.x for b in boxes}
    assert columns["a"] < columns["b"] == columns["c"] < columns["d"] < columns["e"]
    assert len(edges) == 4
    assert width > columns["e"]
    assert height > max(b.y for b in boxes)


def test_without_a_store_the_page_says_where_workflows_are_kept(board: Board) -> None:
    answer = board.client.get("/workflows")
    assert answer.status_code == 200
    assert "No store holds workflows" in answer.text
    assert board.client.get("/workflows/not-an-id").status_code == 400


def test_an_unknown_workflow_is_a_404_and_a_malformed_id_a_400(tmp_path: Path) -> None:
    settings, _ = load_settings(
        "/dev/null", overrides={"broker": {"url": f"sqlite:///{tmp_path}/q.db"}}
    )
    with TestClient(create_app(settings), base_url=LOCAL) as client:
        assert client.get("/workflows").status_code == 200
        assert client.get(f"/workflows/{uuid.uuid4()}").status_code == 404
        assert client.get("/workflows?workflow_id=%3Cscript%3E").status_code == 400


def test_the_page_follows_a_workflow_until_nothing_can_move_on_its_own(tmp_path: Path) -> None:
    settings, _ = load_settings(
        "/dev/null",
        overrides={
            "broker": {"url": f"sqlite:///{tmp_path}/q.db"},
            "queues": {ALPHA: {"prefetch": 4}},
        },
    )
    backend = open_backend(settings.broker)
    flows = workflows_for(settings, backend)
    try:
        wid = flows.start(Workflow(chain(Add(x=1), group(Add(x=2), Add(x=3)), Add(x=4))))
        fragment = f"/fragments/workflows/{wid}"
        with TestClient(create_app(settings), base_url=LOCAL) as client:
            page = client.get(f"/workflows/{wid}").text
            assert f'hx-get="{fragment}"' in page, "a running workflow's page polls"
            assert 'data-live="yes"' in page

            def member_id(position: int) -> str:
                view = read_workflow(flows.store, wid)
                assert view is not None
                return view.nodes[position].job_id

            def end(position: int, outcome: str) -> None:
                """As a worker records a member's run."""
                flows.store.started(member_id(position), 1)
                flows.store.ended(
                    member_id(position), outcome=outcome, result="1", error="boom", now=2
                )

            end(0, "succeeded")
            flows.store.started(member_id(1), 1)
            end(2, "failed")
            answer = client.get(fragment)
            assert answer.status_code == 200
            assert '<dd class="state workflow-state">failed</dd>' in answer.text
            assert 'data-live="yes"' in answer.text, "a member of the group still runs"
            assert "hx-trigger" in answer.text
            assert "<html" not in answer.text, "a fragment, not a page"

            end(1, "succeeded")
            answer = client.get(fragment)
            assert 'data-live="no"' in answer.text
            assert "hx-get" not in answer.text, "nothing moves on its own: the polling stops"
            assert 'data-state="halted"' in answer.text
            assert client.get(f"/fragments/workflows/{uuid.uuid4()}").status_code == 404
            assert client.get("/fragments/workflows/not-an-id").status_code == 400
    finally:
        flows.store.close()
        backend.close()
