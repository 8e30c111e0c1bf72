"""Imports go down only: journal <- recovery <- engine <- tools (ARCHITECTURE.md); pyspark is
imported only in tools, and only inside functions (when asked for). Inside the installed
package the layers are ``mqstore.journal`` ... ``mqstore.tools``: a layer imports its own
modules relatively and the layers below as ``mqstore.<layer>``; no layer imports a bare
``journal``/``engine``/... (that name does not exist once installed) nor the ``mqstore``
facade above it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, Tuple

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("journal", "recovery", "engine", "tools")
BELOW = {"journal": set(), "recovery": {"journal"}, "engine": {"journal", "recovery"},
         "tools": {"journal", "recovery", "engine"}}


def imports(path: Path) -> Iterator[Tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``, relative ones resolved."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = ["mqstore"] + parts[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                yield node.lineno, ".".join(base + ([node.module] if node.module else []))
            elif node.module:
                yield node.lineno, node.module


def test_layers_import_downwards_only() -> None:
    bad = []
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            for line, name in imports(path):
                words = name.split(".")
                where = f"{path.relative_to(ROOT)}:{line} imports {name}"
                if words[0] in LAYERS:
                    bad.append(where + " (a bare layer name: not installed)")
                elif words[0] == "mqstore":
                    if len(words) < 2 or words[1] not in LAYERS:
                        bad.append(where + " (the facade above every layer)")
                    elif words[1] != layer and words[1] not in BELOW[layer]:
                        bad.append(where + " (a layer above)")
    assert not bad, bad


def test_the_rule_sees_relative_and_absolute_imports() -> None:
    """The resolution above is what the layering test relies on: a relative import that climbs
    out of its layer is seen as the layer it reaches."""
    path = ROOT / "recovery" / "store.py"
    names = {name for _line, name in imports(path)}
    assert any(n.startswith("mqstore.journal") for n in names), names
    assert any(n.startswith("mqstore.recovery.") for n in names), names


def test_pyspark_only_in_tools_and_lazily() -> None:
    bad = []
    for package in LAYERS:
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
