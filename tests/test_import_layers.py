"""The house's import contract (issue 27): every floor imports only downward, and no package imports itself in a circle.

Read from the source, not from a running interpreter: every ``import`` and ``from ... import`` in every module of
sanitizerd/ and client_shim/ counts, at module level, inside functions (a late import hides a circle; it does not
remove it) and under ``if TYPE_CHECKING:`` (a type that must be imported upward is a design that points upward).

The rules:
- Each module belongs to the unit of the longest prefix of its name in FLOORS, and each unit to a floor. An import
  from one unit into another goes to a strictly lower floor: units on one floor never import each other.
- Some units may import only the units ONLY names, lower or not: client_shim only protocol, so that it can be
  installed without the daemon; sanitizerd_protocol only its model, the ground floor.
- Inside a unit, any direction, but no circle: the module graph, less the listed exceptions, has no cycle.
- EXCEPTIONS lists each import against these rules that is still there, with the reason it is wrong. The list only
  shrinks: an import not listed fails the first tests, and a listed one that no longer occurs (or no longer breaks a
  rule) fails the last, so that it is taken off.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sanitizerd", "sanitizerd_protocol", "client_shim")

# Top floor first. A unit is a module or a package (with everything under it, unless a longer prefix is listed).
FLOORS: tuple[tuple[str, ...], ...] = (
    ("sanitizerd.__main__",),
    ("sanitizerd.pytest_plugin",),
    ("sanitizerd.cli",),
    ("sanitizerd.api",),
    # The control client that cli and api (and the pytest plugin) all speak through.
    ("sanitizerd.control_client",),
    ("sanitizerd.workers",),
    ("sanitizerd.daemon",),
    # The process's plumbing: what the daemon and the workers wire together, none of it serving a connection.
    (
        "sanitizerd.config",
        "sanitizerd.fds",
        "sanitizerd.logs",
        "sanitizerd.socket_file",
        "sanitizerd.systemd",
        "sanitizerd.allocator",
    ),
    # All connection I/O: accept, peer credentials, admission, both doors' hellos, the msSanitizer-form sockets.
    ("sanitizerd.server",),
    # The two doors' sans-I/O halves: the native sessions and msSanitizer's wire. Neither imports the other.
    ("sanitizerd.sessions", "sanitizerd.compat"),
    ("sanitizerd.detectors", "sanitizerd.metrics"),
    # Small leaves the floors above share; the client sits here as it needs protocol alone (see ONLY).
    ("sanitizerd.chips", "sanitizerd.demangle", "sanitizerd.metrics_server", "sanitizerd.native", "client_shim"),
    ("sanitizerd_protocol",),
    # Stores and renderers: they know findings and sessions' records, not the wire.
    ("sanitizerd.findings",),
    # The ground floor: Finding, Suppression, SessionInfo; and the package's version.
    ("sanitizerd_protocol.model", "sanitizerd"),
)

ONLY: dict[str, frozenset[str]] = {
    "client_shim": frozenset({"sanitizerd_protocol", "sanitizerd_protocol.model"}),
    "sanitizerd_protocol": frozenset({"sanitizerd_protocol.model"}),
}

# Arrows the floors allow but the house does not: (importer unit, imported unit) -> why.
FORBIDDEN: dict[tuple[str, str], str] = {
    ("sanitizerd.compat", "sanitizerd.detectors"): "compat is the msSanitizer wire: it imports protocol, not checks",
}

# (importer module, imported module) -> why it is wrong; each goes when its import does.
EXCEPTIONS: dict[tuple[str, str], str] = {
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    how: str  # "module level", "late" (inside a function) or "TYPE_CHECKING"

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} ({self.how}, line {self.line})"


def module_files() -> dict[str, Path]:
    """Every module of the packages, by dotted name (a package by its own name, for its __init__)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


MODULES = module_files()


class _Finder(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool) -> None:
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.how = "module level"
        self.found: list[Import] = []

    def _under(self, how: str, nodes: list[ast.stmt]) -> None:
        outer, self.how = self.how, how
        for node in nodes:
            self.visit(node)
        self.how = outer

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._under("TYPE_CHECKING" if self.how == "TYPE_CHECKING" else "late", [*node.decorator_list, *node.body])

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        test = ast.unparse(node.test)
        if test in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            self._under("TYPE_CHECKING", node.body)
            self._under(self.how, node.orelse)
        else:
            self.generic_visit(node)

    def _add(self, name: str, node: ast.stmt) -> None:
        # The name is always a module's (a compiled one, such as client_shim._record_buffer, has no .py file).
        if name.partition(".")[0] in PACKAGES and name != self.module:
            self.found.append(Import(self.module, name, node.lineno, self.how))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")[: len(self.package.split(".")) - (node.level - 1)]
            source = ".".join([*base, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        for alias in node.names:
            # "from pkg import mod" imports the module; "from mod import name" imports mod.
            self._add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source, node)


def imports() -> list[Import]:
    found = []
    for module, path in MODULES.items():
        finder = _Finder(module, path.name == "__init__.py")
        finder.visit(ast.parse(path.read_text(), str(path)))
        found.extend(finder.found)
    return found


IMPORTS = imports()
FLOOR = {unit: height for height, units in enumerate(reversed(FLOORS)) for unit in units}


def unit_of(module: str) -> str:
    candidates = [unit for unit in FLOOR if module == unit or module.startswith(unit + ".")]
    if not candidates:
        raise KeyError(f"{module} has no floor: give it one in FLOORS")
    return max(candidates, key=len)


def broken_rule(edge: Import) -> str | None:
    """Which rule an import breaks, or None."""
    source, target = unit_of(edge.importer), unit_of(edge.imported)
    if source == target:
        return None
    if source in ONLY and target not in ONLY[source]:
        return f"{source} may import only {', '.join(sorted(ONLY[source]))}"
    if (source, target) in FORBIDDEN:
        return FORBIDDEN[source, target]
    if FLOOR[target] >= FLOOR[source]:
        return f"{target} is not below {source}"
    return None


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's, iteratively)."""
    graph: dict[str, list[str]] = {}
    for source, target in sorted(edges):
        graph.setdefault(source, []).append(target)
        graph.setdefault(target, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(graph[successor])))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_every_module_has_a_floor() -> None:
    """A new module must be given a floor before the contract can judge its imports."""
    missing = []
    for module in MODULES:
        try:
            unit_of(module)
        except KeyError:
            missing.append(module)
    assert not missing, f"modules without a floor in FLOORS: {missing}"


def test_imports_go_only_downward() -> None:
    """Every import, late and TYPE_CHECKING ones too, goes to a lower floor or stays in its unit."""
    wrong = [
        f"{edge}: {rule}"
        for edge in IMPORTS
        if (rule := broken_rule(edge)) is not None and (edge.importer, edge.imported) not in EXCEPTIONS
    ]
    assert not wrong, "imports against the floors:\n" + "\n".join(wrong)


def test_no_import_circles() -> None:
    """No module imports itself through others; an exception's import is left out of the graph it judges."""
    edges = {(edge.importer, edge.imported) for edge in IMPORTS} - set(EXCEPTIONS)
    assert not cycles(edges), f"import circles: {cycles(edges)}"


def test_exceptions_still_occur() -> None:
    """Each listed exception is an import that is still there and still breaks a rule, so the list stays honest."""
    edges = {(edge.importer, edge.imported) for edge in IMPORTS}
    circular = {module for component in cycles(edges) for module in component}
    stale = []
    for importer, imported in EXCEPTIONS:
        if (importer, imported) not in edges:
            stale.append(f"{importer} -> {imported}: no longer imported")
            continue
        edge = next(e for e in IMPORTS if (e.importer, e.imported) == (importer, imported))
        if broken_rule(edge) is None and not {importer, imported} <= circular:
            stale.append(f"{importer} -> {imported}: breaks no rule now")
    assert not stale, "exceptions to take off EXCEPTIONS:\n" + "\n".join(stale)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import sanitizerd_protocol.messages", "sanitizerd_protocol.messages"),
        ("from sanitizerd_protocol import messages", "sanitizerd_protocol.messages"),
        ("from sanitizerd_protocol import Connection", "sanitizerd_protocol"),
        ("from sanitizerd_protocol.messages import Hello", "sanitizerd_protocol.messages"),
        ("from .records import EVENT_DTYPE", "sanitizerd_protocol.records"),
        ("from . import records", "sanitizerd_protocol.records"),
    ],
)
def test_finder_resolves_imports(source: str, expected: str) -> None:
    """Absolute and relative imports, of modules and of names, resolve to the module that holds them."""
    finder = _Finder("sanitizerd_protocol.texts", is_package=False)
    finder.visit(ast.parse(source))
    assert [edge.imported for edge in finder.found] == [expected]


def test_finder_sees_late_and_type_checking_imports() -> None:
    """Imports inside functions and under TYPE_CHECKING count, and say where they were found."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from sanitizerd.daemon import Daemon\n"
        "def f() -> None:\n    import sanitizerd.cli.main\n"
        "import sanitizerd_protocol.model\n"
    )
    finder = _Finder("sanitizerd_protocol.texts", is_package=False)
    finder.visit(ast.parse(source))
    assert [(edge.imported, edge.how) for edge in finder.found] == [
        ("sanitizerd.daemon", "TYPE_CHECKING"),
        ("sanitizerd.cli.main", "late"),
        ("sanitizerd_protocol.model", "module level"),
    ]
