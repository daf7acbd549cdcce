"""``queuey enqueue``'s job-id and --file options: bad use is refused before connecting.

The broker in ``offline`` cannot be reached, so exit 2 (not 1) also proves that nothing
tried to connect. When the broker cannot be reached, --file still says what became of
every line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli.main import app


def run(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["greet", '{"name": "a"}', "--job-id", " "], "--job-id: a job id is a UUID"),
        (["greet", '{"name": "a"}', "--failed-to", "x.jsonl"], "go with --file"),
        (["greet", '{"name": "a"}', "--ids-from-lines"], "go with --file"),
        (["greet", "--file", "FILE", "--job-id", "k"], 'give each line a "job_id"'),
    ],
)
def test_job_id_and_file_options_are_checked_before_connecting(
    runner: CliRunner, offline: Path, tmp_path: Path, args: list[str], expected: str
) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"name": "a"}\n')
    args = [str(jobs) if arg == "FILE" else arg for arg in args]
    code, out, err = run(runner, "--config", str(offline), "enqueue", *args)
    assert code == 2, err
    assert expected in err
    assert out == ""


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"job_id": 7, "name": "a"}', "job_id: a job id is a UUID or a non-empty string"),
        ('{"job_id": "", "name": "a"}', "job_id: a job id is a UUID or a non-empty string"),
    ],
)
def test_a_bad_job_id_in_a_line_is_refused_naming_the_line(
    runner: CliRunner, offline: Path, tmp_path: Path, line: str, expected: str
) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"name": "ok"}\n' + line + "\n")
    code, _, err = run(runner, "--config", str(offline), "enqueue", "greet", "--file", str(jobs))
    assert code == 2
    assert f"{jobs}:2: {expected}" in err


def test_an_unreachable_broker_counts_every_line_as_not_sent(
    runner: CliRunner, offline: Path, tmp_path: Path
) -> None:
    jobs, rest = tmp_path / "jobs.jsonl", tmp_path / "rest.jsonl"
    jobs.write_text('{"name": "a"}\n{"job_id": "k", "name": "b"}\n')
    code, _, err = run(
        runner, "--config", str(offline), "enqueue", "greet", "--file", str(jobs),
        "--failed-to", str(rest),
    )  # fmt: skip
    assert code == 1
    assert "cannot reach RabbitMQ" in err
    assert "0 confirmed, 0 unknown (may or may not be enqueued), 0 refused, 2 not sent" in err
    assert rest.read_text().splitlines()[1] == '{"job_id": "k", "name": "b"}', "as written"
