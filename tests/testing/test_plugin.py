"""The pytest plugin (queuey_core.pytest_plugin): registered with queuey, free for a run
that does not use it, and clear about a marker it cannot use. A run of pytest of its own
(in a directory with no conftest and no queuey.toml) shows what a user's project sees."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PROJECT_TESTS = """
import sys

import pytest


def test_a_run_that_does_not_ask_loads_nothing_of_the_kit():
    loaded = sorted(m for m in sys.modules if m.startswith("queuey_core."))
    assert "queuey_core.pytest_plugin" in loaded, "the plugin is loaded"
    assert "queuey_core.testing" not in loaded, loaded
    assert "queuey_core.worker" not in loaded, loaded
    assert "pydantic" not in sys.modules


@pytest.mark.queuey("sqlite")
def test_a_marker_with_a_positional_argument(queuey):
    pass


@pytest.mark.parametrize("queuey", [3], indirect=True)
def test_a_parameter_that_is_no_backend(queuey):
    pass
"""


def test_the_plugin_is_registered_under_pytest11() -> None:
    [entry] = [e for e in importlib.metadata.entry_points(group="pytest11") if e.name == "queuey"]

    assert entry.value == "queuey_core.pytest_plugin"


def test_a_projects_pytest_run_gets_the_plugin_for_free(tmp_path: Path) -> None:
    (tmp_path / "test_project.py").write_text(textwrap.dedent(PROJECT_TESTS))
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEY_")}

    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    out = ran.stdout
    assert "1 passed, 2 errors" in out, out
    assert "@pytest.mark.queuey takes keyword arguments only" in out
    assert "the queuey fixture takes a backend name or a dict of options, not 3" in out
