"""JSON Schemas of what queuey puts on the wire, generated from the models.

Owns: the schema of the envelope (the message body, :class:`~queuey_core.envelope.Envelope`)
and of a job type's payload (its :class:`~queuey_core.jobs.Job` model), and their one
text form, so that ``queuey schema`` and the files checked into ``docs/schema/`` are the
same bytes. Producers in other languages validate against these; the worker itself
validates with the models, which the schemas are generated from (the envelope's short
strings are limited to 255 UTF-8 *bytes*, which a schema's ``maxLength`` in characters
can only approximate).
"""

from __future__ import annotations

import json
from typing import Any

from queuey_core.envelope import Envelope
from queuey_core.jobs import Job, job_identity

#: The JSON Schema dialect pydantic generates.
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def envelope_schema() -> dict[str, Any]:
    """The schema of a message body: the envelope, format version ``v`` 1."""
    return {"$schema": DIALECT, **Envelope.model_json_schema(mode="validation")}


def payload_schema(job_type: type[Job]) -> dict[str, Any]:
    """The schema of ``job_type``'s payload (the envelope's ``payload``), with the job
    type's name and queue as ``x-queuey-job-type`` and ``x-queuey-queue``."""
    name, queue = job_identity(job_type)
    return {
        "$schema": DIALECT,
        "x-queuey-job-type": name,
        "x-queuey-queue": queue,
        **job_type.model_json_schema(mode="validation"),
    }


def schema_text(schema: dict[str, Any]) -> str:
    """The text form of a schema: indented, ASCII only, keys in order, one final newline."""
    return json.dumps(schema, indent=2, ensure_ascii=True) + "\n"
