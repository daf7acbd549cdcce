"""Job ids: random ones, and stable ones made from a caller-chosen key.

Owns: :data:`JOB_ID_NAMESPACE` and :func:`job_id_for` (re-exported by
:mod:`queuey_core.producer`, where callers find them), and :func:`id_text_of_key`, what
every reader of ids (the CLI, the dashboard) looks up a key by. No I/O.
"""

from __future__ import annotations

import uuid

from queuey_core.envelope import spells_uuid

#: The namespace of job ids made from caller-chosen keys (``uuid.uuid5``); fixed forever,
#: so a key maps to the same id in every process and every release.
JOB_ID_NAMESPACE = uuid.UUID("5d8f3f0e-6b1c-4d5e-9a57-0c2f4e8b7a11")

#: A caller-chosen job id: a UUID (used as it is), or any other string (an idempotency
#: key, turned into a stable UUID by :func:`job_id_for`).
JobId = uuid.UUID | str


def job_id_for(key: JobId) -> uuid.UUID:
    """The job id of a caller-chosen key: the same key always gives the same id.

    A ``uuid.UUID``, or a string that spells one as a worker reads it
    (:data:`~queuey_core.envelope.UUID_PATTERN`: ``"0b5c...-..."`` as ``enqueue`` prints
    them, upper case, ``urn:uuid:``, braces, 32 hex digits), is the id itself; any other
    non-empty string ``s`` gives ``uuid.uuid5(JOB_ID_NAMESPACE, s)`` (docs/protocol.md
    spells it out for other languages, with an example a test checks).

    Raises:
        ValueError: an empty key, or one that is neither a UUID nor a string.
    """
    if isinstance(key, uuid.UUID):
        return key
    if not isinstance(key, str) or not key.strip():
        raise ValueError(f"a job id is a UUID or a non-empty string, not {key!r}")
    # The worker's spellings, not uuid.UUID()'s (which also takes "uuid:", stray hyphens):
    # another language can then tell a key from an id by the documented rule alone.
    if spells_uuid(key):
        return uuid.UUID(key)
    return uuid.uuid5(JOB_ID_NAMESPACE, key)


def id_text_of_key(text: str) -> str | None:
    """The job id ``text`` stands for, as a dead letter's handle spells it, when that is
    not ``text`` itself: a key given to ``--job-id`` (or ``job_id=``), or a UUID in
    another spelling. None when ``text`` is already that id, or no key at all.

    A handle is tried as given first: one of a message that is no envelope can be any
    string.
    """
    try:
        derived = str(job_id_for(text))
    except ValueError:
        return None
    return derived if derived != text else None
