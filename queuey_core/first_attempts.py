"""First-attempt envelopes: a job (or a job type and a payload) checked against its
queue set and made into the envelope it is published as, with no I/O.

Owns: :func:`make_envelope` (what :class:`~queuey_core.producer.Producer` publishes, and
what ``queuey enqueue`` and the scheduler check), :func:`make_raw_envelope` (a job known
only by its type name) and :func:`json_object`. Must never: let through a priority the
queue cannot hold, or a payload that JSON would change on its way to the worker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from queuey_core.envelope import Envelope, _first_error
from queuey_core.errors import InvalidPriorityError
from queuey_core.job_ids import JobId, job_id_for
from queuey_core.jobs import Job, job_identity
from queuey_core.limits import check_delay
from queuey_core.queues import QueueSet
from queuey_core.uuid7 import uuid7


def make_envelope(
    job: Job,
    queues: QueueSet,
    *,
    priority: int | None = None,
    enqueued_at: int,
    job_id: JobId | None = None,
) -> Envelope:
    """The first-attempt envelope of ``job``, checked against its queue; no I/O.

    Raises:
        UnknownQueueError: the job's queue is not in the queue set.
        InvalidPriorityError: the priority is above what the queue supports.
        ValueError: ``job_id`` is not a valid job id (see :func:`job_id_for`).
    """
    _, queue_name = job_identity(type(job))
    config = queues[queue_name]
    prio = priority or 0
    if prio < 0 or prio > config.top_priority:
        raise InvalidPriorityError(queue_name, prio, config.max_priority)
    env = Envelope.for_job(job, enqueued_at=enqueued_at, priority=prio)
    if job_id is not None:
        env = env.model_copy(update={"job_id": job_id_for(job_id)})
    return env


def make_raw_envelope(
    job_type: str,
    payload: Mapping[str, Any],
    queues: QueueSet,
    *,
    queue: str,
    priority: int | None = None,
    enqueued_at: int,
    job_id: JobId | None = None,
) -> Envelope:
    """The first-attempt envelope of a job known only by its type name; no I/O.

    Raises:
        UnknownQueueError: ``queue`` is not in the queue set.
        InvalidPriorityError: the priority is above what the queue supports.
        ValueError: a payload that is not a JSON object (or would not come back from
            JSON unchanged), or a job type or id the wire cannot carry.
    """
    config = queues[queue]
    prio = priority or 0
    if prio < 0 or prio > config.top_priority:
        raise InvalidPriorityError(queue, prio, config.max_priority)
    data = json_object(payload)
    try:
        return Envelope(
            job_id=job_id_for(job_id) if job_id is not None else uuid7(enqueued_at),
            job_type=job_type,
            queue=queue,
            priority=prio,
            enqueued_at=enqueued_at,
            payload=data,
        )
    except ValidationError as exc:
        raise ValueError(_first_error(exc)) from None


def json_object(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``payload`` as JSON will carry it; ValueError if it is not a JSON object, or if
    JSON would change it (a key that is not a string, a tuple, NaN, an object JSON does
    not know): the worker must read exactly what the caller meant."""
    if not isinstance(payload, Mapping):
        raise ValueError(f"a payload is a JSON object (a dict), not {type(payload).__name__}")
    try:
        text = json.dumps(dict(payload), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"the payload cannot be encoded as JSON: {exc}") from None
    data: dict[str, Any] = json.loads(text)
    if data != dict(payload):
        raise ValueError(
            "the payload would not come back from JSON unchanged (keys must be strings, "
            "sequences lists)"
        )
    return data


def batch_ids(
    jobs: Sequence[Job], job_ids: Sequence[JobId | None] | None
) -> Sequence[JobId | None]:
    """One caller-chosen id (or None) per job of a batch; ValueError when ``job_ids``
    does not match ``jobs``."""
    if job_ids is None:
        return [None] * len(jobs)
    if len(job_ids) != len(jobs):
        raise ValueError(f"{len(job_ids)} job ids for {len(jobs)} jobs")
    return job_ids


def check_delay_given(delay: float | None) -> None:
    """ValueError for a delay the broker cannot hold, before anything is published."""
    if delay is not None:
        check_delay(delay)
