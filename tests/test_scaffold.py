"""The scaffold of ``queuey init`` (queuey_core.scaffold): its names, and that what it
writes works: the config loads, the handler runs on the testing kit."""

from __future__ import annotations

import importlib
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from queuey_core import ConfigError
from queuey_core.scaffold import names_for
from queuey_core.scaffold import write_scaffold
from queuey_core.settings import load_settings
from queuey_core.testing import QueueyKit


@pytest.fixture
def importable(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path/my-jobs`` on sys.path, and its package forgotten afterwards."""
    sys.path.insert(0, str(tmp_path / "my-jobs"))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path / "my-jobs"))
        for name in [m for m in sys.modules if m == "my_jobs" or m.startswith("my_jobs.")]:
            del sys.modules[name]


@pytest.mark.parametrize(
    ("name", "package"),
    [("my-jobs", "my_jobs"), ("Billing.Tasks", "billing_tasks"), ("a", "a"), ("x__y", "x_y")],
)
def test_a_distribution_name_gives_its_package_name(name: str, package: str) -> None:
    names = names_for(name)

    assert (names.distribution, names.package, names.queue) == (name, package, package)
    assert names.job_type == f"{package}.hello"


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "not a valid distribution name"),
        ("-jobs", "not a valid distribution name"),
        ("jobs-", "not a valid distribution name"),
        ("my jobs", "not a valid distribution name"),
        ("../jobs", "not a valid distribution name"),
        ("jöbs", "not a valid distribution name"),
        ("9lives", "which Python cannot import"),
        ("class", "which Python cannot import"),
        ("json", "would shadow the standard library"),
        ("queuey-core", "would shadow queuey"),
        ("tests", "would shadow queuey"),
    ],
)
def test_a_name_that_cannot_work_is_refused(name: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        names_for(name)


def test_the_scaffold_is_a_handler_distribution(tmp_path: Path) -> None:
    written = write_scaffold("my-jobs", tmp_path)

    root = tmp_path / "my-jobs"
    assert sorted(str(p.relative_to(root)) for p in written) == [
        ".gitignore",
        "README.md",
        "my_jobs/__init__.py",
        "my_jobs/handlers.py",
        "my_jobs/py.typed",
        "pyproject.toml",
        "queuey.toml",
        "tests/handlers_test.py",
    ]
    project = tomllib.loads((root / "pyproject.toml").read_text())
    assert project["project"]["name"] == "my-jobs"
    assert project["project"]["dependencies"] == ["queuey"]
    assert project["project"]["entry-points"]["queuey.handlers"] == {"my_jobs": "my_jobs.handlers"}
    settings, _ = load_settings(root / "queuey.toml")
    assert settings.broker.url.get_secret_value() == "sqlite:///queuey.db", "no server"
    assert list(settings.queue_set()) == ["my_jobs"]
    compile((root / "tests" / "handlers_test.py").read_text(), "handlers_test.py", "exec")


def test_the_scaffolds_handler_runs_on_its_queues(importable: Path) -> None:
    write_scaffold("my-jobs", importable)
    handlers = importlib.import_module("my_jobs.handlers")

    with QueueyKit([handlers], config=importable / "my-jobs" / "queuey.toml") as kit:
        outcome = kit.run(handlers.Hello(name="ada"))

    assert outcome.succeeded
    assert outcome.result == "hello, ada!"


def test_an_existing_file_stops_the_scaffold_before_it_writes_anything(tmp_path: Path) -> None:
    (tmp_path / "my-jobs").mkdir()
    (tmp_path / "my-jobs" / "README.md").write_text("mine")

    with pytest.raises(ConfigError, match=r"README\.md already exists: nothing was written"):
        write_scaffold("my-jobs", tmp_path)

    assert [p.name for p in (tmp_path / "my-jobs").iterdir()] == ["README.md"]
    assert (tmp_path / "my-jobs" / "README.md").read_text() == "mine"
