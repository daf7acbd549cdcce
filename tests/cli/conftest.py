from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

UNREACHABLE = "amqp://guest:s3cret@127.0.0.1:1/%2F"

BASE = """
[broker]
url = "{url}"
connect_timeout = "1s"

[queues.default]
prefetch = 4
max_priority = 10
retry = {{ max_attempts = 2, backoff = "fixed", initial = "100ms", max = "100ms" }}
"""


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[str], Path]:
    """Write a queuey.toml with the given text and return its path."""

    def write(text: str) -> Path:
        path = tmp_path / "queuey.toml"
        path.write_text(text)
        return path

    return write


@pytest.fixture
def offline(write_config: Callable[[str], Path]) -> Path:
    """A valid config whose broker cannot be reached: anything that connects fails."""
    return write_config(BASE.format(url=UNREACHABLE))
