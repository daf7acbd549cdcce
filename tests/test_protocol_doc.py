"""docs/protocol.md tells other languages what to send: its examples must be the code's."""

from __future__ import annotations

import re
from pathlib import Path

from queuey_core import Envelope
from queuey_core import QueueConfig
from queuey_core.backends.rabbitmq import topology
from queuey_core.limits import MAX_QUEUE_NAME_BYTES
from queuey_core.queues import QueueKind

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
    documented = set(re.findall(r"^\| `(x-queuey-[a-z-]+)` \|", DOC, re.MULTILINE))
    assert documented == set(headers)


def test_the_example_envelope_is_one() -> None:
    example = re.search(r"```json\n(.*?)```", DOC, re.DOTALL)
    assert example is not None
    env = Envelope.decode(example.group(1).encode())
    assert (env.v, env.job_type, env.payload) == (1, "greet", {"name": "ada"})


def test_the_cli_names_the_unroutable_queue_the_backend_declares() -> None:
    from queuey_cli import dlq  # noqa: PLC0415

    assert dlq.UNROUTABLE == topology.UNROUTABLE
    assert f"`{topology.UNROUTABLE}`" in DOC
