"""The Dockerfile read as text: what holds without an engine, so it runs everywhere
(tests/container's other modules build and run it)."""

from __future__ import annotations

import re

from tests.container.engine import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def test_every_stage_builds_from_the_base_image_argument_with_slim_python_by_default() -> None:
    froms = re.findall(r"^FROM (\S+)", DOCKERFILE, re.MULTILINE)
    assert len(froms) >= 1
    assert all(image == "${BASE_IMAGE}" for image in froms), froms
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim$", DOCKERFILE, re.MULTILINE)
    assert DOCKERFILE.index("ARG BASE_IMAGE") < DOCKERFILE.index("FROM "), "a global ARG"


def test_nothing_in_it_knows_the_test_recipe() -> None:
    for word in ("queuey-base", "bookworm", "debootstrap", "localhost/"):
        assert word not in DOCKERFILE, word


def test_data_has_a_home_the_user_owns_and_the_user_is_not_root() -> None:
    assert re.search(r"^VOLUME /data$", DOCKERFILE, re.MULTILINE)
    assert re.search(r"^WORKDIR /data$", DOCKERFILE, re.MULTILINE), "sqlite:///queuey.db"
    assert "chown queuey:queuey /data" in DOCKERFILE
    users = re.findall(r"^USER (\S+)$", DOCKERFILE, re.MULTILINE)
    assert users[-1] == "queuey"
    assert "COPY queuey_dashboard" in DOCKERFILE, "queuey dashboard works in the image"
