"""``queuey enqueue --no-validate --queue Q``: bad use is refused before connecting.

The broker in ``offline`` cannot be reached, so exit 2 (not 1) also proves that nothing
tried to connect.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli.main import app


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["greet", '{"name": "a"}', "--queue", "alpha"], "--queue goes with --no-validate"),
        (["greet", '{"name": "a"}', "--no-validate"], "--no-validate needs --queue"),
        (["greet", "--file", "x.jsonl", "--no-validate", "-q", "alpha"], "not --file"),
        (["t", "[1]", "--no-validate", "-q", "alpha"], "a job is a JSON object, not list"),
        (["t", "{", "--no-validate", "-q", "alpha"], "payload: invalid JSON"),
        (["t", "{}", "--no-validate", "-q", "nowhere"], "unknown queue 'nowhere'"),
        (["t", "{}", "--no-validate", "-q", "alpha", "--priority", "11"], "maximum is 10"),
        (["a\tb", "{}", "--no-validate", "-q", "alpha"], "job_type: contains a control"),
        (["t", "{}", "--no-validate", "-q", "alpha", "--delay", "-1s"], "--delay"),
        (["t", "{}", "--no-validate", "-q", "alpha", "--job-id", " "], "--job-id"),
    ],
)
def test_bad_no_validate_use_is_one_line_and_exit_2_before_connecting(
    runner: CliRunner, offline: Path, args: list[str], expected: str
) -> None:
    result = runner.invoke(app, ["--config", str(offline), "enqueue", *args])
    assert result.exit_code == 2, result.stderr
    assert expected in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_without_no_validate_an_unknown_job_type_is_still_refused(
    runner: CliRunner, offline: Path
) -> None:
    result = runner.invoke(app, ["--config", str(offline), "enqueue", "not.here", "{}"])
    assert result.exit_code == 2
    assert "unknown job type 'not.here'" in result.stderr
