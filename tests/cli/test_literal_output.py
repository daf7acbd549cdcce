"""Text from messages, handlers and users is shown literally: no markup, no raw escapes.

A reason holding ``[/]`` once crashed ``dlq list`` with a Rich MarkupError, and a job
type holding ``ESC[31m`` reached the terminal as a live escape sequence.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_cli.output import JsonFormatter
from queuey_cli.output import LineFormatter
from queuey_cli.output import LiteralRichHandler
from queuey_cli.output import LogFormat
from queuey_cli.output import printable
from queuey_cli.output import setup_logging
from tests.cli.conftest import FakeBroker
from tests.cli.conftest import dead_letter

ESC = "\x1b[31m"
LONG = "x" * 300  # 300 bytes: longer than an AMQP short string
HOSTILE = ["[/]", "[bold]loud[/bold]", f"{ESC}red", LONG, "a\nb", "\u202etxt.exe", "[link=x]y"]


def run(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    out, err = result.stdout, result.stderr
    assert "Traceback" not in out + err
    assert "\x1b" not in out + err, "no raw escape reaches the terminal"
    return result.exit_code, out, err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


# -- printable() -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("[/]", "[/]"),
        (f"{ESC}red", "\\x1b[31mred"),
        ("a\nb\r\tc", "a\\nb\\r\\tc"),
        ("\x00\x7f\x9b", "\\x00\\x7f\\x9b"),
        ("\u202eexe.txt", "\\u202eexe.txt"),
        ("\udcff", "\\udcff"),  # an undecodable byte of argv: could not even be written out
        ("café ✓", "café ✓"),
    ],
)
def test_printable_escapes_control_characters_and_nothing_else(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_printable_can_keep_newlines_for_tracebacks() -> None:
    assert printable(f"a\nb{ESC}", newlines=True) == "a\nb\\x1b[31m"


# -- arguments: job types and ids ------------------------------------------------------


@pytest.mark.parametrize("job_type", HOSTILE)
def test_an_unknown_job_type_is_shown_literally(
    runner: CliRunner, offline: Path, job_type: str
) -> None:
    code, out, err = run(runner, "--config", str(offline), "enqueue", job_type, "{}")
    assert code == 2
    line = one_line(err)
    assert line.startswith(f"error: unknown job type {printable(repr(job_type))} (known: ")
    assert out == ""


@pytest.mark.parametrize("job_id", HOSTILE)
def test_an_unknown_job_id_is_shown_literally(
    runner: CliRunner, offline: Path, broker: FakeBroker, job_id: str
) -> None:
    code, _, err = run(runner, "--config", str(offline), "dlq", "show", job_id)
    assert code == 2
    assert one_line(err) == f"error: no dead letter with job id {printable(job_id)}"
    code, _, err = run(runner, "--config", str(offline), "dlq", "requeue", job_id)
    assert code == 2
    assert f"no dead letter with job id {printable(job_id)}" in err


def test_a_file_name_with_markup_is_shown_literally(
    runner: CliRunner, offline: Path, tmp_path: Path
) -> None:
    jobs = tmp_path / "[bold]jobs[red].jsonl"
    jobs.write_text('{"name": 1}\n')
    code, _, err = run(runner, "--config", str(offline), "enqueue", "greet", "--file", str(jobs))
    assert code == 2
    assert f"{jobs}:1: does not fit job type 'greet'" in one_line(err)


# -- dead letters: whatever their headers hold -----------------------------------------


def test_dlq_list_shows_hostile_reasons_and_types_literally(
    runner: CliRunner, offline: Path, broker: FakeBroker
) -> None:
    short = [t for t in HOSTILE if t != LONG]  # a long cell wraps inside the table
    broker.dead = [dead_letter(job_type=t, reason=f"fatal error: {t}") for t in short]
    broker.dead.append(dead_letter(job_type=LONG, reason=LONG))
    code, out, err = run(runner, "--config", str(offline), "dlq", "list")
    assert code == 0, err
    for text in short:
        assert out.count(printable(text)) == 2, text  # as the type and in the reason
    assert out.count("x") >= 600


def test_dlq_list_shows_odd_headers_as_unknown(
    runner: CliRunner, offline: Path, broker: FakeBroker
) -> None:
    broker.dead = [
        dead_letter(reason=b"bytes", dead_at="abc"),
        dead_letter(reason=None, dead_at=True),
        dead_letter(reason=42, dead_at=10**20),  # a year no C library takes
        dead_letter(reason="ok", dead_at=-5),
    ]
    code, out, err = run(runner, "--config", str(offline), "dlq", "list")
    assert code == 0, err
    assert out.count("unknown") == 7, out  # 3 reasons + 4 times

    code, out, err = run(runner, "--config", str(offline), "dlq", "list", "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert [d["reason"] for d in listed] == [None, None, None, "ok"]
    assert [d["dead_at"] for d in listed] == [None, None, 10**20, None]


def test_dlq_json_escapes_control_characters_and_keeps_the_text(
    runner: CliRunner, offline: Path, broker: FakeBroker
) -> None:
    hostile = f"{ESC}[/]\u202e\x9b"
    broker.dead = [dead_letter(job_type=hostile, reason=hostile)]
    code, out, _ = run(runner, "--config", str(offline), "dlq", "list", "--json")
    assert code == 0
    [dead] = json.loads(out)
    assert (dead["job_type"], dead["reason"]) == (hostile, hostile), "JSON is reversible"
    assert out.isascii()


# -- logs ------------------------------------------------------------------------------


def _record(exc: BaseException | None = None) -> logging.LogRecord:
    info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    record = logging.LogRecord(
        "queuey_core.worker",
        logging.ERROR,
        __file__,
        1,
        "job failed fatally: %s",
        (f"{ESC}[/]\nnext",),
        info,
    )
    record.job_type = f"[bold]{ESC}"
    return record


def _raised() -> BaseException:
    try:
        raise RuntimeError(f"boom [/] {ESC}\nsecond line")
    except RuntimeError as exc:
        return exc


def test_a_log_line_is_literal_and_its_exception_one_line() -> None:
    line = LineFormatter().format(_record(_raised()))
    assert line == (
        "job failed fatally: \\x1b[31m[/]\\nnext: RuntimeError: boom [/] \\x1b[31m\\nsecond line"
    )


def test_at_debug_a_log_line_carries_the_traceback() -> None:
    text = LineFormatter(tracebacks=True).format(_record(_raised()))
    assert "Traceback (most recent call last)" in text
    assert "\x1b" not in text


def test_json_logs_give_the_error_as_one_field_and_the_traceback_only_at_debug() -> None:
    data = json.loads(JsonFormatter().format(_record(_raised())))
    assert data["error"] == "RuntimeError: boom [/] \\x1b[31m\\nsecond line"
    assert data["job_type"] == f"[bold]{ESC}"
    assert "traceback" not in data
    data = json.loads(JsonFormatter(tracebacks=True).format(_record(_raised())))
    assert "Traceback (most recent call last)" in data["traceback"]


def test_the_rich_handler_never_reads_markup_even_when_a_record_asks() -> None:
    buffer = io.StringIO()
    handler = LiteralRichHandler(console=Console(file=buffer, width=200), markup=False)
    handler.setFormatter(LineFormatter())
    record = _record()
    record.markup = True  # what RichHandler would honour
    handler.emit(record)
    assert "[/]" in buffer.getvalue()
    assert "\x1b" not in buffer.getvalue()


def test_the_cli_rich_log_shows_an_exception_as_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    setup_logging(LogFormat.RICH, "info")
    try:
        exc = _raised()
        logging.getLogger("queuey_core.worker").error(
            "failed to settle delivery (%s)", "[/]", exc_info=(type(exc), exc, None)
        )
    finally:
        root.handlers[:], root.level = handlers, level
    err = capsys.readouterr().err
    # Rich wraps at the terminal's width: compare with the wrapping undone.
    assert (
        "failed to settle delivery ([/]): RuntimeError: boom [/] \\x1b[31m\\nsecond line"
        in " ".join(err.split())
    )
    assert "Traceback" not in err
    assert "\x1b" not in err
