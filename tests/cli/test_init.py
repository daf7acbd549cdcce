"""``queuey init NAME``: writes the scaffold, overwrites nothing, refuses a bad name;
one line and exit 2 for bad input, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli.main import app


def test_init_writes_the_scaffold_and_says_what_next(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["init", "my-jobs", "--in", str(tmp_path)])

    assert result.exit_code == 0, result.output
    assert f"wrote {tmp_path / 'my-jobs' / 'pyproject.toml'}" in result.stdout
    assert f"pip install -e {tmp_path / 'my-jobs'}" in result.stdout
    assert "queuey enqueue my_jobs.hello" in result.stdout
    assert (tmp_path / "my-jobs" / "my_jobs" / "handlers.py").is_file()


def test_init_in_the_working_directory_names_paths_as_typed(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    result = runner.invoke(app, ["init", "jobs"])

    assert result.exit_code == 0, result.output
    assert "wrote jobs/queuey.toml" in result.stdout
    assert (tmp_path / "jobs" / "queuey.toml").is_file()


def test_init_overwrites_nothing(runner: CliRunner, tmp_path: Path) -> None:
    runner.invoke(app, ["init", "my-jobs", "--in", str(tmp_path)])
    (tmp_path / "my-jobs" / "my_jobs" / "handlers.py").write_text("# mine\n")

    result = runner.invoke(app, ["init", "my-jobs", "--in", str(tmp_path)])

    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "already exists: nothing was written" in result.stderr
    assert (tmp_path / "my-jobs" / "my_jobs" / "handlers.py").read_text() == "# mine\n"


@pytest.mark.parametrize("name", ["9lives", "json", "my jobs", "jobs-"])
def test_init_refuses_a_bad_name_in_one_line(runner: CliRunner, tmp_path: Path, name: str) -> None:
    result = runner.invoke(app, ["init", name, "--in", str(tmp_path)])

    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == [], "nothing written"


def test_init_where_it_cannot_write_is_one_line(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")

    result = runner.invoke(app, ["init", "jobs", "--in", str(tmp_path / "file")])

    assert result.exit_code == 1
    assert result.stderr.startswith("error: cannot write jobs/")
    assert result.stderr.count("\n") == 1, result.stderr
