"""Imports go down only: journal <- recovery <- engine <- tools (ARCHITECTURE.md); pyspark is
imported only in tools, and only inside functions (when asked for)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"journal": {"recovery", "engine", "tools", "mqstore"},
             "recovery": {"engine", "tools", "mqstore"}, "engine": {"tools", "mqstore"},
             "tools": {"mqstore"}}  # mqstore: the public namespace, above every layer


def imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node, node.module.split(".")[0]


def test_layers_import_downwards_only() -> None:
    bad = []
    for package, forbidden in FORBIDDEN.items():
        for path in (ROOT / package).rglob("*.py"):
            for _node, top in imports(path):
                if top in forbidden:
                    bad.append(f"{path.relative_to(ROOT)} imports {top}")
    assert not bad, bad


def test_pyspark_only_in_tools_and_lazily() -> None:
    bad = []
    for package in FORBIDDEN:
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text())
            for node in tree.body:  # module level
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                if any(n.split(".")[0] == "pyspark" for n in names):
                    bad.append(str(path.relative_to(ROOT)))
    assert not bad, f"pyspark imported at module level: {bad}"
