"""The shape of the code (issue 19, "Small rooms, no cycles"): no import cycle between
modules, no module over 400 lines, a docstring opening every module.

Imports are read with :mod:`ast`, not run, so every one counts wherever it stands: at
the top, inside a function, or under ``if TYPE_CHECKING:``. An edge goes from a module
to the module it names:

- ``import a.b.c`` and ``from a.b.c import name`` point at ``a.b.c``;
- ``from a.b import c`` points at the submodule ``a.b.c`` when there is one, else at the
  package ``a.b`` (its ``__init__``, which defines or re-exports ``c``);
- relative imports are resolved the same way; names outside the three packages are left
  out, and so is the import of a module's parent packages that Python does on the side
  (counting it would make every package and each of its submodules a cycle).

So a package whose ``__init__`` imports its submodules is no cycle by itself (its edges
point down). A module that imports a name *through* a package whose ``__init__`` leads
back to that module (``from queuey_core import Worker`` inside ``queuey_core.producer``,
say) is one, and is reported: it works only as long as the import order happens to
allow it, and the fix is to import from the module that defines the name. A cycle is
named by its strongly connected component (every module on it) and one path around it.

The allow-lists below hold what was known when these tests came (issue 19); they shrink
as the restructuring lands. An entry that no longer applies is warned about, not failed,
so that the branches that fix them can land in any order.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The packages whose modules are walked: the library, the command line, the examples.
PACKAGES = {
    "queuey_core": ROOT / "queuey_core",
    "queuey_cli": ROOT / "queuey_cli",
    "queuey_example_handlers": ROOT / "handlers" / "queuey_example_handlers",
}
#: What the size and docstring rules cover (the examples are the user's to shape).
LIBRARY = ("queuey_core", "queuey_cli")

MAX_LINES = 400

#: Import cycles known today, each as the modules of its strongly connected component.
#: A cycle passes only if every module on it is in one of these (a cycle half-fixed
#: shrinks and still passes; one that reaches a new module fails).
KNOWN_CYCLES: list[frozenset[str]] = []

#: Modules over MAX_LINES today (their size then in the comment).
KNOWN_BIG: set[str] = set()

#: Modules that open without a docstring today: none.
KNOWN_UNDOCUMENTED: set[str] = set()


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")


def modules(packages: Mapping[str, Path] = PACKAGES) -> dict[str, Module]:
    """Every module of the walked packages, by dotted name."""
    found: dict[str, Module] = {}
    for package, folder in packages.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            name = ".".join((package, *parts))
            found[name] = Module(name, path, is_package)
    return found


def imported(module: Module, known: dict[str, Module]) -> Iterator[str]:
    """The walked modules that ``module`` imports, wherever the import stands."""
    tree = ast.parse(module.text(), filename=str(module.path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _longest_known(alias.name, known)
                if target is not None:
                    yield target
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if alias.name != "*" and submodule in known:
                    yield submodule
                else:
                    target = _longest_known(base, known)
                    if target is not None:
                        yield target


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _longest_known(name: str, known: dict[str, Module]) -> str | None:
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def import_graph(packages: Mapping[str, Path] = PACKAGES) -> dict[str, set[str]]:
    """Each walked module and the walked modules it imports (never itself)."""
    known = modules(packages)
    return {
        name: {target for target in imported(module, known) if target != name}
        for name, module in known.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def a_path_around(component: frozenset[str], graph: dict[str, set[str]]) -> list[str]:
    """One cycle through the component's first module, as the modules in import order."""
    start = min(component)
    # Breadth-first from start's successors back to start, inside the component.
    paths = {nxt: [start, nxt] for nxt in sorted(graph[start] & component)}
    queue = list(paths)
    while queue:
        node = queue.pop(0)
        if node == start:
            return paths[node]
        for nxt in sorted(graph[node] & component):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def describe(component: frozenset[str], graph: dict[str, set[str]]) -> str:
    return " -> ".join(a_path_around(component, graph)) + f"  (all of: {sorted(component)})"


def warn_stale(kind: str, stale: object) -> None:
    warnings.warn(f"{kind}: no longer true, take it off the list: {stale}", stacklevel=2)


# -- the rules -------------------------------------------------------------------------


def test_no_import_cycle_between_modules() -> None:
    graph = import_graph()
    found = cycles(graph)
    new = [c for c in found if not any(c <= known for known in KNOWN_CYCLES)]
    assert not new, "import cycles:\n" + "\n".join(describe(c, graph) for c in new)
    stale = [sorted(k) for k in KNOWN_CYCLES if not any(c <= k for c in found)]
    if stale:
        warn_stale("KNOWN_CYCLES", stale)


def test_no_module_is_over_400_lines() -> None:
    sizes = {
        name: len(module.text().splitlines())
        for name, module in modules().items()
        if name.startswith(LIBRARY)
    }
    big = {name: n for name, n in sizes.items() if n > MAX_LINES}
    new = {name: n for name, n in big.items() if name not in KNOWN_BIG}
    assert not new, f"modules over {MAX_LINES} lines: " + ", ".join(
        f"{modules()[name].path.relative_to(ROOT)} ({n} lines)" for name, n in sorted(new.items())
    )
    stale = sorted(KNOWN_BIG - set(big))
    if stale:
        warn_stale("KNOWN_BIG", stale)


def test_every_module_opens_with_a_docstring() -> None:
    bare = {
        name
        for name, module in modules().items()
        if name.startswith(LIBRARY) and ast.get_docstring(ast.parse(module.text())) is None
    }
    new = bare - KNOWN_UNDOCUMENTED
    assert not new, "modules without a docstring saying what they own: " + ", ".join(
        str(modules()[name].path.relative_to(ROOT)) for name in sorted(new)
    )
    stale = sorted(KNOWN_UNDOCUMENTED - bare)
    if stale:
        warn_stale("KNOWN_UNDOCUMENTED", stale)


# -- the walker itself -------------------------------------------------------------------


def test_the_walker_sees_imports_in_functions_and_under_type_checking() -> None:
    graph = import_graph()
    # queuey_core/__init__.py imports the producer only under TYPE_CHECKING.
    assert "queuey_core.producer" in graph["queuey_core"]
    assert all(name in graph for name in ("queuey_core", "queuey_cli.main"))


def test_a_cycle_is_named_by_a_path_around_it() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    [component] = cycles(graph)
    assert component == {"a", "b", "c"}
    assert a_path_around(component, graph) == ["a", "b", "c", "a"]


def test_imports_count_wherever_they_stand_and_point_at_the_module_named(
    tmp_path: Path,
) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n",
        "a.py": "def later():\n    from pkg.sub import thing\n    from . import b\n",
        "b.py": "import os\nfrom .sub.c import x\n",
        "sub/__init__.py": "from pkg.sub.c import x as thing\n",
        "sub/c.py": "from .. import a\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = import_graph({"pkg": pkg})
    assert graph == {
        "pkg": {"pkg.a"},  # under TYPE_CHECKING
        "pkg.a": {"pkg.sub", "pkg.b"},  # inside a function; a name of pkg.sub, a module
        "pkg.b": {"pkg.sub.c"},  # relative; os is not walked
        "pkg.sub": {"pkg.sub.c"},  # a package importing its submodule points down
        "pkg.sub.c": {"pkg.a"},
    }
    assert cycles(graph) == [frozenset({"pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c"})]
