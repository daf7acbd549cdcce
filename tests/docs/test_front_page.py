"""The front page stays a front page: the README, the help's first line, the changelog.

The README is what a newcomer reads first: what queuey is, the two set-up commands, one
example, the peers, links. Detail grows into it one paragraph at a time (it reached 315
lines, with a journal of benchmark rounds); the pages under docs/ are where detail goes.
The two set-up commands are a contract (scripts/demo and scripts/test), and `queuey
--help` must say what queuey runs on as the README does, not RabbitMQ alone.
"""

from __future__ import annotations

from typer.testing import CliRunner

from queuey_cli.main import app


def test_the_root_help_says_what_queuey_runs_on() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "Typed background jobs on RabbitMQ or a SQLite file." in said
