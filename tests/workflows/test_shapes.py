"""The shapes compile to one graph: members in order, each after those it waits for."""

from __future__ import annotations

import pytest

from queuey_core.workflows import Graph
from queuey_core.workflows import Workflow
from queuey_core.workflows import chain
from queuey_core.workflows import group
from queuey_core.workflows import step
from queuey_core.workflows.shapes import MAX_MEMBERS
from tests.workflows.support import Add
from tests.workflows.support import Total


def test_a_chain_makes_each_step_wait_for_the_one_before_and_take_its_one_result() -> None:
    plan = Workflow(chain(Add(x=1), step(Add(x=2), receives="prev"), Add(x=3))).plan()
    assert [p.after for p in plan.members] == [(), (0,), (1,)]
    assert plan.members[1].receives == "prev"
    assert plan.members[1].takes == "one"
    assert plan.members[2].receives is None, "a step that declares nothing receives nothing"


def test_a_group_callback_waits_for_every_member_and_takes_a_list_even_of_one() -> None:
    plan = Workflow(group(Add(x=1), Add(x=2)).then(step(Total(), receives="parts"))).plan()
    assert [p.after for p in plan.members] == [(), (), (0, 1)]
    assert plan.members[2].takes == "all"
    single = Workflow(group(Add(x=1)).then(step(Total(), receives="parts"))).plan()
    assert single.members[1].takes == "all", "a group's follower always gets a list"


def test_a_chain_of_groups_fans_out_and_in_at_each_stage() -> None:
    shape = chain(Add(x=0), group(Add(x=1), chain(Add(x=2), Add(x=3))), Total())
    plan = Workflow(shape).plan()
    assert [p.after for p in plan.members] == [(), (0,), (0,), (2,), (1, 3)]


def test_a_graph_keeps_the_order_its_dependencies_were_named_in() -> None:
    g = Graph()
    a, b = g.add(Add(x=1)), g.add(Add(x=2))
    g.add(step(Total(), receives="parts"), after=[b, a])
    assert Workflow(g).plan().members[2].after == (1, 0)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Workflow(chain()).plan(), "an empty chain"),
        (lambda: Workflow(group()).plan(), "an empty group"),
        (lambda: Workflow(step(Add(x=1), receives="nope")).plan(), "has no field 'nope'"),
        (lambda: Graph().add(Add(x=1), after=[0]), "is not a node of this graph"),
        (lambda: Workflow(Add(x=1), on_failure="maybe").plan(), "on_failure"),  # type: ignore[arg-type]
    ],
)
def test_a_shape_that_cannot_run_is_refused_before_anything_is_written(
    build: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        build()  # type: ignore[operator]


def test_a_workflow_has_a_bounded_size() -> None:
    many = group(*[Add(x=i) for i in range(MAX_MEMBERS + 1)])
    with pytest.raises(ValueError, match="at most"):
        Workflow(many).plan()
