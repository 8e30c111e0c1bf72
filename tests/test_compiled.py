"""The mypyc build (``mqstore.compiled``): the same source runs compiled or pure, chosen per
process by ``MQSTORE_PURE``, and the source keeps to what compiled classes allow (no
``__dict__`` of a compiled class: each attribute named where state is copied)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Set

import mqstore.compiled as compiled
from mqstore.recovery.image import STATE

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import importlib, json, mqstore.compiled as c
mods = [importlib.import_module(n) for n in c.COMPILED]
print(json.dumps({"build": c.build(), "files": [m.__file__ for m in mods],
                  "compiled": [c.is_compiled(m) for m in mods]}))
"""


def probe(pure: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MQSTORE_PURE"}
    if pure:
        env["MQSTORE_PURE"] = "1"
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, check=True, cwd=ROOT / "tests")
    return json.loads(out.stdout)


def test_mqstore_pure_loads_every_compiled_module_from_its_source() -> None:
    got = probe(pure=True)
    assert got["build"] == "pure"
    assert not any(got["compiled"])
    assert all(f.endswith(".py") for f in got["files"])


def test_an_install_runs_all_of_the_compiled_modules_or_none() -> None:
    """A compiled install runs every listed module compiled (a partly compiled one would mix
    native and interpreted classes of one image); an install without a compiler, none."""
    got = probe(pure=False)
    assert len(set(got["compiled"])) == 1, list(zip(compiled.COMPILED, got["files"]))
    assert got["build"] == ("compiled" if got["compiled"][0] else "pure")


def _self_attributes(path: Path) -> Set[str]:
    """Every ``self.<name> = ...`` (or augmented, or annotated) in a module."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id == "self":
            names.add(node.attr)
    return names


def test_store_image_take_names_every_attribute_the_image_sets() -> None:
    """``StoreImage.take`` copies the attributes ``STATE`` names (a compiled image has no
    ``__dict__``): an attribute set anywhere in the image or its parts and missing there
    would keep the old image's value after an index rebuild."""
    parts = ["image", "settling", "holds", "moves", "deletions"]
    set_anywhere = set().union(*(_self_attributes(ROOT / "recovery" / f"{p}.py")
                                 for p in parts))
    assert set_anywhere == set(STATE)
