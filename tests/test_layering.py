"""Imports go down only: journal <- recovery <- engine <- tools (ARCHITECTURE.md); pyspark is
imported only in tools, and only inside functions (when asked for). Inside the installed
package the layers are ``mqstore.journal`` ... ``mqstore.tools``: a layer imports its own
modules relatively and the layers below as ``mqstore.<layer>``; no layer imports a bare
``journal``/``engine``/... (that name does not exist once installed) nor the ``mqstore``
facade above it. One module of the ``mqstore`` package sits below every layer instead:
``mqstore.compiled`` (which modules are compiled; read by ``setup.py`` before anything is
built), which imports nothing of mqstore's."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("journal", "recovery", "engine", "tools")
BELOW = {"journal": set(), "recovery": {"journal"}, "engine": {"journal", "recovery"},
         "tools": {"journal", "recovery", "engine"}}
BASE = {"mqstore.compiled"}  # below every layer: imports nothing of mqstore's


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
                elif words[0] == "mqstore" and name not in BASE:
                    if len(words) < 2 or words[1] not in LAYERS:
                        bad.append(where + " (the facade above every layer)")
                    elif words[1] != layer and words[1] not in BELOW[layer]:
                        bad.append(where + " (a layer above)")
    assert not bad, bad


def test_the_base_modules_import_nothing_of_mqstore() -> None:
    for name in BASE:
        path = ROOT / Path(*name.split(".")).with_suffix(".py")
        assert [n for _line, n in imports(path) if n.split(".")[0] in ("mqstore", *LAYERS)] \
            == [], name


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


# The engine's rooms, lowest first (ARCHITECTURE.md "Rooms"; each package's ``__init__`` says
# the same in words): a module imports modules of its own room and of the rooms before it only.
# ``base`` and ``facade`` are the modules at ``engine/``'s top: the values, errors and public
# dataclasses everything uses, and the public surface over the subsystems.
ENGINE_ROOMS = ("base", "filters", "addressing", "config", "paging", "storage", "queues",
                "routing", "scheduling", "delivery", "facade")
ENGINE_BASE = {"errors", "values", "model"}


def engine_room(module: str) -> str:
    """The room of ``mqstore.engine[.x[.y]]``."""
    parts = module.split(".")[2:]
    if not parts:
        return "facade"  # the package itself (``from . import X`` in its __init__)
    if parts[0] in ENGINE_ROOMS and (ROOT / "engine" / parts[0]).is_dir():
        return parts[0]
    return "base" if parts[0] in ENGINE_BASE else "facade"


def test_every_engine_module_is_in_a_room() -> None:
    """A new folder under engine/ must join the table (else it would count as the facade)."""
    folders = {p.name for p in (ROOT / "engine").iterdir()
               if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(ENGINE_ROOMS) - {"base", "facade"}, folders


def test_engine_rooms_import_downwards_only() -> None:
    bad = []
    for path in (ROOT / "engine").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        here = engine_room(".".join(["mqstore"] + parts))
        for line, name in imports(path):
            if not name.startswith("mqstore.engine"):
                continue
            there = engine_room(name)
            if ENGINE_ROOMS.index(there) > ENGINE_ROOMS.index(here):
                bad.append(f"{path.relative_to(ROOT)}:{line} ({here}) imports {name} ({there})")
    assert not bad, bad


def module_imports(path: Path) -> Iterator[str]:
    """The modules ``path`` needs: its top-level imports, those under ``if TYPE_CHECKING:``
    included (a type a module names is a need, loaded or not), not those in functions;
    ``from .pkg import mod`` names the module ``pkg.mod`` when there is one."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = ["mqstore"] + parts[:-1]
    body = ast.parse(path.read_text()).body
    for block in [n for n in body if isinstance(n, ast.If)]:  # if TYPE_CHECKING: ...
        body += block.body
    for node in body:
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ".".join(package[:len(package) - (node.level - 1)] +
                            ([node.module] if node.module else []))
            folder = ROOT.joinpath(*base.split(".")[1:])
            for alias in node.names:
                sub = folder / f"{alias.name}.py"
                yield f"{base}.{alias.name}" if sub.exists() else base


@pytest.mark.parametrize("layer", LAYERS)
def test_no_import_circles(layer: str) -> None:
    """No two modules of a layer need each other, directly or around a circle (ARCHITECTURE.md
    "Collaborators, not hubs"); imports inside functions are not counted (they run after both
    modules are loaded), imports for type hints are."""
    graph = {}
    for path in (ROOT / layer).rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        name = ".".join(["mqstore"] + [p for p in parts if p != "__init__"])
        graph[name] = {m for m in module_imports(path) if m.startswith(f"mqstore.{layer}")}
    done: set = set()

    def visit(node: str, stack: list) -> None:
        if node in stack:
            raise AssertionError("import circle: " + " -> ".join(stack[stack.index(node):]
                                                                 + [node]))
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, stack + [node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])


def test_every_relative_import_names_a_module_that_exists() -> None:
    """Imports inside functions (loaded only when a command runs) resolve too: ``from .x import
    y`` names a module ``x`` (or a package) where the importing module sits."""
    bad = []
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom) or not node.level:
                    continue
                folder = ROOT.joinpath(*parts[:len(parts) - node.level])
                target = folder.joinpath(*(node.module or "").split(".")) if node.module \
                    else folder
                names = [] if node.module else [a.name for a in node.names]
                found = target.with_suffix(".py").exists() or (target / "__init__.py").exists() \
                    or target.with_suffix(".c").exists()  # an optional compiled module
                if found and names:  # ``from . import x``: x a module of the package
                    found = all((target / f"{n}.py").exists() or (target / n).is_dir()
                                or n in (target / "__init__.py").read_text() for n in names)
                if not found:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, bad


# tools' packages, lowest first: each imports only the ones before it (and the CLI's modules at
# tools' top, which the commands and these packages share)
TOOLS_ROOMS = ("serve", "integrations", "spark", "bench", "demo")


def test_tools_packages_import_downwards_only() -> None:
    folders = {p.name for p in (ROOT / "tools").iterdir()
               if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(TOOLS_ROOMS), folders
    bad = []
    for here in TOOLS_ROOMS:
        for path in (ROOT / "tools" / here).rglob("*.py"):
            for line, name in imports(path):
                words = name.split(".")
                if words[:2] != ["mqstore", "tools"] or len(words) < 3:
                    continue
                there = words[2]
                if there in TOOLS_ROOMS and TOOLS_ROOMS.index(there) > TOOLS_ROOMS.index(here):
                    bad.append(f"{path.relative_to(ROOT)}:{line} ({here}) imports {name}")
    assert not bad, bad
