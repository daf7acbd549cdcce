"""The shapes of a workflow: chains, groups, callbacks and graphs of jobs; pure, no I/O.

Owns: the values a user builds (:class:`Step`, :class:`Chain`, :class:`Group`,
:class:`Graph`, :class:`Workflow`) and their one compiled form, :class:`Plan`: the
members in order, each with the members it waits for. Every shape compiles to a graph;
nothing downstream knows a chain from a group. Must never: publish, read a clock or
touch a store (:mod:`.engine` does), nor accept a graph with a cycle (a graph is built
in order, each node after nodes that exist already, so it cannot hold one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from queuey_core.jobs import Job

#: What happens to the members not yet enqueued when a member fails (is dead-lettered or
#: cancelled): ``cancel`` holds them (a requeue of the failed member from its dead-letter
#: queue releases them), ``continue`` lets every member whose dependencies succeeded run.
OnFailure = Literal["cancel", "continue"]
ON_FAILURE: tuple[OnFailure, ...] = ("cancel", "continue")
#: The most members one workflow may have (a callback's input is read in one query).
MAX_MEMBERS = 100_000


@dataclass(frozen=True, slots=True)
class Step:
    """One job in a workflow. ``receives`` names a field of the job's model that is set,
    when the job is enqueued, to what the jobs it waits for returned: the one result
    when it follows a single step, else a list in the order of its dependencies. None:
    the job is enqueued as built."""

    job: Job
    receives: str | None = None

    def then(self, *nodes: Node | Job) -> Chain:
        """This step, then ``nodes`` in order."""
        return Chain((self, *map(_node, nodes)))


@dataclass(frozen=True, slots=True)
class Chain:
    """Steps run one after another; each starts when the one before has succeeded."""

    parts: tuple[Node, ...]

    def then(self, *nodes: Node | Job) -> Chain:
        """This chain, then ``nodes`` in order."""
        return Chain((*self.parts, *map(_node, nodes)))


@dataclass(frozen=True, slots=True)
class Group:
    """Members run in parallel; what follows a group (``.then(callback)``) starts once,
    after every member has succeeded, and receives their results in the group's order."""

    members: tuple[Node, ...]

    def then(self, *nodes: Node | Job) -> Chain:
        """This group, then ``nodes`` in order (the first is the group's callback)."""
        return Chain((self, *map(_node, nodes)))


Node = Step | Chain | Group


def step(job: Job, *, receives: str | None = None) -> Step:
    """``job`` as a step; ``receives`` names the field its dependencies' results fill."""
    return Step(job, receives)


def chain(*nodes: Node | Job) -> Chain:
    """``nodes`` one after another: ``chain(A(...), B(...), step(C(...), receives="x"))``."""
    return Chain(tuple(map(_node, nodes)))


def group(*nodes: Node | Job) -> Group:
    """``nodes`` in parallel: ``group(*jobs).then(step(Sum(), receives="parts"))``."""
    return Group(tuple(map(_node, nodes)))


@dataclass(frozen=True, slots=True)
class Planned:
    """One member of a compiled workflow: its job, the positions of the members it waits
    for (earlier in the plan), and how it receives their results."""

    job: Job
    after: tuple[int, ...]
    receives: str | None
    takes: Literal["one", "all"]


@dataclass(slots=True)
class Graph:
    """A general graph of jobs: each :meth:`add` names the nodes it runs after.

    ``g = Graph(); a = g.add(A()); b = g.add(B()); g.add(step(C(), receives="ab"), after=[a, b])``
    """

    planned: list[Planned] = field(default_factory=list)

    def add(self, node: Job | Step, *, after: Sequence[int] = ()) -> int:
        """Add a job that starts once every node of ``after`` has succeeded; its handle."""
        one = _node(node)
        if not isinstance(one, Step):
            raise TypeError("Graph.add takes a job or a step; compose chains and groups first")
        deps = tuple(after)
        for dep in deps:
            if not 0 <= dep < len(self.planned):
                raise ValueError(f"after: {dep} is not a node of this graph")
        if len(set(deps)) != len(deps):
            raise ValueError("after: a node is named twice")
        return _append(self.planned, one, deps, "one" if len(deps) == 1 else "all")


@dataclass(frozen=True, slots=True)
class Workflow:
    """A shape to start, with its policy.

    ``on_failure`` says what becomes of the members not enqueued yet when one fails
    (:data:`OnFailure`); ``on_error`` is a job enqueued once when the workflow first
    fails, its ``receives`` field set to ``{"workflow_id", "job_id", "job_type",
    "error"}`` of the member that failed.
    """

    shape: Node | Graph | Job
    name: str = ""
    on_failure: OnFailure = "cancel"
    on_error: Step | Job | None = None

    def plan(self) -> Plan:
        """The compiled form; ValueError for an empty, oversized or ill-declared one."""
        if self.on_failure not in ON_FAILURE:
            raise ValueError(f"on_failure: {self.on_failure!r} is not one of {ON_FAILURE}")
        if isinstance(self.shape, Graph):
            planned = list(self.shape.planned)
        else:
            planned = []
            _compile(planned, _node(self.shape), (), many=False)
        if not planned:
            raise ValueError("a workflow needs at least one job")
        if len(planned) > MAX_MEMBERS:
            raise ValueError(f"a workflow holds at most {MAX_MEMBERS} jobs, not {len(planned)}")
        on_error = None
        if self.on_error is not None:
            errback = _node(self.on_error)
            if not isinstance(errback, Step):
                raise TypeError("on_error takes a job or a step")
            _check_receives(errback)
            on_error = Planned(errback.job, (), errback.receives, "one")
        return Plan(tuple(planned), on_error, self.name, self.on_failure)


@dataclass(frozen=True, slots=True)
class Plan:
    """A workflow compiled: its members (dependencies always earlier) and its policy."""

    members: tuple[Planned, ...]
    on_error: Planned | None
    name: str
    on_failure: OnFailure


def _node(value: Node | Job) -> Node:
    if isinstance(value, Job):
        return Step(value)
    if isinstance(value, Step | Chain | Group):
        return value
    raise TypeError(f"not a job, step, chain or group: {type(value).__name__}")


def _check_receives(one: Step) -> None:
    if one.receives is not None and one.receives not in type(one.job).model_fields:
        raise ValueError(
            f"receives: {type(one.job).__qualname__} has no field {one.receives!r} to fill"
        )


def _append(planned: list[Planned], one: Step, deps: tuple[int, ...], takes: str) -> int:
    _check_receives(one)
    planned.append(Planned(one.job, deps, one.receives, "one" if takes == "one" else "all"))
    return len(planned) - 1


def _compile(
    planned: list[Planned], node: Node, deps: tuple[int, ...], *, many: bool
) -> tuple[tuple[int, ...], bool]:
    """Append ``node`` after ``deps``; its exits, and whether they are a group's (whose
    follower takes a list even of one result)."""
    if isinstance(node, Step):
        takes = "one" if len(deps) == 1 and not many else "all"
        return (_append(planned, node, deps, takes),), False
    if isinstance(node, Chain):
        if not node.parts:
            raise ValueError("an empty chain")
        for part in node.parts:
            deps, many = _compile(planned, part, deps, many=many)
        return deps, many
    if not node.members:
        raise ValueError("an empty group")
    exits: list[int] = []
    for member in node.members:
        ends, _ = _compile(planned, member, deps, many=many)
        exits.extend(ends)
    return tuple(exits), True
