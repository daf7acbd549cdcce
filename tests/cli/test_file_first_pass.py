"""The first pass of ``enqueue --file`` (queuey_cli.job_lines.read_file): every line is
checked as the producer will send it, the envelope's checks on the first line and each
line's JSON on every line, before anything is published."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from typing import ClassVar

import pytest
import typer
from pydantic import PlainSerializer

from queuey_cli.job_lines import read_file
from queuey_core import InvalidPriorityError
from queuey_core import Job
from queuey_core import QueueConfig
from queuey_core import QueueSet

QUEUES = QueueSet([QueueConfig("files", prefetch=1, max_priority=3)])


def _refuse_boom(value: str) -> str:
    if value == "boom":
        raise ValueError("boom cannot be sent")
    return value


class Picky(Job):
    """A job whose field refuses to be serialized for one value (valid on the way in)."""

    NAME: ClassVar[str] = "test.picky"
    QUEUE: ClassVar[str] = "files"
    word: Annotated[str, PlainSerializer(_refuse_boom)]


def _file(tmp_path: Path, *words: str) -> Path:
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(f'{{"word": "{w}"}}\n' for w in words))
    return path


def test_every_line_is_counted_and_the_file_hashed(tmp_path: Path) -> None:
    checked = read_file(_file(tmp_path, "a", "b", "c"), Picky, False, QUEUES, None)
    assert checked.jobs == 3
    assert len(checked.digest) == 64


def test_a_later_line_that_cannot_be_sent_as_json_stops_the_run_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, "a", "b", "boom", "d")
    with pytest.raises(typer.Exit) as stopped:
        read_file(path, Picky, False, QUEUES, None)
    assert stopped.value.exit_code == 2
    said = capsys.readouterr().err
    assert f"{path}:3: cannot be sent as JSON" in said
    assert "boom cannot be sent" in said


def test_the_first_line_gets_the_envelope_s_checks(tmp_path: Path) -> None:
    with pytest.raises(InvalidPriorityError):
        read_file(_file(tmp_path, "a", "b"), Picky, False, QUEUES, 9)
