"""A workflow described in JSON (``queuey enqueue --workflow FILE``), read into a
:class:`~.shapes.Workflow`.

Owns: the JSON form and its one-line errors. Each job is validated against its model
before anything is written, as ``queuey enqueue`` validates one job. Must never: accept
a job type it has no model for, nor guess at a key it does not know.

::

    {"name": "nightly", "on_failure": "cancel",
     "on_error": {"job": "alert", "receives": "failure"},
     "run": {"chain": [
        {"job": "extract", "payload": {"day": "2026-12-04"}},
        {"group": [{"job": "load", "payload": {"part": 1}},
                   {"job": "load", "payload": {"part": 2}}]},
        {"job": "report", "receives": "loaded"}]}}

A node is a job (``job``, ``payload``, ``receives``), a ``chain`` or a ``group`` of nodes,
or a ``graph``: an object of named jobs, each with ``after`` (names written before it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from queuey_core.jobs import Job
from queuey_core.workflows.shapes import ON_FAILURE, Graph, Node, Step, Workflow, chain, group

_TOP = {"name", "on_failure", "on_error", "run"}
_JOB = {"job", "payload", "receives"}


def workflow_from_json(data: Any, models: Mapping[str, type[Job]]) -> Workflow:
    """The workflow ``data`` (parsed JSON) describes, its jobs built from ``models`` (job
    type -> model). ValueError with one line saying where, for anything wrong."""
    _object(data, "the workflow")
    _keys(data, _TOP, "the workflow")
    if "run" not in data:
        raise ValueError('the workflow: no "run" (a job, chain, group or graph)')
    name = data.get("name", "")
    if not isinstance(name, str):
        raise ValueError("name: not a string")
    on_failure = data.get("on_failure", "cancel")
    if on_failure not in ON_FAILURE:
        raise ValueError(f"on_failure: {on_failure!r} is not one of {', '.join(ON_FAILURE)}")
    on_error = None if data.get("on_error") is None else _step(data["on_error"], models, "on_error")
    return Workflow(_node(data["run"], models, "run"), name, on_failure, on_error)


def _node(data: Any, models: Mapping[str, type[Job]], where: str) -> Node | Graph:
    _object(data, where)
    if "chain" in data or "group" in data:
        kind = "chain" if "chain" in data else "group"
        _keys(data, {kind}, where)
        parts = data[kind]
        if not isinstance(parts, list) or not parts:
            raise ValueError(f"{where}.{kind}: not a list of at least one node")
        nodes = [_node(p, models, f"{where}.{kind}[{i}]") for i, p in enumerate(parts)]
        if any(isinstance(n, Graph) for n in nodes):
            raise ValueError(f"{where}.{kind}: a graph must be the whole workflow")
        made = [n for n in nodes if not isinstance(n, Graph)]
        return chain(*made) if kind == "chain" else group(*made)
    if "graph" in data:
        _keys(data, {"graph"}, where)
        return _graph(data["graph"], models, f"{where}.graph")
    return _step(data, models, where)


def _graph(data: Any, models: Mapping[str, type[Job]], where: str) -> Graph:
    _object(data, where)
    g = Graph()
    handles: dict[str, int] = {}
    for key, node in data.items():
        here = f"{where}.{key}"
        _object(node, here)
        after = node.get("after", [])
        if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
            raise ValueError(f"{here}.after: not a list of names")
        unknown = [a for a in after if a not in handles]
        if unknown:
            raise ValueError(f"{here}.after: {unknown[0]!r} is not a job written before it")
        one = _step({k: v for k, v in node.items() if k != "after"}, models, here)
        handles[key] = g.add(one, after=[handles[a] for a in after])
    if not handles:
        raise ValueError(f"{where}: no jobs")
    return g


def _step(data: Any, models: Mapping[str, type[Job]], where: str) -> Step:
    _object(data, where)
    _keys(data, _JOB, where)
    job_type = data.get("job")
    if not isinstance(job_type, str):
        raise ValueError(f'{where}: no "job" (a job type), nor "chain", "group" or "graph"')
    model = models.get(job_type)
    if model is None:
        raise ValueError(f"{where}: unknown job type {job_type!r}")
    payload = data.get("payload", {})
    _object(payload, f"{where}.payload")
    receives = data.get("receives")
    if receives is not None and not isinstance(receives, str):
        raise ValueError(f"{where}.receives: not a field name")
    try:
        job = model.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(p) for p in first.get("loc", ()))
        raise ValueError(f"{where}.payload: {field}: {first.get('msg', 'invalid')}") from None
    return Step(job, receives)


def _object(data: Any, where: str) -> None:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: not a JSON object")


def _keys(data: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}")
