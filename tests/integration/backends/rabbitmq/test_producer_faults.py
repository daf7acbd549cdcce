"""The producer when the broker fails, on a node of our own (tests/integration/own_node.py).

What each test checks is that the caller was told the truth: a job reported unknown
may turn up, a job reported not enqueued never does, and a confirmed one is there.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from queuey_cli.enqueue_file import BATCH
from queuey_cli.enqueue_file import IN_FLIGHT
from queuey_core import EnqueueUnknownError
from queuey_core import Job
from queuey_core import NotEnqueuedError
from queuey_core import Producer
from queuey_core import PublishFailure
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import job_id_for
from queuey_core.backends.rabbitmq import RabbitMQBackend
from tests.integration import own_node as own_node_module
from tests.integration.broker import take_job_ids
from tests.integration.own_node import OwnNode
from tests.support import counts_line
from tests.support import wait_for

pytestmark = pytest.mark.integration

QNAME = "prodfaults"
QUEUES = QueueSet([QueueConfig(QNAME, prefetch=10)])

own_node = own_node_module.own_node

#: Seconds an unknown publish is given to land once the alarm is cleared.
LANDS_WITHIN = 30.0


class Work(Job):
    NAME: ClassVar[str] = "it.prodfaults.work"
    QUEUE: ClassVar[str] = QNAME
    n: int


@pytest.fixture
def node(own_node: OwnNode) -> Iterator[OwnNode]:
    """The node, running, without an alarm or queues, before and after each test."""
    own_node.reset()
    yield own_node
    own_node.reset()


def job_ids_on(node: OwnNode, queue: str) -> list[uuid.UUID]:
    """Take every message off ``queue`` on the node: their job ids, duplicates included."""
    return take_job_ids(queue, node.url)


def ready(node: OwnNode, queue: str = QNAME) -> int:
    for line in node.ctl("list_queues", "name", "messages").splitlines():
        name, _, count = line.partition("\t")
        if name == queue:
            return int(count)
    return 0


def lands(node: OwnNode, count: int) -> None:
    """Wait until ``count`` messages are ready on the test's queue; failing, say what the
    node shows (a publish lost with its connection reads differently from a slow node)."""
    try:
        wait_for(lambda: ready(node) == count, timeout=LANDS_WITHIN)
    except AssertionError:
        alarms = node.ctl("eval", "rabbit_alarm:get_alarms().").strip()
        raise AssertionError(
            f"{count} expected ready {LANDS_WITHIN:g}s after the alarm was cleared; the node "
            f"shows {ready(node)} ready, connections {node.connection_states()}, "
            f"alarms {alarms}"
        ) from None


def test_an_enqueue_under_a_memory_alarm_is_unknown_within_publish_timeout(
    node: OwnNode,
) -> None:
    rabbit = RabbitMQBackend(node.url, publish_timeout=3, recovery_timeout=10)
    producer = Producer(rabbit, QUEUES)
    node.alarm()
    started = time.monotonic()
    with pytest.raises(EnqueueUnknownError) as caught:
        producer.enqueue(Work(n=1), job_id="alarm-1")
    took = time.monotonic() - started
    error = caught.value
    assert error.reason is PublishFailure.BLOCKED
    assert "RabbitMQ is blocking publishers (memory or disk alarm)" in str(error)
    assert "within 3s" in str(error)
    assert "may or may not be enqueued" in str(error)
    assert error.unknown == (job_id_for("alarm-1"),)
    assert 2.9 <= took <= 4, f"took {took:.2f}s for a publish_timeout of 3s"

    node.clear_alarm()
    # Generous: on CI's loaded cores each rabbitmqctl call takes seconds, and the node
    # reads the held publish only once its memory monitor has seen the new watermark.
    lands(node, 1)
    assert job_ids_on(node, QNAME) == [job_id_for("alarm-1")], "unknown, and there it was"
    rabbit.close()


def test_under_an_alarm_a_batch_sent_is_unknown_and_the_next_one_is_held_back(
    node: OwnNode,
) -> None:
    rabbit = RabbitMQBackend(node.url, publish_timeout=2, recovery_timeout=10)
    producer = Producer(rabbit, QUEUES)
    node.alarm()
    first_ids = [job_id_for(f"first-{i}") for i in range(50)]
    with pytest.raises(EnqueueUnknownError) as first:
        producer.enqueue_many([Work(n=i) for i in range(50)], job_ids=first_ids)
    assert first.value.reason is PublishFailure.BLOCKED
    assert len(first.value.unknown) + len(first.value.not_enqueued) == 50
    assert first.value.unknown, "the broker says it blocks only once a publish arrives"

    second_ids = [job_id_for(f"second-{i}") for i in range(50)]
    started = time.monotonic()
    with pytest.raises(NotEnqueuedError) as second:
        producer.enqueue_many([Work(n=i) for i in range(50)], job_ids=second_ids)
    assert time.monotonic() - started <= 2.5
    assert second.value.reason is PublishFailure.BLOCKED
    assert set(second.value.not_enqueued) == set(second_ids), "held back, never sent"
    assert "held back, not sent within 2s" in str(second.value)

    node.clear_alarm()
    lands(node, len(first.value.unknown))
    rabbit.close()  # nothing held back is sent on the way out either
    on_queue = job_ids_on(node, QNAME)
    assert set(on_queue) == set(first.value.unknown)
    assert not set(on_queue) & set(second_ids), "a job reported not enqueued turned up"


def test_a_broker_that_comes_back_within_recovery_timeout_loses_no_publish(
    node: OwnNode,
) -> None:
    rabbit = RabbitMQBackend(node.url, publish_timeout=15, recovery_timeout=30)
    producer = Producer(rabbit, QUEUES)
    producer.enqueue_many([Work(n=-1)])  # the publisher link is up
    node.alarm()  # so the batch is in flight, unconfirmed, when the broker goes
    total = 3000
    ids = [job_id_for(f"bounce-{i}") for i in range(total)]
    outcome: list[BaseException | None] = []

    def publish() -> None:
        try:
            producer.enqueue_many([Work(n=i) for i in range(total)], job_ids=ids)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=publish)
    thread.start()
    wait_for(lambda: "blocked" in node.connection_states(), timeout=10)
    node.stop_app()
    down = time.monotonic()
    time.sleep(2)  # the broker stays away a while (less than recovery_timeout)
    node.start_app()  # the alarm does not survive a restart
    thread.join(30)
    assert outcome == [None], f"enqueue_many failed: {outcome}"
    assert rabbit.republished >= 1, "the unconfirmed window was sent again"
    took = time.monotonic() - down

    found = Counter(job_ids_on(node, QNAME))
    assert set(ids) <= set(found), "a confirmed job is missing"
    duplicates = sum(found.values()) - len(found)
    assert duplicates <= rabbit.republished
    print(  # shown with -s: what a bounce cost
        f"republished {rabbit.republished}, duplicates {duplicates}, back {took:.1f}s"
    )
    rabbit.close()


def test_a_publisher_waits_for_a_broker_that_is_down_when_it_first_connects(
    node: OwnNode,
) -> None:
    rabbit = RabbitMQBackend(node.url, publish_timeout=5, recovery_timeout=20)
    producer = Producer(rabbit, QUEUES)
    node.stop_app()
    timer = threading.Timer(2, node.start_app)
    timer.start()
    try:
        job_id = producer.enqueue(Work(n=1), job_id="patient")
    finally:
        timer.join()
    assert job_id == job_id_for("patient")
    assert job_ids_on(node, QNAME) == [job_id]
    rabbit.close()


def test_a_broker_away_longer_than_recovery_timeout_is_not_enqueued_and_says_so(
    node: OwnNode,
) -> None:
    rabbit = RabbitMQBackend(node.url, publish_timeout=5, recovery_timeout=3)
    producer = Producer(rabbit, QUEUES)
    node.stop_app()
    started = time.monotonic()
    with pytest.raises(NotEnqueuedError) as caught:
        producer.enqueue_many([Work(n=i) for i in range(10)])
    took = time.monotonic() - started
    assert caught.value.reason is PublishFailure.UNREACHABLE
    assert f"could not reach RabbitMQ at {rabbit.where} for 3s" in str(caught.value)
    assert "memory" not in str(caught.value)
    assert len(caught.value.not_enqueued) == 10
    assert 3 <= took <= 5, f"took {took:.2f}s for a recovery_timeout of 3s"
    node.start_app()
    producer.enqueue(Work(n=11))  # a new publisher link, once the broker is back
    assert ready(node) == 1
    rabbit.close()


# -- the command line ------------------------------------------------------------------

CONFIG = """
[broker]
url = "{url}"
connect_timeout = "2s"
recovery_timeout = "3s"
publish_timeout = "{publish_timeout}"

[queues.alpha]
prefetch = 4
max_priority = 10

# nap, the example handler of long jobs, is bound to beta
[queues.beta]
prefetch = 1
"""


def queuey(config: Path, *args: str) -> list[str]:
    script = Path(sys.executable).with_name("queuey")
    return [str(script), "--config", str(config), "--log-format", "json", *args]


@pytest.fixture
def cli_config(node: OwnNode, tmp_path: Path) -> Path:
    path = tmp_path / "queuey.toml"
    path.write_text(CONFIG.format(url=node.url, publish_timeout="10s"))
    return path


def test_a_cli_enqueue_under_an_alarm_exits_4_and_says_blocking(
    node: OwnNode, tmp_path: Path
) -> None:
    config = tmp_path / "queuey.toml"
    config.write_text(CONFIG.format(url=node.url, publish_timeout="2s"))
    node.alarm()
    started = time.monotonic()
    done = subprocess.run(
        queuey(config, "enqueue", "greet", '{"name": "ada"}', "--job-id", "cli-1"),
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    took = time.monotonic() - started
    assert done.returncode == 4, done.stderr
    assert "blocking publishers" in done.stderr
    assert str(job_id_for("cli-1")) in done.stderr
    assert took < 2 + 3, f"took {took:.1f}s (process start-up included)"
    node.clear_alarm()
    wait_for(lambda: ready(node, "alpha") == 1, timeout=10)


def test_a_file_across_a_long_outage_counts_every_line_and_its_rerun_loses_none(
    node: OwnNode, cli_config: Path, tmp_path: Path
) -> None:
    # More batches than are ever in flight: those behind the failing ones are never sent.
    total = BATCH * (IN_FLIGHT + 1) + 1000
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps({"name": f"n{i}"}) + "\n" for i in range(total)))
    failed = tmp_path / "failed.jsonl"
    node.alarm()  # the first batches go out and wait, unconfirmed
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    args = ["enqueue", "greet", "--file", str(jobs), "--ids-from-lines", "--failed-to", str(failed)]
    proc = subprocess.Popen(
        queuey(cli_config, *args),
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        wait_for(lambda: "blocked" in node.connection_states(), timeout=20)
        node.stop_app()  # and it stays away longer than recovery_timeout (3s)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    node.start_app()

    assert proc.returncode == 4, stderr
    counts = counts_line(stderr)
    assert counts["total"] == total
    assert sum(counts[k] for k in ("confirmed", "unknown", "refused", "not sent")) == total
    assert counts["unknown"] > 0
    assert counts["not sent"] > 0, "the run stopped at the failing batch"
    assert "could not be re-established within 3s" in stderr
    rerun = failed.read_text().splitlines()
    assert len(rerun) == total - counts["confirmed"]

    again = subprocess.run(
        queuey(cli_config, "enqueue", "greet", "--file", str(failed)),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    found = Counter(job_ids_on(node, "alpha"))
    digest = hashlib.sha256(jobs.read_bytes()).hexdigest()
    expected = {job_id_for(f"queuey --file {digest}:{n}") for n in range(1, total + 1)}
    assert set(found) == expected, "every line is on the queue, under its own id"
    duplicates = sum(found.values()) - len(found)
    assert duplicates <= counts["unknown"], "only an unknown job can be there twice"
