"""On RabbitMQ the job store is off by default: every command that needs one says so in
one line, with how to configure one, and exits 2 before connecting to anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core.settings import NO_STORE


@pytest.mark.parametrize(
    "args",
    [
        ["jobs"],
        ["job", "6f1c1c1e-8a52-4a39-9d43-0c1c3f7b7a10"],
        ["enqueue", "greet", '{"name": "a"}', "--wait"],
    ],
)
def test_without_a_store_the_command_says_how_to_add_one(
    runner: CliRunner, offline: Path, args: list[str]
) -> None:
    result = runner.invoke(app, ["--config", str(offline), *args])
    assert result.exit_code == 2, result.stderr
    assert NO_STORE in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stdout == "", "nothing was enqueued"


def test_a_store_url_of_no_known_kind_is_a_config_error(runner: CliRunner, offline: Path) -> None:
    result = runner.invoke(
        app, ["--config", str(offline), "jobs"], env={"QUEUEY_RESULTS__URL": "redis://x"}
    )
    assert result.exit_code == 2
    assert "results.url" in result.stderr
    assert "must start with one of sqlite://" in result.stderr


def test_the_store_password_is_redacted_in_config_show(runner: CliRunner, offline: Path) -> None:
    result = runner.invoke(
        app,
        ["--config", str(offline), "config", "show", "--json"],
        env={"QUEUEY_RESULTS__URL": "postgresql://u:hunter2@db/jobs"},
    )
    assert result.exit_code == 0, result.stderr
    assert "hunter2" not in result.stdout
    assert "postgresql://u:***@db/jobs" in result.stdout
