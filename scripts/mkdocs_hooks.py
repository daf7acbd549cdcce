"""MkDocs hook: what the pages say about the rest of the repository, checked.

The pages are plain Markdown with relative links, read on a forge as well as in the
site, so a page may link to `../bench/PROFILE.md` or `../examples/node/enqueue.js`.
MkDocs knows only the files under docs/ and would call those links broken (and a link to
a folder, such as `schema/jobs/`, unrecognized). This hook checks that each such target
exists in the repository, renders the link as its text plus the repository path, and
adds an image to the site so that it still shows. It also checks every repository path
a page names in a code span (`queuey_core/worker/dispatch.py`,
`tests/worker/test_worker.py`) and the README's links into docs/. Each miss is a
warning, so `mkdocs build --strict` fails on it.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.repository_links")

# [text](target) or ![alt](target), target without a scheme; an optional #anchor.
LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
# A repository path in a code span: `queuey_core/worker/dispatch.py`, `tests/x.py::test_y`.
CODE_PATH = re.compile(
    r"`(?P<path>(?:queuey_core|queuey_cli|tests|bench|scripts|examples|handlers|config|docs)"
    r"/[\w./-]*)(?:::\w+)?`"
)
# Paths the pages abbreviate, under queuey_core/: `worker/dispatch.py`, `backends/base.py`.
SHORT_PATH = re.compile(r"`(?P<path>(?:worker|backends|schedules|control|observability)/[\w./-]+)`")
IMAGES_DIR = "_repository"
# The anchors of each page, by its path under docs/, to check the README's links.
_anchors: dict[str, set[str]] = {}


def _outside(page_src: str, target: str, docs: Path) -> str | None:
    """The repository path of `target` if MkDocs cannot serve it, else None.

    That is a file out of docs/, or a folder (in docs/ or not) without an index page.
    """
    if "://" in target or target.startswith(("/", "mailto:")):
        return None
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(page_src), target))
    if joined.startswith("../"):
        return joined[len("../") :]
    folder = docs / joined
    if folder.is_dir() and not (folder / "index.md").exists():
        return f"{docs.name}/{joined}/"
    return None


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Rewrite the page's links to files outside docs/, warning on missing ones."""
    root = Path(config.config_file_path).parent
    docs = Path(config.docs_dir)
    src = page.file.src_uri

    def replace(match: re.Match[str]) -> str:
        path = _outside(src, match["target"], docs)
        if path is None:
            return match[0]
        if not (root / path).exists():
            log.warning("%s links to %s, which is not in the repository", src, path)
            return match[0]
        if match["bang"]:
            image = posixpath.relpath(f"{IMAGES_DIR}/{path}", posixpath.dirname(src) or ".")
            return f"![{match['text']}]({image})"
        text = match["text"]
        if text == path:
            return f"`{path}`"
        return text if path.rstrip("/") in text else f"{text} (`{path}`)"

    out: list[str] = []
    fenced = False
    for line in markdown.splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
        if not fenced:
            _check_paths(line, root, src)
        out.append(line if fenced else LINK.sub(replace, line))
    return "".join(out)


def _check_paths(line: str, root: Path, src: str) -> None:
    """Warn on a file the line names in a code span that is not in the repository: the
    pages name the code's files, and a file that moved makes them wrong."""
    for match in CODE_PATH.finditer(line):
        if not (root / match["path"]).exists():
            log.warning("%s names %s, which is not in the repository", src, match["path"])
    for match in SHORT_PATH.finditer(line):
        path = match["path"]
        if not (root / "queuey_core" / path).exists() and not (root / path).exists():
            log.warning("%s names %s, which is not in queuey_core/", src, path)


def on_files(files: Any, config: Any) -> Any:
    """Add to the site each image a page shows from outside docs/."""
    root = Path(config.config_file_path).parent
    docs = Path(config.docs_dir)
    for page in list(files.documentation_pages()):
        for match in LINK.finditer(Path(page.abs_src_path).read_text()):
            path = _outside(page.src_uri, match["target"], docs)
            uri = f"{IMAGES_DIR}/{path}"
            if (
                match["bang"]
                and path
                and (root / path).is_file()
                and not files.get_file_from_path(uri)
            ):
                files.append(File.generated(config, uri, abs_src_path=str(root / path)))
    return files


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Note the page's anchors (its headings), for the README's links."""
    found: set[str] = set()
    todo = list(page.toc)
    while todo:
        item = todo.pop()
        found.add(item.id)
        todo.extend(item.children)
    _anchors[page.file.src_uri] = found
    return html


def on_post_build(config: Any) -> None:
    """The README is not part of the site, but its links into docs/ are checked too."""
    root = Path(config.config_file_path).parent
    docs = Path(config.docs_dir).relative_to(root).as_posix()
    for match in LINK.finditer((root / "README.md").read_text()):
        target = match["target"]
        if "://" in target or target.startswith(("/", "mailto:")):
            continue
        if not (root / target).exists():
            log.warning("README.md links to %s, which is not in the repository", target)
        elif match["anchor"] and target.startswith(f"{docs}/"):
            page = target[len(docs) + 1 :]
            if match["anchor"][1:] not in _anchors.get(page, set()):
                log.warning("README.md links to %s%s: no such anchor", target, match["anchor"])
