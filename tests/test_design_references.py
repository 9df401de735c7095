"""docs/design.md names code as `file.py:Name.attr`: every such name must exist, so the walk it describes stays true."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
PACKAGES = ("sanitizerd", "sanitizerd_protocol", "client_shim")
REFERENCE = re.compile(r"`([A-Za-z_][\w/]*\.py):([A-Za-z_][\w.]*)`")


def _source_files() -> list[Path]:
    return [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]


def _file_named(written: str, files: list[Path]) -> Path | None:
    """The one source file whose path ends with what the page wrote (the page may leave off leading folders)."""
    matches = [p for p in files if p.as_posix().endswith("/" + written)]
    return matches[0] if len(matches) == 1 else None


def _names(scope: list[ast.stmt]) -> dict[str, list[ast.stmt]]:
    """What a module or class body defines, each with its own body (empty for a plain assignment)."""
    defined: dict[str, list[ast.stmt]] = {}
    for node in scope:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined[node.name] = node.body if isinstance(node, ast.ClassDef) else []
        elif isinstance(node, ast.Assign):
            defined.update({t.id: [] for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined[node.target.id] = []
    return defined


def _defines(path: Path, dotted: str) -> bool:
    scope = ast.parse(path.read_text()).body
    for part in dotted.split("."):
        defined = _names(scope)
        if part not in defined:
            return False
        scope = defined[part]
    return True


def test_every_named_function_exists() -> None:
    files = _source_files()
    references = REFERENCE.findall(DESIGN.read_text())
    assert len(references) >= 30, "the house section's walk should name its steps"
    missing = []
    for file, name in references:
        path = _file_named(file, files)
        if path is None or not _defines(path, name):
            missing.append(f"{file}:{name}")
    assert not missing, f"docs/design.md names what does not exist: {missing}"


def test_a_renamed_function_is_caught(tmp_path: Path) -> None:
    module = tmp_path / "door.py"
    module.write_text("class Doors:\n    def native(self) -> None: ...\n\ndef open_producer() -> None: ...\n")
    assert _defines(module, "Doors.native")
    assert _defines(module, "open_producer")
    assert not _defines(module, "Doors.compat")
    assert not _defines(module, "Door.native")
