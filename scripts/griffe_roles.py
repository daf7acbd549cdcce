"""Griffe extension: the Sphinx roles of queuey's docstrings, for the API reference.

The docstrings name other objects the Sphinx way (:class:`~queuey_core.errors.Fatal`,
:meth:`WorkerHandle.shutdown`). MkDocs would print those roles literally. This extension
resolves each name from where the docstring stands: a name that no longer resolves is a
warning (so `mkdocs build --strict` fails on a stale reference); one the reference pages
render becomes a cross-reference; any other becomes plain code.

Options (mkdocs.yml): ``exports``, packages whose ``__all__`` the reference renders, and
``modules``, modules rendered with every public member.
"""

from __future__ import annotations

import builtins
import re
from typing import Any

import griffe

logger = griffe.get_logger("griffe_roles")

ROLE = re.compile(r":(?:class|meth|func|attr|mod|data|exc|obj):`(?P<tilde>~?)(?P<name>[^`]+)`")


class SphinxRoles(griffe.Extension):
    """Rewrites :role:`name` in every docstring of a loaded package."""

    def __init__(self, exports: list[str] | None = None, modules: list[str] | None = None):
        super().__init__()
        self.exports = exports or []
        self.modules = modules or []

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        """Rewrite the roles once the whole package is loaded, so every name resolves."""
        rendered = self._rendered(loader)
        for obj in _walk(pkg):
            if obj.docstring is not None and ":" in obj.docstring.value:
                obj.docstring.value = ROLE.sub(
                    lambda m, o=obj: self._rewrite(o, m, loader, rendered),  # type: ignore[misc]
                    obj.docstring.value,
                )

    def _rendered(self, loader: griffe.GriffeLoader) -> set[str]:
        """The canonical paths of the objects the reference pages render."""
        paths: set[str] = set()
        for name in self.exports:
            module = _lookup(loader, name)
            if not isinstance(module, griffe.Module):
                continue
            for export in module.exports or ():
                member = module.members.get(str(export))
                if member is not None:
                    paths.add(member.path)
                    paths.add(_canonical(member))
        for name in self.modules:
            module = _lookup(loader, name)
            if module is not None:
                paths.add(module.path)
                paths.update(m.path for n, m in module.members.items() if not n.startswith("_"))
        return paths

    def _rewrite(
        self, obj: griffe.Object, match: re.Match[str], loader: Any, rendered: set[str]
    ) -> str:
        name = match["name"].strip()
        text = name.rsplit(".", 1)[-1] if match["tilde"] else name
        path = _resolve(obj, name, loader)
        if path is None:
            location = f"{obj.relative_filepath}:{obj.lineno}"
            logger.warning("%s: %s names %s, which does not resolve", location, obj.path, name)
            return f"`{text}`"
        if path == "external":
            return f"`{text}`"
        if _links(path, rendered):
            return f"[`{text}`][{path}]"
        return f"`{text}`"


def _walk(obj: griffe.Object) -> Any:
    """Every object defined in this module or class, itself first (aliases skipped)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias and isinstance(member, griffe.Object):
            yield from _walk(member)


def _lookup(loader: griffe.GriffeLoader, path: str) -> Any:
    """The object at a dotted path in the loaded packages, or None."""
    root, _, rest = path.partition(".")
    try:
        top = loader.modules_collection[root]
        return top[rest] if rest else top
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _canonical(obj: Any) -> str:
    """Where an object is defined, seen through any alias."""
    try:
        return str(obj.final_target.path) if obj.is_alias else str(obj.path)
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return str(obj.path)


def _resolve(obj: griffe.Object, name: str, loader: griffe.GriffeLoader) -> str | None:
    """The canonical path ``name`` means in ``obj``'s docstring; "external" for another
    library; None when it names nothing."""
    if name.startswith("."):
        # Sphinx's ".name": the name as seen from here, then from each enclosing scope.
        scope: Any = obj
        while scope is not None:
            found = _lookup(loader, f"{scope.path}{name}")
            if found is not None:
                return _canonical(found)
            scope = scope.parent
        return None
    head, _, rest = name.partition(".")
    if head in loader.modules_collection:
        found = _lookup(loader, name)
        return None if found is None else _canonical(found)
    try:
        base = obj.resolve(head)
    except griffe.NameResolutionError:
        # Not defined nor imported where the docstring stands: as Sphinx does, look for
        # the one object of that name in our packages; else a builtin, or stale.
        candidates = _short_names(loader).get(head, [])
        if len(candidates) == 1:
            base = candidates[0]
        elif head in dir(builtins):
            return "external"
        else:
            return None
    if base.split(".", 1)[0] not in loader.modules_collection:
        return "external"
    found = _lookup(loader, f"{base}.{rest}" if rest else base)
    return None if found is None else _canonical(found)


_SHORT: dict[int, dict[str, list[str]]] = {}


def _short_names(loader: griffe.GriffeLoader) -> dict[str, list[str]]:
    """Every module, class and function of the loaded packages, by its own name."""
    if id(loader) not in _SHORT:
        index: dict[str, list[str]] = {}
        for top in loader.modules_collection.members.values():
            for obj in _walk(top):
                if obj.is_module or obj.is_class or obj.is_function:
                    index.setdefault(obj.name, []).append(obj.path)
        _SHORT[id(loader)] = index
    return _SHORT[id(loader)]


def _links(path: str, rendered: set[str]) -> bool:
    """Whether the reference renders ``path`` (an object, or a public member of one)."""
    if path in rendered:
        return True
    parent, _, member = path.rpartition(".")
    return not member.startswith("_") and parent in rendered
