"""The JSON Schemas: generated from the models, checked into docs/schema/, and true.

A schema that drifts from the model misleads every producer written from it, so the
checked-in files must be exactly what ``queuey schema`` prints today.
"""

from __future__ import annotations

import itertools
import json
import re
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import queuey_example_handlers as examples
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core import DecodeError
from queuey_core import Envelope
from queuey_core import Job
from queuey_core import job_id_for
from queuey_core.envelope import spells_uuid
from queuey_core.limits import MAX_QUEUE_NAME_BYTES
from queuey_core.limits import MAX_SHORT_STRING_BYTES
from queuey_core.producer import JOB_ID_NAMESPACE
from queuey_core.schema import KEYWORDS
from queuey_core.schema import PROTOCOL_VERSION
from queuey_core.schema import VERSION_COMMENT
from queuey_core.schema import envelope_schema
from queuey_core.schema import fingerprint
from queuey_core.schema import keywords_schema
from queuey_core.schema import payload_schema
from queuey_core.schema import schema_text

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "docs" / "schema"
PROTOCOL = (SCHEMA_DIR.parent / "protocol.md").read_text()
CHANGELOG = SCHEMA_DIR.parent / "protocol-changelog.md"
EXAMPLES: list[type[Job]] = [
    examples.Greet,
    examples.Flaky,
    examples.Snooze,
    examples.Doomed,
    examples.Nap,
]


def _regenerate(name: str, path: Path) -> str:
    return (
        f"{path} is out of step with the model: regenerate it with `queuey schema {name} > {path}`"
    )


def test_the_checked_in_envelope_schema_is_the_models() -> None:
    path = SCHEMA_DIR / "envelope.json"
    assert path.read_text() == schema_text(envelope_schema()), _regenerate("envelope", path)


def test_the_checked_in_payload_schemas_are_the_example_models() -> None:
    files = {p.stem for p in (SCHEMA_DIR / "jobs").glob("*.json")}
    assert files == {job.NAME for job in EXAMPLES}, "one file per example job type"
    for job in EXAMPLES:
        path = SCHEMA_DIR / "jobs" / f"{job.NAME}.json"
        assert path.read_text() == schema_text(payload_schema(job)), _regenerate(job.NAME, path)


def _validator(schema: dict[str, Any]) -> Draft202012Validator:
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def _body() -> dict[str, Any]:
    env = Envelope.for_job(examples.Greet(name="ada"), enqueued_at=int(time.time() * 1000))
    body: dict[str, Any] = json.loads(env.encode())
    return body


def test_what_queuey_publishes_fits_the_envelope_schema() -> None:
    validator = _validator(envelope_schema())
    body = _body()
    assert body["v"] == 1
    validator.validate(body)
    minimal = {k: body[k] for k in ("job_id", "job_type", "queue", "enqueued_at", "payload")}
    validator.validate(minimal)
    assert Envelope.model_validate_json(json.dumps(minimal)).attempt == 1, "defaults fill in"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"v": 2}, "v"),
        ({"enqueued_at": None}, "enqueued_at"),
        ({"job_id": "not-a-uuid"}, "job_id"),
        ({"job_type": ""}, "job_type"),
        ({"job_type": "a\x1bb"}, "job_type"),
        ({"job_type": "a\n"}, "job_type"),
        ({"queue": "q" * (MAX_QUEUE_NAME_BYTES + 1)}, "queue"),
        ({"attempt": 0}, "attempt"),
        ({"priority": 256}, "priority"),
        ({"payload": [1]}, "payload"),
    ],
)
def test_the_envelope_schema_refuses_what_the_worker_refuses(
    change: dict[str, Any], field: str
) -> None:
    body = {**_body(), **change}
    body = {k: v for k, v in body.items() if v is not None}
    errors = list(_validator(envelope_schema()).iter_errors(body))
    assert errors, f"the schema took a body the worker refuses ({field})"
    with pytest.raises(DecodeError, match=field):
        Envelope.decode(json.dumps(body).encode())


def test_unknown_fields_are_allowed_as_the_worker_ignores_them() -> None:
    body = {**_body(), "trace_id": "abc"}
    _validator(envelope_schema()).validate(body)
    assert "trace_id" not in json.loads(Envelope.decode(json.dumps(body).encode()).encode())


def test_a_payload_schema_is_the_job_models() -> None:
    validator = _validator(payload_schema(examples.Greet))
    validator.validate({"name": "ada"})
    assert list(validator.iter_errors({})), "name is required"
    assert list(validator.iter_errors({"name": "x" * 101})), "at most 100 characters"


def test_queuey_schema_prints_the_checked_in_text() -> None:
    result = CliRunner().invoke(app, ["schema", "envelope"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (SCHEMA_DIR / "envelope.json").read_text()
    result = CliRunner().invoke(app, ["schema", "greet"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["x-queuey-job-type"] == "greet"


def test_queuey_schema_of_an_unknown_job_type_is_one_line_and_exit_2() -> None:
    result = CliRunner().invoke(app, ["schema", f"no.such.{uuid.uuid4().hex[:6]}"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: unknown job type 'no.such.")
    assert result.stderr.count("\n") == 1
    assert result.stdout == ""


# Every spelling the worker takes, and some it refuses: pydantic parses job ids, so this
# holds the schema's pattern, job_id_for and the worker to one list across upgrades.
_ID = "0b5c7a9e-3f0e-4b6a-9d57-2c2f4e8b7a11"
_TAKEN = [
    _ID,
    _ID.upper(),
    _ID.replace("-", ""),
    _ID.replace("-", "").upper(),
    f"urn:uuid:{_ID}",
    f"urn:uuid:{_ID.upper()}",
    f"{{{_ID}}}",
]
_REFUSED = [
    f" {_ID}",
    f"{_ID}\n",
    f"URN:UUID:{_ID}",
    f"uuid:{_ID}",
    f"urn:uuid:{_ID.replace('-', '')}",
    f"{{{_ID.replace('-', '')}}}",
    f"{{urn:uuid:{_ID}}}",
    _ID[:-1],
    _ID[:-1] + "g",
    "0b5c7a9e-3f0e4b6a-9d57-2c2f4e8b7a11",
]


@pytest.mark.parametrize("text", _TAKEN)
def test_a_job_id_spelling_the_worker_takes_fits_the_schema(text: str) -> None:
    body = {**_body(), "job_id": text}
    assert Envelope.decode(json.dumps(body).encode()).job_id == uuid.UUID(_ID)
    assert not list(_validator(envelope_schema()).iter_errors(body)), text
    assert spells_uuid(text)
    assert job_id_for(text) == uuid.UUID(_ID), "a key spelling an id is that id"


@pytest.mark.parametrize("text", _REFUSED)
def test_a_job_id_spelling_the_worker_refuses_breaks_the_schema(text: str) -> None:
    body = {**_body(), "job_id": text}
    with pytest.raises(DecodeError, match="job_id"):
        Envelope.decode(json.dumps(body).encode())
    assert list(_validator(envelope_schema()).iter_errors(body)), text
    assert not spells_uuid(text)
    assert job_id_for(text) == uuid.uuid5(JOB_ID_NAMESPACE, text), "any other key: uuid5"


# -- queuey's own keywords, and validating by bytes ---------------------------------------


def test_the_checked_in_keywords_schema_is_the_codes() -> None:
    path = SCHEMA_DIR / "keywords.json"
    assert path.read_text() == schema_text(keywords_schema()), (
        f'{path} is out of step: regenerate it with `python -c "from queuey_core.schema '
        f"import keywords_schema, schema_text; print(schema_text(keywords_schema()), "
        f"end='')\" > {path}`"
    )


def _keywords_in(node: object) -> set[str]:
    if isinstance(node, dict):
        found = {k for k in node if isinstance(k, str) and k.startswith("x-")}
        return found.union(*(_keywords_in(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_keywords_in(v) for v in node))
    return set()


def test_every_x_keyword_of_every_schema_is_declared_in_keywords_json() -> None:
    declared = json.loads((SCHEMA_DIR / "keywords.json").read_text())["properties"]
    assert set(declared) == set(KEYWORDS)
    meta = _validator(keywords_schema())
    files = [SCHEMA_DIR / "envelope.json", *sorted((SCHEMA_DIR / "jobs").glob("*.json"))]
    used: set[str] = set()
    for path in files:
        schema = json.loads(path.read_text())
        Draft202012Validator.check_schema(schema)
        used |= _keywords_in(schema)
        for node in _subschemas(schema):
            meta.validate(node)  # each keyword's value is of its declared type
    assert used == set(declared), f"used {sorted(used)}, declared {sorted(declared)}"
    section = PROTOCOL.split("### Validating against the schemas", 1)[1].split("\n#", 1)[0]
    table = set(re.findall(r"^\| `(x-queuey-[a-z0-9-]+)` \|", section, re.MULTILINE))
    assert table == set(declared), "protocol.md's table lists every keyword"


def _subschemas(node: object) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        return [node, *(n for v in node.values() for n in _subschemas(v))]
    if isinstance(node, list):
        return [n for v in node for n in _subschemas(v)]
    return []


def _documented_python_validator() -> Any:
    """The jsonschema validator protocol.md tells Python readers to build."""
    blocks = re.findall(r"```python\n(.*?)```", PROTOCOL, re.DOTALL)
    code = next(b for b in blocks if "x-queuey-max-utf8-bytes" in b)
    namespace: dict[str, Any] = {}
    exec(compile(textwrap.dedent(code), "protocol.md", "exec"), namespace)
    return namespace["Validator"]


@pytest.mark.parametrize(
    ("field", "limit"), [("job_type", MAX_SHORT_STRING_BYTES), ("queue", MAX_QUEUE_NAME_BYTES)]
)
def test_the_byte_limits_hold_in_the_model_and_in_the_documented_validator(
    field: str, limit: int
) -> None:
    validator_type = _documented_python_validator()
    validator = validator_type(envelope_schema())
    fits = {**_body(), field: "é" * (limit // 2)}
    too_long = {**_body(), field: "é" * (limit // 2 + 1)}  # within maxLength, over in bytes
    assert len(too_long[field]) <= envelope_schema()["properties"][field]["maxLength"]
    assert not list(_validator(envelope_schema()).iter_errors(too_long)), "maxLength counts chars"
    validator.validate(fits)
    Envelope.decode(json.dumps(fits).encode())
    errors = [e.message for e in validator.iter_errors(too_long)]
    assert errors == [f"longer than {limit} UTF-8 bytes"], errors
    with pytest.raises(DecodeError, match=f"{field}: longer than {limit} UTF-8 bytes"):
        Envelope.decode(json.dumps(too_long).encode())
    assert f"{field}` ({limit})" in PROTOCOL, "protocol.md states the limit"


# -- the protocol's version and its changelog ---------------------------------------------

#: The schemas a changelog entry fingerprints: what the protocol itself fixes (a payload
#: schema is its job model's; the keywords it may carry are in keywords.json).
FINGERPRINTED = ("envelope.json", "keywords.json")


def _changelog() -> list[tuple[tuple[int, int], dict[str, str]]]:
    """Each entry of docs/protocol-changelog.md, newest first: its version and the
    fingerprints it records."""
    entries = []
    for section in re.split(r"^## ", CHANGELOG.read_text(), flags=re.MULTILINE)[1:]:
        heading = re.match(r"(\d+)\.(\d+) \(\d{4}-\d{2}-\d{2}\)\n", section)
        assert heading is not None, f"an entry's heading is 'MAJOR.MINOR (date)': {section[:40]!r}"
        prints = re.findall(r"^\| `([a-z]+\.json)` \| `([0-9a-f]{16})` \|$", section, re.M)
        version = (int(heading.group(1)), int(heading.group(2)))
        entries.append((version, dict(prints)))
    return entries


def test_the_schemas_are_the_newest_changelog_entrys_version_and_fingerprints() -> None:
    (newest, prints), *_ = _changelog()
    assert f"{newest[0]}.{newest[1]}" == PROTOCOL_VERSION, "PROTOCOL_VERSION is the newest"
    assert newest[0] == Envelope.model_fields["v"].default, "MAJOR is the envelope's v"
    now = {name: fingerprint(json.loads((SCHEMA_DIR / name).read_text())) for name in FINGERPRINTED}
    assert prints == now, (
        f"docs/schema/ changed what a validator sees (fingerprints now {now}): announce it "
        f"in docs/protocol-changelog.md as version {newest[0]}.{newest[1] + 1} with these "
        "fingerprints, say whether a strict validator refuses anything it accepted, and "
        "set PROTOCOL_VERSION in queuey_core/schema.py"
    )
    for path in sorted(SCHEMA_DIR.glob("**/*.json")):
        assert json.loads(path.read_text())["$comment"] == VERSION_COMMENT, path


def test_every_changelog_entry_is_a_newer_version_that_changed_the_wire() -> None:
    entries = _changelog()
    versions = [version for version, _ in entries]
    assert versions == sorted(set(versions), reverse=True), "newest first, each once"
    for (version, prints), (_, older) in itertools.pairwise(entries):
        assert prints != older, f"{version}: a version whose fingerprints did not change"
    assert all("envelope.json" in prints for _, prints in entries)
    assert "protocol-changelog.md" in PROTOCOL, "protocol.md links to its changelog"
    assert f"`queuey wire protocol {PROTOCOL_VERSION}`" in PROTOCOL, "and names the version"


def test_a_fingerprint_sees_what_a_validator_sees_and_nothing_else() -> None:
    schema = envelope_schema()
    base = fingerprint(schema)
    reworded = json.loads(json.dumps(schema))
    reworded["properties"]["queue"]["description"] = "Reworded."
    reworded["$comment"] = "another version's comment"
    assert fingerprint(reworded) == base, "annotations are not the wire"
    for change in (
        {"x-queuey-new-keyword": True},  # a strict validator refuses the schema
        {"maxLength": 100},  # a tighter limit refuses bodies
        {"pattern": "^[a-z]+$"},
    ):
        changed = json.loads(json.dumps(schema))
        changed["properties"]["queue"].update(change)
        assert fingerprint(changed) != base, change
    titled = {"properties": {"title": {"type": "string"}}}
    assert fingerprint(titled) != fingerprint({"properties": {}}), "a field named title counts"
