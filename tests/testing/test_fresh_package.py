"""From nothing to a passing test: ``queuey init`` writes a handler distribution, pip
installs it into a fresh virtual environment, and its own tests pass there on the
``queuey`` fixture; then a job runs on its embedded SQLite file.

The fresh environment sees this one's packages (queuey, pytest, hatchling) through a
``.pth`` file, so nothing is downloaded: pip runs with ``--no-build-isolation
--no-deps``. Installing into this environment instead would register the new handlers
for every other test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

QUEUEY = str(Path(sys.executable).parent / "queuey")


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("QUEUEY_")}
    return subprocess.run(
        list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture
def fresh_python(tmp_path: Path) -> str:
    """A new virtual environment's python that sees this environment's packages."""
    pytest.importorskip("hatchling", reason="the dev extra installs hatchling to build offline")
    venv = tmp_path / "venv"
    made = run(tmp_path, sys.executable, "-m", "venv", "--without-pip", str(venv))
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    purelib = run(
        tmp_path, python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    # An `import` line of a .pth file runs at start-up: addsitedir reads our .pth files
    # too (the editable installs of queuey and its example handlers).
    (Path(purelib) / "_queuey_dev.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return python


def test_a_scaffold_installs_and_its_tests_pass_then_runs_a_job(
    tmp_path: Path, fresh_python: str
) -> None:
    made = run(tmp_path, QUEUEY, "init", "my-jobs")
    assert made.returncode == 0, made.stderr
    project = tmp_path / "my-jobs"

    installed = run(
        tmp_path,
        fresh_python,
        *("-m", "pip", "install", "--no-deps", "--no-build-isolation", "-e", str(project)),
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr

    # -P: the package comes from the installation, not from the working directory.
    tested = run(project, fresh_python, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "2 passed" in tested.stdout

    listed = run(project, fresh_python, "-m", "queuey_cli", "handlers")
    assert "my_jobs.hello\tmy_jobs\tmy_jobs\tmy-jobs" in listed.stdout, listed.stderr

    enqueued = run(
        project, fresh_python, "-m", "queuey_cli", "enqueue", "my_jobs.hello", '{"name": "ada"}'
    )
    assert enqueued.returncode == 0, enqueued.stderr
    worked = run(
        project, fresh_python, "-m", "queuey_cli", "--log-format", "json", "worker", "--burst"
    )
    assert worked.returncode == 0, worked.stderr
    assert '"message": "job succeeded"' in worked.stderr
    assert enqueued.stdout.strip() in worked.stderr, "the job enqueued is the job that ran"
    assert (project / "queuey.db").is_file(), "on the embedded file"
