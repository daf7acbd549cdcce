"""``queuey workers``: bad options, and what it prints, without a broker.

Bad input is checked against an unreachable broker: exit 2 proves nothing connected.
The output tests give the command a MemoryBackend whose worker answers its control
channel (a broker's answers are the integration tests'), plus a rogue "worker" whose
reply holds escape sequences and Rich markup, which must be shown literally.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli import workers as workers_cli
from queuey_cli.main import app
from queuey_core import MemoryBackend
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core.control import VERSION
from queuey_core.control import Command
from queuey_core.control import ControlReply
from queuey_core.control import worker_statuses
from tests.support import start
from tests.support import wait_for


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["workers", "--timeout", "0"], "--timeout must be more than 0 seconds"),
        (["workers", "--timeout", "soon"], "--timeout: 'soon' is not a duration"),
        (["workers", "--timeout", "5m"], "--timeout: at most 60s"),
        (["workers", "--pid", "zero"], "Invalid value for '--pid'"),
        (["workers", "shutdown"], "say --all to stop every one"),
        (["workers", "shutdown", "--all", "--host", "a"], "--all stops every worker"),
        (["workers", "shutdown", "--pid", "0"], "--pid"),
        (["workers", "shutdown", "--pid", "1", "--timeout", "-1s"], "--timeout"),
    ],
)
def test_a_bad_option_is_one_line_and_exit_2_before_connecting(
    offline: Path, args: list[str], says: str
) -> None:
    code, out_text, err = run("--config", str(offline), *args)
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    assert says in lines[0]
    assert out_text == ""


def test_an_unreachable_broker_is_one_line_and_exit_1(offline: Path) -> None:
    code, _, err = run("--config", str(offline), "workers")
    assert code == 1
    assert "cannot reach RabbitMQ at amqp://guest:***@127.0.0.1:1/" in err
    assert "s3cret" not in err


class _Kept(MemoryBackend):
    """A MemoryBackend the command cannot close (the test's worker runs on it)."""

    def close(self) -> None:
        pass


@pytest.fixture
def fleet(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryBackend]:
    """One real worker on a MemoryBackend, and a rogue reply with hostile text in it."""
    backend = _Kept()
    worker = Worker(backend, QueueSet([QueueConfig("default", prefetch=3)]), [])
    running = start(worker, None)
    wait_for(lambda: len(worker_statuses(backend, timeout=0)) == 1)
    [real] = worker_statuses(backend, timeout=0)
    rogue = real.model_copy(
        update={"id": "x:1:y", "host": "evil\x1b[2J[red]host[/]", "pid": 1, "queues": ("q\tq",)}
    )
    reply = ControlReply(v=VERSION, command=Command.STATUS, worker=rogue).encode()
    server = backend.serve_control(lambda _body: reply)
    monkeypatch.setattr(workers_cli, "backend", lambda _settings: backend)
    yield backend
    server.close()
    running.stop()


def test_piped_it_prints_a_header_and_a_tab_separated_line_a_worker(
    offline: Path, fleet: MemoryBackend
) -> None:
    code, printed, _ = run("--config", str(offline), "workers")
    assert code == 0
    header, *rows = printed.splitlines()
    assert header.split("\t") == list(workers_cli.FIELDS)
    assert len(rows) == 2
    rogue = next(r.split("\t") for r in rows if r.startswith("evil"))
    assert rogue[0] == "evil\\x1b[2J[red]host[/]", "escaped, and never read as markup"
    assert rogue[3] == "q\\tq", "a tab in a value cannot shift the columns"


def test_on_a_terminal_it_prints_a_table_with_hostile_text_shown_literally(
    offline: Path, fleet: MemoryBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("queuey_cli.output.is_terminal", lambda: True)
    code, printed, _ = run("--config", str(offline), "workers")
    assert code == 0
    assert "┃ worker" in printed
    assert "\x1b[2J" not in printed
    assert "[red]" in printed, "markup is shown as text"


def test_json_is_the_documented_fields_exactly(offline: Path, fleet: MemoryBackend) -> None:
    code, printed, _ = run("--config", str(offline), "workers", "--json")
    assert code == 0
    found = json.loads(printed)
    assert [s["pid"] for s in found] == sorted(s["pid"] for s in found)
    assert set(found[0]) == {
        "id",
        "host",
        "pid",
        "version",
        "state",
        "queues",
        "job_types",
        "concurrency",
        "running",
        "in_flight",
        "succeeded",
        "failed",
        "retried",
        "deferred",
        "dead_lettered",
        "timed_out",
        "settle_failures",
        "stuck_job_threads",
        "started_at",
        "uptime",
        "supervisor_pid",
        "child",
        "paused",
    }
    assert "evil\x1b[2J[red]host[/]" in [s["host"] for s in found], "JSON is exact"


def test_several_workers_are_added_up_on_stderr(offline: Path, fleet: MemoryBackend) -> None:
    code, printed, err = run("--config", str(offline), "workers")
    assert code == 0
    assert "total" not in printed, "piped records stay records"
    [real] = [s for s in worker_statuses(fleet, timeout=0) if s.pid != 1]
    assert f"total: 2 workers: running 0/{real.concurrency * 2}, succeeded 0, failed 0" in err


def test_the_processes_of_a_supervisor_are_counted_as_such() -> None:
    backend = MemoryBackend()
    worker = Worker(backend, QueueSet([QueueConfig("default", prefetch=3)]), [])
    running = start(worker, None)
    try:
        wait_for(lambda: len(worker_statuses(backend, timeout=0)) == 1)
        [one] = worker_statuses(backend, timeout=0)
    finally:
        running.stop()
    children = [
        one.model_copy(update={"pid": pid, "supervisor_pid": 7, "child": pid - 10, "succeeded": 4})
        for pid in (10, 11)
    ]
    line = workers_cli.totals([one, *children])
    assert line.startswith(
        "total: 3 workers (2 of them the processes of 1 --processes supervisors)"
    )
    assert "succeeded 8" in line
