"""The envelope: a job on the wire, as JSON bytes (never pickle).

Anyone with access to a queue can publish into it, so every field is checked where the envelope
is read, on every backend: a body that breaks a rule is a :class:`DecodeError` naming the
field, and the consumer dead-letters it unrun. The rules keep every value something a broker
can carry again (an AMQP short string, a signed 32-bit header): a retry or a dead letter of an
envelope that was read can always be published.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import to_json

from queuey_core.errors import DecodeError
from queuey_core.flow.unique import UniqueMark
from queuey_core.jobs import Job, job_identity
from queuey_core.limits import MAX_QUEUE_NAME_BYTES, MAX_SHORT_STRING_BYTES
from queuey_core.trace_context import TracedModel
from queuey_core.uuid7 import uuid7

J = TypeVar("J", bound=Job)

#: The envelope format this code writes and reads; any other is dead-lettered unread.
VERSION = 1
#: The largest ``attempt`` or ``deferrals``: a signed 32-bit AMQP header holds it.
MAX_COUNT = 2**31 - 1
#: The latest ``enqueued_at`` (ms): past it, the AMQP timestamp would not be exact.
MAX_ENQUEUED_AT = 2**53


#: The end of the text in a schema's ``pattern``: ``$`` alone also matches before a final newline
#: in Python's ``re`` (which Python's validators use), not in ECMA-262.
_END = "$(?!\\n)"
_HEX_UUID = "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
#: Every spelling of a UUID a worker takes as a ``job_id`` (what pydantic parses; a test
#: holds it to that): 8-4-4-4-12 hex digits in either case, bare, after ``urn:uuid:`` or
#: between braces, or 32 hex digits. The worker carries on the canonical form (lower
#: case, hyphenated). A regular expression that JSON Schema (ECMA-262) and Python share.
UUID_PATTERN = f"^(?:{_HEX_UUID}|urn:uuid:{_HEX_UUID}|\\{{{_HEX_UUID}\\}}|[0-9A-Fa-f]{{32}}){_END}"
_UUID_SPELLING = re.compile(UUID_PATTERN)


def spells_uuid(text: str) -> bool:
    """Whether ``text`` is a UUID in one of the spellings of :data:`UUID_PATTERN`."""
    return _UUID_SPELLING.fullmatch(text) is not None


def _uuid_schema(schema: dict[str, Any]) -> None:
    # JSON Schema's "uuid" format is the hyphenated form only, and some validators
    # assert it: the worker takes more, and the schema says what the worker takes.
    schema.pop("format", None)
    schema["pattern"] = UUID_PATTERN


#: C0 and C1 controls, DEL and lone surrogates: what a short string must not hold.
_NOT_IN_SHORT_STRING = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _short_string(limit: int) -> Callable[[str], str]:
    """The check of an AMQP short string (``type`` property, routing key) of at most
    ``limit`` UTF-8 bytes, without controls."""

    def check(value: str) -> str:
        # Checked on every delivery, so the common case is cheap: printable ASCII of at
        # most `limit` characters (a job type, a queue name) is one byte a character and
        # holds no control; otherwise a string of at most limit/4 characters cannot
        # exceed `limit` bytes, and one regular expression finds a control.
        if value.isascii() and value.isprintable() and len(value) <= limit:
            return value
        if len(value) * 4 > limit and len(value.encode("utf-8", "surrogatepass")) > limit:
            raise ValueError(f"longer than {limit} UTF-8 bytes")
        if _NOT_IN_SHORT_STRING.search(value):
            raise ValueError("contains a control character or a lone surrogate")
        return value

    return check


def _short_string_field(limit: int) -> Any:
    """The field of a str of 1 to ``limit`` UTF-8 bytes without controls: its schema.

    A schema's ``maxLength`` counts characters, not bytes: it is ``limit`` (no string
    of more characters can fit), and ``x-queuey-max-utf8-bytes`` states the real rule
    for validators taught it (docs/protocol.md, "Validating against the schemas").
    """
    return Field(
        min_length=1,
        json_schema_extra={
            "maxLength": limit,
            MAX_UTF8_BYTES_KEYWORD: limit,
            "pattern": f"^[^\\u0000-\\u001f\\u007f-\\u009f]*{_END}",
        },
    )


#: The schema keyword of a string's limit in UTF-8 bytes (``maxLength`` counts characters).
MAX_UTF8_BYTES_KEYWORD = "x-queuey-max-utf8-bytes"
JobTypeName = Annotated[
    str,
    _short_string_field(MAX_SHORT_STRING_BYTES),
    AfterValidator(_short_string(MAX_SHORT_STRING_BYTES)),
]
#: A queue's name rides in a delayed message's routing key behind the delay bits.
QueueName = Annotated[
    str,
    _short_string_field(MAX_QUEUE_NAME_BYTES),
    AfterValidator(_short_string(MAX_QUEUE_NAME_BYTES)),
]


class Envelope(TracedModel):
    """A job's identity, delivery history and payload.

    ``attempt`` counts runs that may fail (it starts at 1 and grows on a retry);
    ``deferrals`` counts deferrals, which never spend an attempt. The envelope carries
    these counters itself so nothing depends on broker-side headers such as ``x-death``.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    # The descriptions are the JSON Schema's (docs/schema/envelope.json, `queuey schema`).
    v: int = Field(
        default=VERSION,
        json_schema_extra={"const": VERSION},
        description="Format version. A worker dead-letters an envelope of any other version.",
    )
    job_id: uuid.UUID = Field(
        description="The job's id, kept through retries, deferrals and dead letters; "
        "carried on in the canonical form (lower case, hyphenated).",
        json_schema_extra=_uuid_schema,
    )
    job_type: JobTypeName = Field(
        description="The job type (a handler's Job.NAME); at most 255 UTF-8 bytes "
        "(maxLength counts characters: see x-queuey-max-utf8-bytes)."
    )
    queue: QueueName = Field(
        description="The queue the job is published to, at most 183 UTF-8 bytes (maxLength "
        "counts characters: see x-queuey-max-utf8-bytes); a worker dead-letters an "
        "envelope that names another queue than the one it came from."
    )
    attempt: int = Field(
        default=1, ge=1, le=MAX_COUNT, description="Runs so far that may fail, this one included."
    )
    deferrals: int = Field(
        default=0, ge=0, le=MAX_COUNT, description="Deferrals so far (they spend no attempt)."
    )
    priority: int = Field(
        default=0,
        ge=0,
        le=255,
        description="At most the queue's max_priority (0 on a queue without priorities): a "
        "worker dead-letters a higher one. Also sent as the AMQP priority property.",
    )
    enqueued_at: int = Field(
        ge=0, le=MAX_ENQUEUED_AT, description="When it was first enqueued: ms since the Unix epoch."
    )
    payload: dict[str, Any] = Field(
        description="The job's fields, validated against the job type's model by the worker."
    )
    # None: left out, a job without a key is the same bytes as before.
    unique: tuple[UniqueMark, ...] | None = Field(
        default=None,
        max_length=2,
        exclude_if=lambda marks: marks is None,
        description="Protocol 1.3: the unique keys the job holds (docs/flow-control.md), for "
        "the worker to let go of when their period ends; kept through retries and deferrals.",
    )
    workflow: uuid.UUID | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="The workflow the job is a member of (protocol 1.3), absent for a job "
        "on its own: a worker that records workflows reports the member's end to it.",
    )

    @field_validator("v", mode="before")
    @classmethod
    def _known_version(cls, version: Any) -> Any:
        # Another version may shape its fields differently, and its reason must say so
        # rather than name whichever field broke first: decode() reports this error alone
        # when it is among others. Never guess. (A field's check, not the model's: one
        # on the whole model makes pydantic build the body as Python objects first, a
        # third of the cost of reading an envelope.)
        if type(version) is not int or version != VERSION:
            raise ValueError(f"{_UNKNOWN_VERSION} {repr(version)[:40]}")
        return version

    @classmethod
    def for_job(cls, job: Job, *, enqueued_at: int, priority: int = 0) -> Envelope:
        """A first-attempt envelope for ``job`` with a fresh job id."""
        name, queue = job_identity(type(job))
        return cls(
            job_id=uuid7(enqueued_at),
            job_type=name,
            queue=queue,
            priority=priority,
            enqueued_at=enqueued_at,
            payload=job.model_dump(mode="json"),
        )

    def next_attempt(self) -> Envelope:
        """The envelope of the retry: one more attempt, back at priority 0.

        Dropping the priority keeps a job that once deferred from jumping the backlog
        on every retry. ValueError past :data:`MAX_COUNT` attempts.
        """
        if self.attempt >= MAX_COUNT:
            raise ValueError(f"attempt {self.attempt} is the last one an envelope can count")
        return self.model_copy(update={"attempt": self.attempt + 1, "priority": 0})

    def deferred(self, priority: int) -> Envelope:
        """The envelope of a deferral: one more deferral at ``priority``, same attempt.

        ValueError past :data:`MAX_COUNT` deferrals or for a priority outside 0..255.
        """
        if self.deferrals >= MAX_COUNT:
            raise ValueError(f"{self.deferrals} deferrals is the most an envelope can count")
        if not 0 <= priority <= 255:
            raise ValueError(f"priority {priority} is outside 0..255")
        return self.model_copy(update={"deferrals": self.deferrals + 1, "priority": priority})

    def fresh(self) -> Envelope:
        """The envelope of a requeued dead letter: attempt 1 again, nothing else changed."""
        return self.model_copy(update={"attempt": 1, "priority": 0})

    def encode(self) -> bytes:
        """JSON bytes for the wire."""
        return self.model_dump_json().encode()

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> Envelope:
        """Parse wire bytes; anything that is not a valid envelope raises DecodeError."""
        try:
            return cls.model_validate_json(bytes(data))
        except ValidationError as exc:
            why = _version_error(exc) or _first_error(exc)
            raise DecodeError(f"not a queuey envelope: {why}") from exc

    def decode_job(self, job_type: type[J]) -> J:
        """Validate the payload against ``job_type``; DecodeError if it does not fit."""
        try:
            return job_type.model_validate(self.payload)
        except ValidationError as exc:
            raise DecodeError(
                f"payload does not fit {job_type.__qualname__}: {_first_error(exc)}"
            ) from exc


class EncodedEnvelope:
    """A first-attempt envelope, checked, its body written on demand: ``enqueue_many``'s
    hot path.

    Carries what a backend routes and labels a message by, and the body a real
    :class:`Envelope` would encode to (:func:`encode_first_attempt`): building and
    validating a model per job costs more than the rest of a publish. Made from a
    payload already serialized (the part that can fail), it writes its body, and draws
    its random id, only when first asked: a backend then sends a batch's first messages
    while the rest are still being written, instead of after all of them.
    """

    __slots__ = (
        "_body",
        "_entropy",
        "_id",
        "_names",
        "_payload",
        "_text",
        "enqueued_at",
        "job_type",
        "priority",
        "queue",
    )

    def __init__(
        self,
        job_id: uuid.UUID | None,
        job_type: str,
        queue: str,
        priority: int,
        enqueued_at: int,
        body: bytes | None = None,
        *,
        names: tuple[bytes, bytes] | None = None,
        payload: bytes | None = None,
        entropy: bytes | None = None,
    ) -> None:
        """``body`` as it is, or one written from ``payload`` (the job's JSON) and
        ``names`` (:func:`json_string` of the job type and the queue); ``job_id`` None
        makes a time-ordered one (:func:`~queuey_core.uuid7.uuid7`, of ``enqueued_at``)
        from ``entropy`` (16 random bytes, drawn for a whole batch at once), else from
        its own."""
        if body is None and (names is None or payload is None):
            raise TypeError("an EncodedEnvelope takes its body, or its payload and names")
        if job_id is None and entropy is not None and len(entropy) != 16:
            raise ValueError("a job id takes 16 bytes of entropy")
        self._id = job_id
        self._entropy = entropy
        self._text: str | None = None
        self._body = body
        self._names = names
        self._payload = payload
        self.job_type = job_type
        self.queue = queue
        self.priority = priority
        self.enqueued_at = enqueued_at

    @property
    def job_id(self) -> uuid.UUID:
        job_id = self._id
        if job_id is None:
            entropy = self._entropy
            job_id = self._id = uuid7(self.enqueued_at, entropy)
        return job_id

    @property
    def message_id(self) -> str:
        """The job id's text, as the body and the message's properties carry it."""
        text = self._text
        if text is None:
            text = self._text = str(self.job_id)
        return text

    @property
    def body(self) -> bytes:
        body = self._body
        if body is None:
            assert self._names is not None  # (__init__ made sure of both)
            assert self._payload is not None
            job_type, queue = self._names
            body = self._body = encode_first_attempt(
                self.message_id, job_type, queue, self.priority, self.enqueued_at, self._payload
            )
        return body

    def encode(self) -> bytes:
        """The body, as :meth:`Envelope.encode` would give it."""
        return self.body

    def envelope(self) -> Envelope:
        """The model, for a backend that keeps models."""
        return Envelope.decode(self.body)

    def __repr__(self) -> str:
        return f"EncodedEnvelope({self.job_type!r}, queue={self.queue!r}, id={self._id})"


def json_string(value: str) -> bytes:
    """``value`` as a JSON string, exactly as the envelope's own encoder writes it."""
    return to_json(value)


def encode_first_attempt(
    job_id: str, job_type: bytes, queue: bytes, priority: int, enqueued_at: int, payload: bytes
) -> bytes:
    """The body :meth:`Envelope.encode` gives a first attempt, without building the model.

    ``job_type`` and ``queue`` come through :func:`json_string`, ``payload`` from the
    job model's own JSON serializer; the caller has checked every value as the model
    would (``Producer`` builds one real envelope per job type and call). Field order and
    spelling are the model's: a test decodes both and compares.
    """
    return _FIRST_ATTEMPT % (job_id.encode(), job_type, queue, priority, enqueued_at, payload)


_FIRST_ATTEMPT = (
    b'{"v":%d,"job_id":"%%s","job_type":%%s,"queue":%%s,"attempt":1,"deferrals":0,'
    b'"priority":%%d,"enqueued_at":%%d,"payload":%%s}' % VERSION
)
_UNKNOWN_VERSION = "unknown envelope version"


def _version_error(exc: ValidationError) -> str | None:
    """The unknown version's reason, if that is among the errors: it alone is the reason,
    whatever the other fields hold."""
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        msg = str(error.get("msg", "")).removeprefix("Value error, ")
        if tuple(error.get("loc", ())) == ("v",) and msg.startswith(_UNKNOWN_VERSION):
            return msg
    return None


def _first_error(exc: ValidationError) -> str:
    """One short line from a pydantic error naming the field, never echoing its value."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    if not errors:
        return "invalid"
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {msg}{more}" if where else f"{msg}{more}"
