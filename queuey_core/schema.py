"""JSON Schemas of what queuey puts on the wire, generated from the models.

Owns: the schema of the envelope (the message body, :class:`~queuey_core.envelope.Envelope`)
and of a job type's payload (its :class:`~queuey_core.jobs.Job` model), and their one
text form, so that ``queuey schema`` and the files checked into ``docs/schema/`` are the
same bytes. Producers in other languages validate against these; the worker itself
validates with the models, which the schemas are generated from (the envelope's short
strings are limited in UTF-8 *bytes*, which a schema's ``maxLength`` in characters can
only bound: ``x-queuey-max-utf8-bytes`` says the real limit).

Also owns the keywords queuey adds to JSON Schema (``x-queuey-*``, :data:`KEYWORDS`),
declared in one schema of their own (:func:`keywords_schema`, ``docs/schema/keywords.json``)
that a strict validator is given first (Ajv's ``addVocabulary``; docs/protocol.md).

And the version of that contract (:data:`PROTOCOL_VERSION`, in every schema's
``$comment``) with the :func:`fingerprint` that docs/protocol-changelog.md records for
each version: a change that a validator could see (a new keyword, a tighter limit)
changes the fingerprint, so it cannot land without a changelog entry (tests/test_schema.py).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from queuey_core.envelope import MAX_UTF8_BYTES_KEYWORD, Envelope
from queuey_core.jobs import Job, job_identity

#: The JSON Schema dialect pydantic generates.
DIALECT = "https://json-schema.org/draft/2020-12/schema"

#: The version of the wire protocol's schemas: MAJOR is the envelope's format ``v``,
#: MINOR grows with every change a validator can see (docs/protocol-changelog.md).
PROTOCOL_VERSION = "1.3"
#: Where every schema names its version: ``$comment`` is for readers, and every
#: validator (Ajv in strict mode too) takes it without being told.
VERSION_COMMENT = f"queuey wire protocol {PROTOCOL_VERSION}: docs/protocol-changelog.md"
#: Keywords that only annotate: a change to one cannot make a validator refuse anything.
_ANNOTATIONS = frozenset({"$comment", "title", "description", "examples"})


#: Every keyword queuey adds to its schemas, with the schema of its value. All are
#: annotations to a validator that does not know them; the byte limit is the one rule a
#: producer should teach its validator (docs/protocol.md shows how).
KEYWORDS: dict[str, dict[str, Any]] = {
    "x-queuey-job-type": {
        "description": "In a payload schema: the job type (Job.NAME) whose payload it is.",
        "type": "string",
    },
    "x-queuey-queue": {
        "description": "In a payload schema: the queue the job type is bound to (Job.QUEUE).",
        "type": "string",
    },
    MAX_UTF8_BYTES_KEYWORD: {
        "description": "On a string: at most this many bytes once encoded in UTF-8 (the "
        "worker's rule; maxLength, beside it, counts characters).",
        "type": "integer",
        "minimum": 0,
    },
}


def keywords_schema() -> dict[str, Any]:
    """The schema of queuey's keywords: their names (its ``properties``) and values.

    Declares them for a strict validator (Ajv: ``addVocabulary`` of its property names),
    and validates the values of those keywords in any of queuey's schemas.
    """
    return {
        "$schema": DIALECT,
        "$comment": VERSION_COMMENT,
        "title": "queuey's JSON Schema keywords",
        "description": "The keywords queuey adds to its schemas (docs/protocol.md, "
        "'Validating against the schemas'). A validator that does not know a keyword "
        "ignores it (an annotation); a strict one (Ajv) must be told their names first.",
        "type": "object",
        "properties": KEYWORDS,
    }


def envelope_schema() -> dict[str, Any]:
    """The schema of a message body: the envelope, format version ``v`` 1."""
    return {
        "$schema": DIALECT,
        "$comment": VERSION_COMMENT,
        **Envelope.model_json_schema(mode="validation"),
    }


def payload_schema(job_type: type[Job]) -> dict[str, Any]:
    """The schema of ``job_type``'s payload (the envelope's ``payload``), with the job
    type's name and queue as ``x-queuey-job-type`` and ``x-queuey-queue``."""
    name, queue = job_identity(job_type)
    return {
        "$schema": DIALECT,
        "$comment": VERSION_COMMENT,
        "x-queuey-job-type": name,
        "x-queuey-queue": queue,
        **job_type.model_json_schema(mode="validation"),
    }


def schema_text(schema: dict[str, Any]) -> str:
    """The text form of a schema: indented, ASCII only, keys in order, one final newline."""
    return json.dumps(schema, indent=2, ensure_ascii=True) + "\n"


def fingerprint(schema: dict[str, Any]) -> str:
    """What a validator sees of ``schema``, in 16 hex digits: the start of the SHA-256 of
    its compact JSON with sorted keys, once every annotation (``$comment``, ``title``,
    ``description``, ``examples``) is taken out. Rewording a description keeps it; a new
    keyword, a limit or a pattern changed does not."""
    text = json.dumps(_validated(schema), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _validated(node: Any) -> Any:
    if isinstance(node, dict):
        # A property named "title" maps to a schema (an object or a boolean): only an
        # annotation's value is a string or a list, so those alone are dropped.
        return {
            k: _validated(v)
            for k, v in node.items()
            if not (k in _ANNOTATIONS and isinstance(v, str | list))
        }
    if isinstance(node, list):
        return [_validated(v) for v in node]
    return node
