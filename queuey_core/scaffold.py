"""A new handler distribution, written from nothing (``queuey init NAME``).

:func:`write_scaffold` writes ``NAME/``: a pyproject with the ``queuey.handlers`` entry
point, a package with one job type and its handler, a ``queuey.toml`` on the embedded
SQLite file, a test on the testing kit's ``queuey`` fixture, and a short README. After
``pip install -e NAME``, ``pytest`` inside ``NAME/`` passes.

Owns: the names (a distribution name and the package made of it) and the files' text.
Must never: overwrite a file, or leave some files written when one could not be (every
path is checked before the first is written).
"""

from __future__ import annotations

import keyword
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from queuey_core.errors import ConfigError

#: A distribution name, as the packaging specifications allow one (PEP 508).
_DIST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
#: Names a new package must not take: queuey's own, and what would shadow them.
_TAKEN = frozenset({"queuey", "queuey_core", "queuey_cli", "queuey_dashboard", "tests", "test"})


@dataclass(frozen=True, slots=True)
class Names:
    """The names a scaffold uses: the distribution's, its package's, its queue's."""

    distribution: str
    package: str

    @property
    def queue(self) -> str:
        """The one queue of the scaffold's queuey.toml (the package's name)."""
        return self.package

    @property
    def job_type(self) -> str:
        """The job type on the wire (``<package>.hello``)."""
        return f"{self.package}.hello"


def names_for(name: str) -> Names:
    """The names for a new distribution called ``name``.

    Raises:
        ConfigError: ``name`` is not a valid distribution name, or its package name would
            not be importable or would shadow the standard library or queuey.
    """
    if not _DIST_NAME.fullmatch(name):
        raise ConfigError(
            f"{name!r} is not a valid distribution name: letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit"
        )
    package = re.sub(r"[-_.]+", "_", name).lower()
    if not package.isidentifier() or keyword.iskeyword(package):
        raise ConfigError(
            f"{name!r} gives the package name {package!r}, which Python cannot import"
        )
    if package in sys.stdlib_module_names or package in _TAKEN:
        raise ConfigError(
            f"{name!r} gives the package name {package!r}, which would shadow "
            f"{'the standard library' if package in sys.stdlib_module_names else 'queuey'}'s own"
        )
    return Names(name, package)


def scaffold_files(names: Names) -> dict[str, str]:
    """The scaffold's files, by path relative to its directory."""
    dist, pkg, queue, job_type = names.distribution, names.package, names.queue, names.job_type
    return {
        "pyproject.toml": _PYPROJECT.format(dist=dist, pkg=pkg),
        f"{pkg}/__init__.py": f'"""{dist}: queuey handlers."""\n',
        f"{pkg}/py.typed": "",
        f"{pkg}/handlers.py": _HANDLERS.format(dist=dist, queue=queue, job_type=job_type),
        "tests/handlers_test.py": _TEST.format(pkg=pkg),
        "queuey.toml": _CONFIG.format(dist=dist, queue=queue),
        "README.md": _README.format(dist=dist, pkg=pkg, job_type=job_type),
        ".gitignore": "queuey.db*\n__pycache__/\n*.egg-info/\n",
    }


def write_scaffold(name: str, parent: Path | None = None) -> list[Path]:
    """Write a new handler distribution into ``parent / name`` (the working directory's
    by default); returns the files written.

    Raises:
        ConfigError: a bad name (see :func:`names_for`), or a file that already exists
            (nothing is written then).
        OSError: a file could not be written.
    """
    names = names_for(name)
    root = (parent or Path.cwd()) / name
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{root} exists and is not a directory")
    files = {root / rel: text for rel, text in scaffold_files(names).items()}
    for path in files:
        if path.exists():
            raise ConfigError(
                f"{path} already exists: nothing was written (queuey init overwrites nothing)"
            )
    written = []
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        # "x": a file that appeared since the check is still not overwritten.
        with path.open("x", encoding="utf-8") as f:
            f.write(text)
        written.append(path)
    return written


_PYPROJECT = """\
[build-system]
requires = ["hatchling>=1.20"]
build-backend = "hatchling.build"

[project]
name = "{dist}"
version = "0.1.0"
description = "queuey handlers"
requires-python = ">=3.11"
dependencies = ["queuey"]

# How `queuey worker` (and `queuey handlers`) find the handlers: every handler defined
# at the top of the module named here.
[project.entry-points."queuey.handlers"]
{pkg} = "{pkg}.handlers"

[tool.hatch.build.targets.wheel]
packages = ["{pkg}"]

[tool.pytest.ini_options]
testpaths = ["tests"]
"""

_HANDLERS = '''\
"""{dist}'s job types and their handlers (registered in pyproject.toml)."""

from __future__ import annotations

from typing import ClassVar

from queuey_core import Job, JobContext, handler


class Hello(Job):
    """Greet someone. ``NAME`` is the job type on the wire, ``QUEUE`` its queue."""

    NAME: ClassVar[str] = "{job_type}"
    QUEUE: ClassVar[str] = "{queue}"
    name: str


@handler
def hello(job: Hello, ctx: JobContext) -> str:
    """Return the greeting: what a handler returns is the job's result. Raise
    ``Retryable`` to be retried, ``Fatal`` to give up, ``Deferred`` to run later."""
    return f"hello, {{job.name}}!"
'''

_TEST = '''\
"""The handlers, run by queuey's testing kit (the ``queuey`` fixture): a real worker on
an in-memory backend and a manual clock, no server, no sleeping."""

from __future__ import annotations

import pytest

from queuey_core.testing import QueueyKit
from {pkg} import handlers
from {pkg}.handlers import Hello

# This package's handlers (by default the kit runs every installed one).
pytestmark = pytest.mark.queuey(handlers=[handlers])


def test_hello_returns_the_greeting(queuey: QueueyKit) -> None:
    outcome = queuey.run(Hello(name="ada"))

    assert outcome.succeeded
    assert outcome.result == "hello, ada!"


def test_a_delayed_hello_waits_for_the_clock(queuey: QueueyKit) -> None:
    queuey.enqueue(Hello(name="bob"), delay=60)

    assert [e.job.name for e in queuey.enqueued(Hello)] == ["bob"]
    assert queuey.drain() == [], "not due yet"
    queuey.advance(60)
    assert [o.result for o in queuey.drain()] == ["hello, bob!"]
'''

_CONFIG = """\
# {dist}'s queuey configuration. The jobs live in a SQLite file beside it (no server);
# for RabbitMQ: url = "amqp://guest:guest@127.0.0.1:5672/%2F".
[broker]
url = "sqlite:///queuey.db"

[queues.{queue}]
prefetch = 4
retry = {{ max_attempts = 3, backoff = "exponential", initial = "1s", max = "1m", jitter = true }}
"""

_README = """\
# {dist}

Handlers for [queuey](https://pypi.org/project/queuey/) jobs: `{pkg}/handlers.py`.

```console
$ pip install -e .                     # registers the handlers (pyproject.toml)
$ pytest                               # tests/: the handlers on queuey's testing kit
$ queuey enqueue {job_type} '{{"name": "ada"}}'
$ queuey worker --burst                # runs the jobs queued in queuey.db, then stops
```

Add a job type and its handler to `{pkg}/handlers.py`, a test beside the others in
`tests/`, and its queue to `queuey.toml` if it needs one of its own.
"""
