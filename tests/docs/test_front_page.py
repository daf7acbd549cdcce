"""The front page stays a front page: the README, the help's first line, the changelog.

The README is what a newcomer reads first: what queuey is, the two set-up commands, one
example, the peers, links. Detail grows into it one paragraph at a time (it reached 315
lines, with a journal of benchmark rounds); the pages under docs/ are where detail goes.
The two set-up commands are a contract (scripts/demo and scripts/test), and `queuey
--help` must say what queuey runs on as the README does, not RabbitMQ alone.
"""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from queuey_cli.main import app

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
CHANGELOG = REPO / "CHANGELOG.md"
#: The most lines the README may have; past it, move detail to a page of docs/.
MAX_README_LINES = 300


def test_the_readme_is_at_most_300_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines: link, not copy"


def test_the_readme_gives_the_two_set_up_commands() -> None:
    text = README.read_text()
    for command in ("./scripts/demo", "./scripts/test"):
        assert re.search(rf"^{re.escape(command)}\b", text, re.MULTILINE), command
        assert (REPO / command).is_file(), f"{command} is named but missing"


def test_the_root_help_says_what_queuey_runs_on() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "Typed background jobs on RabbitMQ or a SQLite file." in said


def test_the_changelog_is_keep_a_changelog_and_linked_from_the_front_pages() -> None:
    text = CHANGELOG.read_text()
    assert text.startswith("# Changelog\n")
    assert "https://keepachangelog.com/en/1.1.0/" in text
    sections = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    assert sections[:1] == ["Unreleased"], sections
    kinds = set(re.findall(r"^### (\w+)", text, re.MULTILINE))
    assert kinds <= {"Upgrading", "Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    assert "(CHANGELOG.md)" in README.read_text()
    assert "(../CHANGELOG.md)" in (REPO / "docs" / "index.md").read_text()
