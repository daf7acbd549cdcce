"""The workflow pages through Starlette's TestClient: the layout of the graph, and the
clean answers to a missing store, a malformed id and an unknown one."""

from __future__ import annotations

import uuid
from pathlib import Path

from starlette.testclient import TestClient

from queuey_core.settings import load_settings
from queuey_core.workflows import MemberView
from queuey_dashboard import create_app
from queuey_dashboard.workflow_pages import layout
from tests.dashboard.conftest import LOCAL
from tests.dashboard.conftest import Board


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
