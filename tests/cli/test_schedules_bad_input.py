"""Bad schedules and bad scheduler arguments: one line naming them, exit 2, no connection.

The broker in these configs cannot be reached, so exit 2 (not 1) also proves that
nothing tried to connect.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from tests.cli.conftest import BASE
from tests.cli.conftest import UNREACHABLE

GOOD = """
[schedules.hello]
job = "greet"
payload = { name = "ada" }
every = "1m"
"""


def run(runner: CliRunner, config: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["--config", str(config), *args])
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got {lines}"
    return result.exit_code, lines[0]


@pytest.mark.parametrize("command", [["scheduler"], ["schedules"], ["worker", "--with-scheduler"]])
@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (
            'job = "greet"\npayload = { nam = "ada" }\nevery = "1m"',
            "queuey.toml: schedules.broken.payload: does not fit job type 'greet': "
            "name: Field required",
        ),
        ('job = "nope"\nevery = "1m"', "queuey.toml: schedules.broken.job: unknown job type"),
        (
            'job = "greet"\npayload = { name = "ada" }\ncron = "0 25 * * *"',
            "queuey.toml: schedules.broken: cron '0 25 * * *' is not a valid",
        ),
        (
            'job = "greet"\npayload = { name = "ada" }\nevery = "1m"\npriority = 11',
            "schedules.broken: priority 11 is not allowed on queue 'alpha'",
        ),
    ],
)
def test_a_broken_schedule_stops_start_up_naming_it(
    runner: CliRunner,
    write_config: Callable[[str], Path],
    command: list[str],
    table: str,
    expected: str,
) -> None:
    config = write_config(BASE.format(url=UNREACHABLE) + GOOD + f"[schedules.broken]\n{table}\n")
    code, line = run(runner, config, *command)
    assert code == 2, line
    assert expected in line


@pytest.mark.parametrize(
    ("extra", "args", "expected"),
    [
        ("", ["scheduler"], "no schedules to run: add schedules.NAME tables"),
        (
            "",
            ["worker", "--with-scheduler"],
            "--with-scheduler: no schedules configured (schedules.NAME tables)",
        ),
        (GOOD, ["schedules", "fire", "nope"], "unknown schedule 'nope' (known: hello)"),
    ],
)
def test_scheduler_commands_refuse_what_cannot_run(
    runner: CliRunner,
    write_config: Callable[[str], Path],
    extra: str,
    args: list[str],
    expected: str,
) -> None:
    config = write_config(BASE.format(url=UNREACHABLE) + extra)
    code, line = run(runner, config, *args)
    assert code == 2, line
    assert expected in line


def test_listing_schedules_needs_the_broker_and_says_so_in_one_line(
    runner: CliRunner, write_config: Callable[[str], Path]
) -> None:
    config = write_config(BASE.format(url=UNREACHABLE) + GOOD)
    code, line = run(runner, config, "schedules")
    assert code == 1
    assert "cannot reach RabbitMQ" in line
    assert "s3cret" not in line


def test_no_schedules_lists_nothing_without_connecting(
    runner: CliRunner, write_config: Callable[[str], Path]
) -> None:
    config = write_config(BASE.format(url=UNREACHABLE))
    result = runner.invoke(app, ["--config", str(config), "schedules"])
    assert (result.exit_code, result.stdout.strip()) == (
        0,
        "no schedules configured (schedules.NAME tables)",
    )
    result = runner.invoke(app, ["--config", str(config), "schedules", "--json"])
    assert (result.exit_code, result.stdout.strip()) == (0, "[]")
