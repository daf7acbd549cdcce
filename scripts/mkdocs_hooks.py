"""MkDocs hook: links from a page under docs/ to the rest of the repository.

The pages are plain Markdown with relative links, read on a forge as well as in the
site, so a page may link to `../bench/PROFILE.md` or `../examples/node/enqueue.js`.
MkDocs knows only the files under docs/ and would call those links broken (and a link to
a folder, such as `schema/jobs/`, unrecognized). This hook
checks that each such target exists in the repository (a warning, so `--strict` fails on
a stale one), renders a link as the text it had plus the repository path, and copies an
image into the site so that it still shows.
"""

from __future__ import annotations

import logging
import posixpath
import re
import shutil
from pathlib import Path
from typing import Any

from mkdocs.utils import get_relative_url

log = logging.getLogger("mkdocs.hooks.repository_links")

# [text](target) or ![alt](target), target without a scheme; an optional #anchor.
LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
IMAGES_DIR = "_repository"
_images: dict[str, Path] = {}


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
            _images[path] = root / path
            url = get_relative_url(f"{IMAGES_DIR}/{path}", page.url)
            return f"![{match['text']}]({url})"
        text = match["text"]
        return text if path.rstrip("/") in text else f"{text} (`{path}`)"

    out: list[str] = []
    fenced = False
    for line in markdown.splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
        out.append(line if fenced else LINK.sub(replace, line))
    return "".join(out)


def on_post_build(config: Any) -> None:
    """Copy the images pages showed from outside docs/ into the site."""
    for path, source in _images.items():
        dest = Path(config.site_dir) / IMAGES_DIR / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, dest)
