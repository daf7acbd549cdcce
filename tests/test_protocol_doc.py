"""docs/protocol.md tells other languages what to send: its examples must be the code's."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from queuey_core import DecodeError
from queuey_core import Envelope
from queuey_core import QueueConfig
from queuey_core import job_id_for
from queuey_core.backends.rabbitmq import cancels
from queuey_core.backends.rabbitmq import control
from queuey_core.backends.rabbitmq import election
from queuey_core.backends.rabbitmq import messages
from queuey_core.backends.rabbitmq import schedule_state
from queuey_core.backends.rabbitmq import topology
from queuey_core.limits import MAX_QUEUE_NAME_BYTES
from queuey_core.producer import JOB_ID_NAMESPACE
from queuey_core.queues import QueueKind
from queuey_core.worker.admission import refusal
from queuey_core.worker.redelivery import MAX_REDELIVERIES

DOC_DIR = Path(__file__).resolve().parent.parent / "docs"
DOC = (DOC_DIR / "protocol.md").read_text()


def test_the_delay_routing_key_example_is_the_ladders() -> None:
    assert topology.delay_routing_key(1500, "alpha") in DOC.splitlines()


def test_the_policy_command_is_the_one_a_worker_logs() -> None:
    assert topology.unroutable_policy_command("/") in DOC


def test_the_queue_arguments_are_queueys() -> None:
    classic = topology.queue_arguments(QueueConfig("Q", max_priority=7))
    assert classic == {
        "x-queue-type": "classic",
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "Q.dlq",
        "x-max-priority": 7,
    }
    quorum = topology.queue_arguments(QueueConfig("Q", kind=QueueKind.QUORUM))
    assert quorum == {
        "x-queue-type": "quorum",
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "Q.dlq",
    }
    assert topology.dead_letter_queue_arguments() == {"x-queue-type": "classic"}
    for key in classic:
        assert f"`{key}:" in DOC, key
    assert f"at most {MAX_QUEUE_NAME_BYTES} bytes" in DOC
    assert topology.deliver_binding("Q") == "*." * 36 + "Q"


def test_a_dead_letter_queue_is_of_its_queues_kind_as_the_pages_say() -> None:
    assert topology.dead_letter_queue_arguments(QueueKind.QUORUM) == {"x-queue-type": "quorum"}
    assert topology.dead_letter_queue_arguments(QueueKind.CLASSIC) == {"x-queue-type": "classic"}
    assert "the same as `Q`'s" in DOC
    for page in [DOC_DIR.parent / "README.md", *sorted(DOC_DIR.glob("**/*.md"))]:
        text = " ".join(page.read_text().split())
        assert "dead-letter queue is always classic" not in text, f"{page}: beta.dlq is quorum"


def test_the_dead_letter_headers_are_the_documented_ones() -> None:
    headers = topology.dead_letter_headers("why", queue="Q", dead_at=1, attempt=2)
    section = DOC.split("\n## Dead letters\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(x-queuey-[a-z-]+)` \|", section, re.MULTILINE))
    assert documented == set(headers)


def test_the_example_envelope_is_one() -> None:
    example = re.search(r"```json\n(.*?)```", DOC, re.DOTALL)
    assert example is not None
    env = Envelope.decode(example.group(1).encode())
    assert (env.v, env.job_type, env.payload) == (1, "greet", {"name": "ada"})


def test_the_cli_names_the_unroutable_queue_the_backend_declares() -> None:
    from queuey_cli import dlq_find  # noqa: PLC0415

    assert dlq_find.UNROUTABLE == topology.UNROUTABLE
    assert f"`{topology.UNROUTABLE}`" in DOC


def test_the_job_id_namespace_and_its_worked_example_are_the_codes() -> None:
    namespace = re.search(r"^JOB_ID_NAMESPACE = ([0-9a-f-]{36})$", DOC, re.MULTILINE)
    assert namespace is not None, "protocol.md publishes the namespace"
    assert uuid.UUID(namespace.group(1)) == JOB_ID_NAMESPACE
    example = re.search(r'^uuid5\(JOB_ID_NAMESPACE, "([^"]+)"\) = ([0-9a-f-]{36})$', DOC, re.M)
    assert example is not None, "protocol.md works an example"
    key, documented = example.groups()
    assert key == "order-17"
    assert job_id_for(key) == uuid.uuid5(JOB_ID_NAMESPACE, key) == uuid.UUID(documented)
    assert f'v5("{key}", "{JOB_ID_NAMESPACE}")' in DOC, "the Node line names the same namespace"


def documented_job_id_spellings() -> list[str]:
    """The examples of the table of job id spellings in protocol.md."""
    section = DOC.split("### Job ids", 1)[1].split("**Ids made from keys**", 1)[0]
    return re.findall(r"^\| .+ \| `([^`]+)` \|$", section, re.MULTILINE)


def test_every_documented_job_id_spelling_is_read_as_the_same_id() -> None:
    spellings = documented_job_id_spellings()
    assert len(spellings) == 4, spellings
    canonical = uuid.UUID(spellings[0])
    for text in spellings:
        env = Envelope.decode(
            b'{"job_id": "%s", "job_type": "t", "queue": "q", "enqueued_at": 0, "payload": {}}'
            % text.encode()
        )
        assert env.job_id == canonical, text
        assert f'"job_id":"{canonical}"' in env.encode().decode(), "carried on canonical"
        assert job_id_for(text) == canonical, f"a key spelling {text} is that id"


def test_the_amqp_properties_table_is_what_queuey_sets() -> None:
    env = Envelope(
        job_id=uuid.uuid4(), job_type="greet", queue="q", priority=3, enqueued_at=1_500, payload={}
    )
    props = messages.properties(env)
    section = DOC.split("\n## AMQP properties\n", 1)[1].split("\n## ", 1)[0]
    assert f"`properties()` in `backends/rabbitmq/{messages.__name__.rsplit('.', 1)[1]}.py`" in (
        " ".join(section.split())
    )
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (.+?) \|", section, re.MULTILINE))
    assert set(rows) == {
        "delivery_mode",
        "content_type",
        "message_id",
        "type",
        "timestamp",
        "priority",
        "headers",
    }
    assert (props.delivery_mode, props.content_type) == (2, "application/json")
    assert rows["delivery_mode"].startswith("`2`")
    assert rows["content_type"] == "`application/json`"
    assert (props.message_id, props.type) == (str(env.job_id), "greet")
    assert props.timestamp == 1
    assert "`enqueued_at // 1000`" in rows["timestamp"]
    assert props.priority == 3
    assert messages.properties(env.model_copy(update={"priority": 0})).priority is None
    assert "omitted when 0" in rows["priority"]


def test_rabbitmq_md_lists_every_object_queuey_creates_on_the_broker() -> None:
    page = (DOC_DIR / "rabbitmq.md").read_text()
    table = page.split("## What queuey creates on the broker", 1)[1].split("\n\n", 2)[1]
    names = set(re.findall(r"^\| `([^`]+)`", table, re.MULTILINE))
    assert names >= {
        "<queue>",
        topology.dead_letter_name("<queue>"),
        topology.delay_name(0),
        topology.DELIVER_EXCHANGE,
        topology.UNROUTABLE,
        election.LEADER_QUEUE,
        f"{schedule_state.STATE_PREFIX}<name>",
        control.EXCHANGE,
        cancels.STREAM,
        f"queuey.lock.{topology.dead_letter_name('<queue>')}",
    }, names
    assert f"`x-max-age: {cancels.MAX_AGE}`" in table
    last = topology.delay_name(topology.DELAY_LEVELS - 1)
    assert f"`{topology.delay_name(0)}` … `{last}`" in table, "every level of the ladder"


def test_the_refusals_protocol_md_quotes_are_the_workers() -> None:
    text = " ".join(DOC.split())

    def env(job_type: str, queue: str, priority: int = 0) -> Envelope:
        return Envelope(
            job_id=uuid.uuid4(),
            job_type=job_type,
            queue=queue,
            priority=priority,
            enqueued_at=0,
            payload={},
        )

    alpha = QueueConfig("alpha", max_priority=10)
    beta = QueueConfig("beta")
    quoted = [
        refusal(env("nap", "alpha"), "alpha", beta),
        refusal(env("greet", "alpha", 11), "alpha", alpha),
        refusal(env("nap", "beta", 1), "beta", beta),
    ]
    for reason in quoted:
        assert reason is not None
        assert f"`{reason}`" in text, reason
    assert f"`redelivered {MAX_REDELIVERIES} times without being settled`" in text
    body = (
        b'{"job_id": "%s", "job_type": "t", "queue": "q", "payload": {}}'
        % str(uuid.uuid4()).encode()
    )
    with pytest.raises(DecodeError) as refused:
        Envelope.decode(body)
    assert f"`{refused.value}`" in text, refused.value
