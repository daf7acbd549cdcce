"""The command line as scripts drive it, against RabbitMQ in a virtual host of its own:
queues not declared yet, one JSON document per read command, plain text when piped, and
``queues --watch`` in a real terminal (a pty) and in a pipe, ended by SIGINT.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pika
import pytest

from queuey_core import Envelope
from queuey_core import QueueConfig
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq.messages import properties
from queuey_core.backends.rabbitmq.topology import dead_letter_headers
from queuey_core.handlers import discover
from tests import harness
from tests.integration.broker import add_vhost
from tests.integration.broker import own_vhost
from tests.integration.broker import rabbitmqctl
from tests.support import bash

pytestmark = pytest.mark.integration

QUEUEY = str(Path(sys.executable).parent / "queuey")
VHOST = "queuey-cli-scripting" if harness.VHOST == "/" else f"{harness.VHOST}.scripting"
URL = (
    f"amqp://guest:guest@{harness.BROKER_HOST}:{harness.BROKER_PORT}/"
    f"{urllib.parse.quote(VHOST, safe='')}"
)
#: ``never`` is never declared; ``second`` is, in some tests. The example handlers'
#: queues are added whatever they are named, so that ``queuey handlers`` has them.
CONFIG = """
[broker]
url = "{url}"
connect_timeout = "5s"

[queues.never]
prefetch = 1

[queues.second]
prefetch = 4
max_priority = 5
"""


@pytest.fixture
def config(tmp_path: Path) -> Iterator[Path]:
    """A fresh virtual host (nothing declared, not even the delay ladder) and its config."""
    with own_vhost(VHOST):
        extra = sorted({d.handler.job_type.QUEUE for d in discover()} - {"never", "second"})
        path = tmp_path / "queuey.toml"
        path.write_text(CONFIG.format(url=URL) + "".join(f"[queues.{n}]\n" for n in extra))
        yield path


def queuey(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed script, piped: stdout is not a terminal."""
    done = subprocess.run(
        [QUEUEY, "--config", str(config), *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stdout + done.stderr
    return done


def declare_second(ready: int = 0, dead: int = 0) -> list[str]:
    """Declare ``second`` (and the ladder), with ``ready`` jobs and ``dead`` dead letters;
    the dead letters' job ids."""
    broker = RabbitMQBackend(URL)
    try:
        broker.declare([QueueConfig("second", prefetch=4, max_priority=5)])
        for _ in range(ready):
            broker.publish(envelope())
    finally:
        broker.close()
    ids = []
    conn = pika.BlockingConnection(pika.URLParameters(URL))
    try:
        ch = conn.channel()
        for _ in range(dead):
            env = envelope()
            headers = dead_letter_headers(
                "fatal error: x", queue="second", dead_at=1_700_000_000_000
            )
            ch.basic_publish("", "second.dlq", env.encode(), properties(env, headers))
            ids.append(str(env.job_id))
    finally:
        conn.close()
    return ids


def envelope() -> Envelope:
    return Envelope(
        job_id=uuid.uuid4(), job_type="greet", queue="second", enqueued_at=1, payload={}
    )


def by_name(doc: dict[str, list[dict[str, object]]]) -> dict[object, dict[str, object]]:
    return {q["name"]: q for q in doc["queues"]}


def test_on_a_fresh_broker_queues_and_dlq_name_each_queue_not_declared_yet(
    config: Path,
) -> None:
    done = queuey(config, "queues", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert by_name(doc)["never"]["exists"] is False
    assert by_name(doc)["second"] == {
        "name": "second",
        "exists": False,
        "ready": None,
        "unacked": None,
        "consumers": None,
        "dead_letters": None,
        "paused": False,
    }
    assert doc["held"] is None, "not even the delay ladder exists"

    done = queuey(config, "queues")
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    assert rows[0] == ["name", "ready", "unacked", "consumers", "dead_letters", "paused"]
    assert {row[0]: row[1] for row in rows[1:]}["never"] == "not declared yet"
    assert "held in the delay ladder (all queues): not declared yet" in done.stderr

    done = queuey(config, "dlq", "list")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "handle\tjob_type\tdlq_of\tattempt\treason\tdead_at\n"
    assert "queue 'never': not declared yet, no dead letters" in done.stderr
    assert "queue 'second': not declared yet, no dead letters" in done.stderr

    missing = str(uuid.uuid4())
    done = queuey(config, "dlq", "requeue", missing)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: no dead letter with job id {missing}"


def test_a_queue_not_declared_yet_hides_nothing_after_it(config: Path) -> None:
    # `never` comes first: its 404 closes the channel the check of `second` would use.
    [dead_id] = declare_second(ready=2, dead=1)
    done = queuey(config, "queues", "--json")
    assert done.returncode == 0, done.stderr
    queues = by_name(json.loads(done.stdout))
    assert queues["never"]["exists"] is False
    assert queues["second"] == {
        "name": "second",
        "exists": True,
        "ready": 2,
        "unacked": None,
        "consumers": 0,
        "dead_letters": 1,
        "paused": False,
    }
    assert json.loads(done.stdout)["held"] == 0

    done = queuey(config, "dlq", "list", "--json")
    assert done.returncode == 0, done.stderr
    [dead] = json.loads(done.stdout)
    assert (dead["job_id"], dead["dlq_of"], dead["reason"]) == (dead_id, "second", "fatal error: x")

    missing = str(uuid.uuid4())
    done = queuey(config, "dlq", "requeue", missing, dead_id)
    assert done.returncode == 2, "one of the two is not there"
    assert done.stdout.strip() == "requeued 1"
    assert done.stderr.strip() == f"error: no dead letter with job id {missing}"


def test_every_read_command_prints_one_json_document_and_nothing_else(config: Path) -> None:
    [dead_id] = declare_second(dead=1)
    documents = {
        "queues": queuey(config, "queues", "--json"),
        "handlers": queuey(config, "handlers", "--json"),
        "dlq list": queuey(config, "dlq", "list", "--json", "--queue", "second"),
        "dlq show": queuey(config, "dlq", "show", dead_id, "--json"),
        "config show": queuey(config, "config", "show", "--json"),
    }
    for command, done in documents.items():
        assert done.returncode == 0, (command, done.stderr)
        json.loads(done.stdout)  # the whole of stdout is one document
    assert set(json.loads(documents["queues"].stdout)) == {
        "queues",
        "held",
        "unroutable",
        "unacked_error",
    }
    assert {h["job_type"] for h in json.loads(documents["handlers"].stdout)} == {
        d.handler.job_type.NAME for d in discover()
    }
    shown = json.loads(documents["dlq show"].stdout)
    assert {"job_id", "job_type", "queue", "attempt", "priority", "enqueued_at", "payload"} <= set(
        shown
    )
    assert "guest:***@" in documents["config show"].stdout


def test_piped_listings_are_plain_text(config: Path) -> None:
    declare_second(ready=1, dead=1)
    for args in (["queues"], ["dlq", "list"], ["handlers"]):
        done = queuey(config, *args)
        assert done.returncode == 0, done.stderr
        header, *records = done.stdout.splitlines()
        assert records, args
        assert all(line.count("\t") == header.count("\t") > 0 for line in records), args
        for box in "┃│━─":
            assert box not in done.stdout, args
        assert "\x1b" not in done.stdout, "no colour or cursor codes"


def read_until(fd: int, needle: bytes, seen: bytearray, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while needle not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                seen.extend(os.read(fd, 65536))
            except OSError:  # the other end closed
                break
    return needle in seen


def test_watch_in_a_terminal_refreshes_a_live_table_until_ctrl_c(config: Path) -> None:
    declare_second(ready=3)
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [QUEUEY, "--config", str(config), "queues", "--watch", "--interval", "0.3"],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
    )
    os.close(secondary)
    seen = bytearray()
    try:
        assert read_until(primary, b"sample 2 at", seen, 60), seen.decode(errors="replace")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        read_until(primary, b"\x00never", seen, 0.5)  # whatever is left
        os.close(primary)
    text = seen.decode(errors="replace")
    assert "┏━━" in text, "a Rich table"
    assert "ready/s" in text
    assert "Traceback" not in text


@contextmanager
def piped_watch(config: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``queuey queues --watch --interval 0.2``, its output piped; killed if still running
    when the block ends."""
    proc = subprocess.Popen(
        [QUEUEY, "--config", str(config), "queues", "--watch", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_watch_piped_prints_records_each_interval_until_sigint(config: Path) -> None:
    declare_second(ready=3)
    with piped_watch(config) as proc:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().decode()]  # the header
        while sum("\tsecond\t" in line for line in lines) < 2:  # two samples
            lines.append(proc.stdout.readline().decode())
            assert lines[-1], "the watch ended by itself"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err.decode()
    header = lines[0].rstrip("\n").split("\t")
    assert header[:2] == ["time", "name"]
    assert header[-1] == "held"
    rows = [dict(zip(header, line.rstrip("\n").split("\t"), strict=True)) for line in lines[1:]]
    ours = [(r["name"], r["ready"]) for r in rows if r["name"] in ("never", "second")]
    assert ours == [("never", "not declared yet"), ("second", "3")] * 2
    [first, again] = [r for r in rows if r["name"] == "second"]
    assert (first["ready_per_s"], again["ready_per_s"]) == ("-", "0/s"), "nothing changed"
    assert first["time"] <= again["time"]


def test_watch_shows_a_broker_it_lost_and_carries_on_when_it_is_back(config: Path) -> None:
    # The broker "goes away" for this watch only: its virtual host is deleted (RabbitMQ
    # closes the watch's connection and refuses new ones), then made again.
    declare_second(ready=1)
    out, err = bytearray(), bytearray()
    with piped_watch(config) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        assert read_until(proc.stdout.fileno(), b"\tsecond\t1\t", out, 60), out
        rabbitmqctl("delete_vhost", VHOST)
        assert read_until(proc.stderr.fileno(), b"broker lost at", err, 60), err
        add_vhost(VHOST)
        back = len(out)
        assert read_until(proc.stdout.fileno(), b"\tsecond\tnot declared yet\t", out, 60), out
        assert len(out) > back
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    assert b"Traceback" not in out + err
    assert b"asking again every 0.2s" in err


def test_a_reader_that_goes_away_ends_the_watch_quietly(config: Path) -> None:
    # `queuey queues --watch | head -3`: once head has its lines, the watch has no reader.
    done = bash(
        f"'{QUEUEY}' --config '{config}' queues --watch --interval 0.1 | head -3", timeout=120
    )
    assert len(done.stdout.splitlines()) == 3
    assert done.stderr == "", "no traceback, no 'unexpected failure'"
