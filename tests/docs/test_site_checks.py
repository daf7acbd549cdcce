"""The documentation site's own checks (scripts/mkdocs_hooks.py, scripts/griffe_roles.py).

`./scripts/test` builds the site with `mkdocs build --strict`, which fails on any warning
these checks log. Here each check is shown to warn on what it exists to catch (a link or
a path to a file that is gone, a docstring naming something that no longer exists) and
to stay quiet on what is fine, without building a site.
"""

from __future__ import annotations

import importlib.util
import logging
import textwrap
from pathlib import Path
from types import ModuleType
from types import SimpleNamespace
from typing import Any

import griffe
import pytest

REPO = Path(__file__).resolve().parents[2]


def load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = load_script("mkdocs_hooks")


def render(markdown: str, src_uri: str = "guide.md") -> str:
    """The page as the hook hands it on, for a page of this repository's docs/."""
    config = SimpleNamespace(config_file_path=str(REPO / "mkdocs.yml"), docs_dir=str(REPO / "docs"))
    page = SimpleNamespace(file=SimpleNamespace(src_uri=src_uri), url=src_uri[:-3] + "/")
    result: str = hooks.on_page_markdown(markdown, page=page, config=config, files=None)
    return result


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_link_out_of_docs_becomes_the_repository_path(caplog: pytest.LogCaptureFixture) -> None:
    text = render(
        "Every figure is in [bench/RESULTS.md](../bench/RESULTS.md); "
        "[a Node producer](../examples/node/enqueue.js)."
    )
    assert text == (
        "Every figure is in `bench/RESULTS.md`; a Node producer (`examples/node/enqueue.js`)."
    )
    assert warnings(caplog) == []


def test_a_link_to_a_file_that_is_gone_warns(caplog: pytest.LogCaptureFixture) -> None:
    render("See [the profile](../bench/GONE.md).")
    assert warnings(caplog) == ["guide.md links to bench/GONE.md, which is not in the repository"]


def test_a_path_named_in_code_that_is_gone_warns(caplog: pytest.LogCaptureFixture) -> None:
    render(
        "Kept in `queuey_core/envelope.py` and `worker/dispatch.py`, tested by "
        "`tests/worker/test_worker.py::test_x`; once in `queuey_core/gone.py` and "
        "`worker/gone.py`.\n\n```sh\ncat queuey_core/in_a_fence_is_not_checked.py\n```\n"
    )
    assert warnings(caplog) == [
        "guide.md names queuey_core/gone.py, which is not in the repository",
        "guide.md names worker/gone.py, which is not in queuey_core/",
    ]


def test_links_between_pages_are_left_to_mkdocs(caplog: pytest.LogCaptureFixture) -> None:
    markdown = "[Guarantees](guarantees.md#at-least-once) and [Worker](https://example.com)"
    assert render(markdown) == markdown
    assert warnings(caplog) == []


PACKAGE = {
    "__init__.py": '''
        """A package. :class:`Thing` is exported; :mod:`.inner` is not rendered."""
        from roles_pkg.inner import Thing

        __all__ = ["Thing"]
    ''',
    "other.py": '''
        """Another module with a run."""


        def run() -> None:
            """Run."""
    ''',
    "inner.py": '''
        """Inner. :class:`~roles_pkg.inner.Thing`, :meth:`Thing.run`, :func:`helper`,
        :class:`ValueError`, :class:`pika.BlockingConnection` and :func:`gone`.
        :meth:`run` is this module's, though other.py has one too."""


        class Thing:
            """A thing."""

            def run(self) -> None:
                """Run :class:`Missing`."""


        def helper() -> None:
            """Help."""
    ''',
}


def load_package(tmp_path: Path) -> Any:
    for name, text in PACKAGE.items():
        path = tmp_path / "roles_pkg" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(textwrap.dedent(text))
    extensions = griffe.load_extensions(
        {
            str(REPO / "scripts" / "griffe_roles.py"): {
                "packages": ["roles_pkg"],
                "exports": ["roles_pkg"],
            }
        }
    )
    return griffe.load("roles_pkg", search_paths=[tmp_path], extensions=extensions)


def test_roles_become_references_or_code_and_stale_ones_warn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    package = load_package(tmp_path)
    inner = package["inner"]
    assert inner.docstring.value == (
        "Inner. [`Thing`][roles_pkg.inner.Thing], [`Thing.run`][roles_pkg.inner.Thing.run], "
        "`helper`,\n`ValueError`, `pika.BlockingConnection` and `gone`.\n"
        "[`run`][roles_pkg.inner.Thing.run] is this module's, though other.py has one too."
    )
    assert package.docstring.value == (
        "A package. [`Thing`][roles_pkg.inner.Thing] is exported; `.inner` is not rendered."
    )
    stale = [m.split("roles_pkg/", 1)[1] for m in warnings(caplog) if "does not resolve" in m]
    assert stale == [
        "inner.py:1: roles_pkg.inner names gone, which does not resolve",
        "inner.py:10: roles_pkg.inner.Thing.run names Missing, which does not resolve",
    ]
