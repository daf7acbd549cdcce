"""Every test a page cites as keeping a promise exists.

The pages name the tests that keep what they promise ("measured by
`test_fault_suite.py`", "`test_faults.py::test_a_settle_on_a_dead_channel_...`"). A test
renamed or deleted leaves the promise unkept while the page still vouches for it; the
site build checks the files a page names, and this checks the test functions.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_test_a_page_names_is_a_test_of_the_suite() -> None:
    suite = list((REPO / "tests").rglob("*.py"))
    defined = {n for p in suite for n in re.findall(r"def (test_\w+)", p.read_text())}
    modules = {p.stem for p in suite}
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    cited = {(p.name, n) for p in pages for n in re.findall(r"\b(test_\w+)", p.read_text())}
    assert len(cited) > 50, "the pattern still finds the pages' citations"
    gone = sorted((page, name) for page, name in cited if name not in defined | modules)
    assert not gone, f"pages cite tests that do not exist: {gone}"
