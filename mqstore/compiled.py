"""Which modules the install compiles with mypyc, and whether this process runs them compiled.

An install compiles the modules in ``COMPILED`` from their Python source with mypyc when a C
compiler and mypy are present (``setup.py``; the same source, no second implementation). An
install with ``MQSTORE_PURE=1`` in its environment compiles none. A process started with
``MQSTORE_PURE=1`` loads the Python source of these modules even where the compiled ones are
installed (``mqstore/__init__.py`` asks :func:`prefer_source` first): the pure build, run
from the same install, as the tests and ``mqstore bench e2e`` use it.

This module imports nothing of mqstore's and is read by ``setup.py`` before anything is built.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType
from typing import List, Optional, Sequence

#: The hot path's modules compiled by mypyc (import names): the image fold and its tables, the
#: journal's record packing and liveness accounting, and the engine's placement of messages,
#: its queues and their settling. Not ``engine.paging.memory``: its ``StoredMessage`` is held
#: by weak references, which mypyc's classes do not take.
COMPILED = (
    "mqstore.journal.liveness",
    "mqstore.recovery.image",
    "mqstore.recovery.tables",
    "mqstore.recovery.entries",
    "mqstore.recovery.ledger",
    "mqstore.recovery.holds",
    "mqstore.recovery.moves",
    "mqstore.recovery.deletions",
    "mqstore.recovery.settling",
    "mqstore.recovery.parts",
    "mqstore.recovery.schema",
    "mqstore.journal.codec",
    "mqstore.engine.routing.placement",
    "mqstore.engine.queues.lanes",
    "mqstore.engine.queues.refs",
    "mqstore.engine.queues.backlog",
    "mqstore.engine.queues.queue",
    "mqstore.engine.delivery.settle",
    "mqstore.engine.delivery.acks",
    "mqstore.engine.storage.persistence",
)


LIBRARY = "mqstore._native__mypyc"  # the compiled code of them all (setup.py's group)


def pure_requested() -> bool:
    """Whether ``MQSTORE_PURE`` asks for the Python source (set, and not ``0``)."""
    return os.environ.get("MQSTORE_PURE", "") not in ("", "0")


def build() -> str:
    """``"compiled"`` when every module of ``COMPILED`` that is loaded runs compiled (none
    loaded yet: the first is imported to tell), else ``"pure"``."""
    name = COMPILED[0]
    module = sys.modules.get(name) or __import__(name, fromlist=["*"])
    return "compiled" if is_compiled(module) else "pure"


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from an extension (a compiled build)."""
    origin = getattr(getattr(module, "__spec__", None), "origin", None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def stale_sources() -> List[str]:
    """The sources of compiled modules edited after they were compiled (the compiled code is
    in one shared library, ``mqstore._native__mypyc``); empty for a pure install."""
    spec = importlib.util.find_spec(LIBRARY)
    if spec is None or not spec.origin:
        return []
    built = os.path.getmtime(spec.origin)
    out = []
    for name in COMPILED:
        module = importlib.import_module(name)
        source = os.path.join(os.path.dirname(module.__file__ or ""),
                              name.rpartition(".")[2] + ".py")
        if os.path.exists(source) and os.path.getmtime(source) > built:
            out.append(source)
    return out


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the ``.py`` file of a compiled module, beside its extension, in its package."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]],
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in COMPILED or not path:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for folder in path:
            source = os.path.join(folder, leaf)
            if os.path.exists(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def prefer_source() -> None:
    """With ``MQSTORE_PURE`` set, load the compiled modules from their Python source (put a
    finder first on ``sys.meta_path``; once per process)."""
    if pure_requested() and not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())
