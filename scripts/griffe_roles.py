"""Griffe extension: the Sphinx roles of queuey's docstrings, for the API reference.

The docstrings name other objects the Sphinx way (:class:`~queuey_core.errors.Fatal`,
:meth:`WorkerHandle.shutdown`). MkDocs would print those roles literally. This extension
resolves each name from where the docstring stands: a name that no longer resolves is a
warning (so `mkdocs build --strict` fails on a stale reference); one the reference pages
render becomes a cross-reference; any other becomes plain code.

Options (mkdocs.yml): ``packages``, our packages, whose docstrings are checked once all
of them are loaded (preload them); ``exports``, packages whose ``__all__`` the reference
renders; ``modules``, modules it renders with every public member.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterator
from typing import Any

import griffe

logger = griffe.get_logger("griffe_roles")

ROLE = re.compile(r":(?:class|meth|func|attr|mod|data|exc|obj):`(?P<tilde>~?)(?P<name>[^`]+)`")


class SphinxRoles(griffe.Extension):
    """Rewrites :role:`name` in every docstring of our packages."""

    def __init__(
        self,
        packages: list[str] | None = None,
        exports: list[str] | None = None,
        modules: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.packages = packages or []
        self.exports = exports or []
        self.modules = modules or []
        # The package objects already rewritten (a package may be loaded again: a new one).
        self._done: set[int] = set()

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        """Once every one of our packages is loaded, rewrite their docstrings' roles."""
        collection = loader.modules_collection
        if pkg.name not in self.packages or any(p not in collection for p in self.packages):
            return
        resolver = _Resolver(loader, self.packages)
        rendered = self._rendered(resolver)
        for name in self.packages:
            if id(collection[name]) in self._done:
                continue
            self._done.add(id(collection[name]))
            for obj in _walk(collection[name]):
                if obj.docstring is not None and ":" in obj.docstring.value:
                    obj.docstring.value = ROLE.sub(
                        lambda m, o=obj: _rewrite(o, m, resolver, rendered),  # type: ignore[misc]
                        obj.docstring.value,
                    )

    def _rendered(self, resolver: _Resolver) -> set[str]:
        """The canonical paths of the objects the reference pages render."""
        paths: set[str] = set()
        for name in self.exports:
            module = resolver.lookup(name)
            if isinstance(module, griffe.Module):
                for export in module.exports or ():
                    member = module.members.get(str(export))
                    if member is not None:
                        paths.update((member.path, _canonical(member)))
        for name in self.modules:
            module = resolver.lookup(name)
            if module is not None:
                # As mkdocstrings shows them: public, and documented (or with documented
                # members); the module itself has no heading of its own.
                paths.update(
                    m.path
                    for n, m in module.members.items()
                    if not n.startswith("_") and not m.is_alias and m.has_docstrings
                )
        return paths


class _Resolver:
    """Finds what a name in a docstring means, in our loaded packages."""

    def __init__(self, loader: griffe.GriffeLoader, packages: list[str]) -> None:
        self.collection = loader.modules_collection
        self.packages = packages
        self.by_name: dict[str, list[str]] = {}
        for package in packages:
            for obj in _walk(self.collection[package]):
                if obj.is_module or obj.is_class or obj.is_function:
                    self.by_name.setdefault(obj.name, []).append(obj.path)

    def lookup(self, path: str) -> Any:
        """The object at a dotted path in our packages, or None."""
        root, _, rest = path.partition(".")
        if root not in self.packages:
            return None
        try:
            top = self.collection[root]
            return top[rest] if rest else top
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None

    def resolve(self, obj: griffe.Object, name: str) -> str | None:
        """The canonical path ``name`` means in ``obj``'s docstring; "external" for
        another library's or a builtin; None when it names nothing."""
        if name.startswith("."):
            # Sphinx's ".name": the name as seen from here, then from each enclosing scope.
            scope: Any = obj
            while scope is not None:
                found = self.lookup(f"{scope.path}{name}")
                if found is not None:
                    return _canonical(found)
                scope = scope.parent
            return None
        head, _, rest = name.partition(".")
        if head in self.packages:
            base = head
        else:
            try:
                base = obj.resolve(head)
            except griffe.NameResolutionError:
                # Not defined nor imported where the docstring stands: as Sphinx does,
                # look for the one object of that name in this module (a method its
                # docstring names), else in our packages.
                candidates = self.by_name.get(head, [])
                here = [c for c in candidates if c.startswith(f"{obj.module.path}.")]
                if len(here) == 1:
                    base = here[0]
                elif len(candidates) == 1:
                    base = candidates[0]
                elif head in dir(builtins) or "." in name:
                    return "external"  # a builtin, or another library's dotted name
                else:
                    return None
        if base.split(".", 1)[0] not in self.packages:
            return "external"
        found = self.lookup(f"{base}.{rest}" if rest else base)
        return None if found is None else _canonical(found)


def _rewrite(
    obj: griffe.Object, match: re.Match[str], resolver: _Resolver, rendered: set[str]
) -> str:
    name = match["name"].strip()
    text = name.rsplit(".", 1)[-1] if match["tilde"] else name
    path = resolver.resolve(obj, name)
    if path is None:
        location = f"{obj.relative_filepath}:{obj.lineno or 1}"
        logger.warning("%s: %s names %s, which does not resolve", location, obj.path, name)
        return f"`{text}`"
    if path != "external" and _links(path, rendered):
        return f"[`{text}`][{path}]"
    return f"`{text}`"


def _walk(obj: griffe.Object) -> Iterator[griffe.Object]:
    """Every object defined in this module or class, itself first (aliases skipped)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias and isinstance(member, griffe.Object):
            yield from _walk(member)


def _canonical(obj: Any) -> str:
    """Where an object is defined, seen through any alias."""
    try:
        return str(obj.final_target.path) if obj.is_alias else str(obj.path)
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return str(obj.path)


def _links(path: str, rendered: set[str]) -> bool:
    """Whether the reference renders ``path`` (an object, or a public member of one)."""
    if path in rendered:
        return True
    parent, _, member = path.rpartition(".")
    return not member.startswith("_") and parent in rendered
