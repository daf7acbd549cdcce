"""A second plugin whose job types are bound to a queue the configuration does not
declare stops only what needs that queue: enqueueing its job types, or consuming it.

The plugin is a distribution of its own (a ``.dist-info`` folder on ``sys.path``), beside
the installed example handlers; the broker in ``offline`` cannot be reached, so exit 1
("cannot reach RabbitMQ") proves a command got past its checks, and exit 2 that it
stopped before connecting.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core import ConfigError
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core.handlers import check_queues
from queuey_core.handlers import discover
from queuey_core.handlers import split_by_queue

PLUGIN = """
from typing import ClassVar

from queuey_core import Job, JobContext, handler


class Audit(Job):
    NAME: ClassVar[str] = "elsewhere.audit"
    QUEUE: ClassVar[str] = "elsewhere"
    what: str


@handler
def audit(job: Audit, ctx: JobContext) -> None:
    pass
"""

WHY = (
    "job type 'elsewhere.audit' (entry point 'elsewhere' of distribution "
    "'queuey-test-elsewhere') is bound to queue 'elsewhere', which the configuration does "
    "not declare (declared: alpha, beta)"
)


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Install the second plugin for this test."""
    folder = tmp_path / "plugin"
    dist = folder / "queuey_test_elsewhere-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: queuey-test-elsewhere\nVersion: 0\n"
    )
    (dist / "entry_points.txt").write_text("[queuey.handlers]\nelsewhere = queuey_test_elsewhere\n")
    (folder / "queuey_test_elsewhere.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(folder))


def run(offline: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["--config", str(offline), *args])
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning: ")]


@pytest.mark.usefixtures("elsewhere")
def test_the_other_commands_run_and_warn_once(offline: Path) -> None:
    code, out, err = run(offline, "handlers", "--json")
    assert code == 0, err
    assert "greet" in out, "the example plugin's job types are listed"
    assert warnings(err) == [f"warning: {WHY}: it can be neither enqueued nor run"]

    code, _, err = run(offline, "enqueue", "greet", '{"name": "ada"}')
    assert code == 1, err
    assert "cannot reach RabbitMQ" in err, "past every check, it tried to publish"
    assert len(warnings(err)) == 1

    code, _, err = run(offline, "worker", "--queues", "alpha,beta", "--burst")
    assert code == 1, err
    assert "cannot reach RabbitMQ" in err, "it started consuming alpha and beta"
    assert len(warnings(err)) == 1


@pytest.mark.usefixtures("elsewhere")
def test_what_needs_the_missing_queue_is_refused_before_connecting(offline: Path) -> None:
    code, _, err = run(offline, "enqueue", "elsewhere.audit", '{"what": "x"}')
    assert code == 2, err
    assert err.splitlines()[-1] == f"error: {WHY}"

    code, _, err = run(offline, "worker", "--queues", "elsewhere")
    assert code == 2, err
    assert "--queues: unknown queue 'elsewhere' (configured: alpha, beta)" in err


@pytest.mark.usefixtures("elsewhere")
def test_the_library_splits_the_plugins_and_check_queues_stays_strict() -> None:
    queues = QueueSet([QueueConfig("alpha"), QueueConfig("beta")])
    found = discover()
    usable, unusable = split_by_queue(found, queues)
    assert {d.handler.job_type.NAME for d in usable} == {
        "greet",
        "flaky",
        "snooze",
        "doomed",
        "nap",
    }
    assert unusable == {"elsewhere.audit": WHY}
    with pytest.raises(ConfigError, match="bound to queue 'elsewhere'"):
        check_queues(found, queues)
