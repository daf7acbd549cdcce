"""The container tests' engine and image: podman, and the image built from this worktree.

They run when asked: under CI (``CI`` set), with ``QUEUEY_TEST_CONTAINER=1``, or when
``QUEUEY_TEST_IMAGE`` (an image to test as it is) or ``QUEUEY_TEST_BASE_IMAGE`` (the base
to build the Dockerfile from) is set; ``scripts/test`` sets the base from
``scripts/ensure-podman``. Otherwise they are not collected, and the summary says so in
one line, with how to turn them on. Under CI an
engine that cannot build or run the image fails them: they never skip there.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.container.engine import IMAGE_TAG
from tests.container.engine import ROOT
from tests.container.engine import Containers
from tests.container.engine import EngineError
from tests.container.engine import podman
from tests.harness import AMQP_URL

HOW = (
    "container tests off: run scripts/ensure-podman as root, then QUEUEY_TEST_CONTAINER=1 "
    "scripts/test (or QUEUEY_TEST_BASE_IMAGE=<its output> pytest -m container)"
)

#: What the tests measured, printed at the end of the run (docs/containers.md quotes them).
FIGURES: list[str] = []


#: The modules that need the engine (test_dockerfile.py reads the file: it always runs).
ENGINE_MODULES = {"test_image.py", "test_compose.py"}

#: Set when the tests were left out: the summary then says how to turn them on, once.
LEFT_OUT: list[str] = []


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.name in ENGINE_MODULES and not _asked():
        LEFT_OUT.append(collection_path.name)
        return True
    return None


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if LEFT_OUT:
        terminalreporter.write_line(f"SKIPPED tests/container: {HOW}")
    if FIGURES:
        terminalreporter.section("container: measured figures")
        for line in FIGURES:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def figures() -> list[str]:
    """Append a line of measured figures to show in the run's summary."""
    return FIGURES


def _asked() -> bool:
    names = ("CI", "QUEUEY_TEST_CONTAINER", "QUEUEY_TEST_IMAGE", "QUEUEY_TEST_BASE_IMAGE")
    return any(os.environ.get(n) for n in names)


def _unavailable(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the container engine is unusable: {message}")
    pytest.skip(message)


@pytest.fixture(scope="session")
def image() -> str:
    """The image under test: ``QUEUEY_TEST_IMAGE``, else the Dockerfile built now (with
    ``--format docker``, which keeps HEALTHCHECK) from ``QUEUEY_TEST_BASE_IMAGE``."""
    if not _asked():  # a module named on the command line is collected all the same
        pytest.skip(HOW)
    if shutil.which("podman") is None:
        _unavailable("podman is not installed (scripts/ensure-podman installs it, as root)")
    given = os.environ.get("QUEUEY_TEST_IMAGE")
    if given:
        return given
    args = ["build", "--format", "docker", "--pull=never", "-t", IMAGE_TAG]
    base = os.environ.get("QUEUEY_TEST_BASE_IMAGE")
    if base:
        args += ["--build-arg", f"BASE_IMAGE={base}"]
    before = podman("image", "inspect", "--format", "{{.Id}}", IMAGE_TAG, check=False)
    start = time.monotonic()
    try:
        podman(*args, str(ROOT), timeout=600)
    except EngineError as exc:
        _unavailable(f"cannot build the image: {exc}")
    # The image this build replaced, by its id (never a prune): runs on one machine must
    # not pile up a 240 MB image each. Its layers shared with the new one stay.
    after = podman("image", "inspect", "--format", "{{.Id}}", IMAGE_TAG).stdout.strip()
    if before.returncode == 0 and before.stdout.strip() != after:
        podman("rmi", before.stdout.strip(), check=False)
    FIGURES.append(f"image build (layers cached where unchanged): {time.monotonic() - start:.1f} s")
    return IMAGE_TAG


@pytest.fixture
def containers(image: str) -> Iterator[Containers]:
    """Start containers of the image on the host's network, with this worktree's vhost;
    each is removed by name after the test, with its volumes."""
    made = Containers(image, {"QUEUEY_BROKER__URL": AMQP_URL, "QUEUEY_LOG_LEVEL": "info"})
    try:
        yield made
    finally:
        made.remove_all()
