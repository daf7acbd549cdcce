"""What the pages point to exists: every test a page cites as keeping a promise, and
every page of the site in the lists that lead readers to them, and every thread the
code starts in the architecture page's table of threads.

The pages name the tests that keep what they promise ("measured by
`test_fault_suite.py`", "`test_faults.py::test_a_settle_on_a_dead_channel_...`"). A test
renamed or deleted leaves the promise unkept while the page still vouches for it; the
site build checks the files a page names, and this checks the test functions. A page
missing from the home page's and the README's lists is found only through the nav.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_test_a_page_names_is_a_test_of_the_suite() -> None:
    # The example handlers' tests run in the suite too (pyproject's testpaths).
    suite = [*(REPO / "tests").rglob("*.py"), *(REPO / "handlers" / "tests").rglob("*.py")]
    defined = {n for p in suite for n in re.findall(r"def (test_\w+)", p.read_text())}
    modules = {p.stem for p in suite}
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    cited = {(p.name, n) for p in pages for n in re.findall(r"\b(test_\w+)", p.read_text())}
    assert len(cited) > 50, "the pattern still finds the pages' citations"
    gone = sorted((page, name) for page, name in cited if name not in defined | modules)
    assert not gone, f"pages cite tests that do not exist: {gone}"


def test_the_home_page_and_the_readme_list_every_page_of_the_site() -> None:
    nav = (REPO / "mkdocs.yml").read_text()
    pages = set(re.findall(r":\s+([a-z-]+\.md)$", nav, re.MULTILINE)) - {"index.md"}
    assert len(pages) > 25, "the pattern still reads mkdocs.yml's nav"
    home = (REPO / "docs" / "index.md").read_text()
    readme = (REPO / "README.md").read_text()
    assert not {p for p in pages if f"({p}" not in home}, "docs/index.md lists every page"
    assert not {p for p in pages if f"(docs/{p}" not in readme}, "so does the README"


def test_every_thread_queuey_starts_is_in_the_architecture_pages_table() -> None:
    made = re.compile(r"(?:name|thread_name_prefix)=\"(queuey-[a-z0-9-]+)\"")
    started = {n for p in (REPO / "queuey_core").rglob("*.py") for n in made.findall(p.read_text())}
    assert len(started) > 15, "the pattern still finds the threads' names"
    page = (REPO / "docs" / "architecture.md").read_text()
    table = page.split("| thread | started by |", 1)[1].split("\n## ", 1)[0]
    missing = sorted(n for n in started if f"`{n}" not in table)
    assert not missing, f"threads architecture.md's table does not list: {missing}"
