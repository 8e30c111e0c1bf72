"""Build of the compiled parts (everything else is in pyproject.toml).

Two kinds, both optional (without a C compiler the install still succeeds and is pure Python):

- **Hand-written C helpers**, each beside the Python code it is tested against: the journal's
  frame encoding (``mqstore.journal._frames``), the Spark entry scan
  (``mqstore.tools.spark._scan``), the index check (``mqstore.recovery._lmdbwalk``) and the fold
  of MESSAGE records (``mqstore.recovery._fold``).
- **The hot path compiled with mypyc**: the modules ``mqstore/compiled.py`` lists, compiled
  from the same Python source (no second implementation). mypy names a module by its path, and
  our layers sit at the repository root under other names (``journal/`` is
  ``mqstore.journal``), so the sources are staged under ``build/mypyc-src/mqstore/`` first.

``MQSTORE_PURE=1`` in the install's environment builds no mypyc module (a pure-Python install;
the C helpers are still built when a compiler works, as they were before). A missing compiler
(``CC=false``) or a missing mypy gives the pure install too, with a line saying so.
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys
import tempfile
from pathlib import Path
from typing import List

from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent
LAYERS = {"mqstore": "mqstore", "journal": "mqstore/journal", "recovery": "mqstore/recovery",
          "engine": "mqstore/engine", "tools": "mqstore/tools"}


def compiled(name: str, source: str) -> Extension:
    """One optional C module; every one includes the journal's CRC-32C (``journal/crc32c.h``)."""
    return Extension(name, [source], optional=True, include_dirs=["journal"],
                     depends=["journal/crc32c.h"], extra_compile_args=["-O2"])


def compiler_works() -> bool:
    """Whether a C extension can be built here: the compiler (``CC`` honoured) compiles a file
    that includes ``Python.h``."""
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.sysconfig import customize_compiler, get_python_inc
    cc = new_compiler()
    customize_compiler(cc)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text("#include <Python.h>\nint probe(void) { return 0; }\n")
        try:
            cc.compile([str(src)], output_dir=tmp, include_dirs=[get_python_inc()])
        except Exception:  # noqa: BLE001 - CompileError, a missing executable
            return False
    return True


def staged() -> Path:
    """The layers' Python sources copied under one ``mqstore/`` tree, as they install."""
    out = ROOT / "build" / "mypyc-src"
    shutil.rmtree(out, ignore_errors=True)
    for layer, target in LAYERS.items():
        shutil.copytree(ROOT / layer, out / target, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("*.so", "*.c", "*.h", "__pycache__"))
    return out


def mypyc_modules() -> List[Extension]:
    """The mypyc extensions, or none (with the reason on stderr) for a pure install."""
    if os.environ.get("MQSTORE_PURE", "") not in ("", "0"):
        print("mqstore: MQSTORE_PURE is set: a pure-Python install", file=sys.stderr)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("mqstore: mypy (mypyc) is not installed: a pure-Python install", file=sys.stderr)
        return []
    if not compiler_works():
        print("mqstore: no working C compiler: a pure-Python install", file=sys.stderr)
        return []
    modules = runpy.run_path(str(ROOT / "mqstore" / "compiled.py"))["COMPILED"]
    src = staged()
    paths = [str((src / m.replace(".", "/")).with_suffix(".py").relative_to(ROOT))
             for m in modules]
    here = os.getcwd()
    os.chdir(ROOT)  # mypy reads the staged paths relative to the project
    try:
        return mypycify(["--follow-imports=silent", "--ignore-missing-imports", *paths],
                        opt_level="3", debug_level="0",
                        group_name="mqstore._native")  # mqstore.compiled.LIBRARY
    finally:
        os.chdir(here)


setup(ext_modules=[
    compiled("mqstore.journal._frames", "journal/_frames.c"),
    compiled("mqstore.tools.spark._scan", "tools/spark/_scan.c"),
    compiled("mqstore.recovery._lmdbwalk", "recovery/_lmdbwalk.c"),
    compiled("mqstore.recovery._fold", "recovery/_fold.c"),
    *mypyc_modules(),
])
