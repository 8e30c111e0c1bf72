"""The installed distribution: its wheel adds exactly one top-level import name, ``mqstore``
(the layers as ``mqstore.journal`` ... ``mqstore.tools``, the compiled parts inside them), and
the installed package works on its own, away from the checkout; without a compiler the wheel
still builds and works (the compiled parts are optional, the Python code is used)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from mqstore.compiled import COMPILED

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

SMOKE = """
import mqstore, mqstore.journal, sys
from mqstore import Broker, Message, QueueConfig, RoutingType
assert mqstore.__file__.startswith(sys.argv[1]), mqstore.__file__
assert mqstore.journal.__file__.startswith(sys.argv[1]), mqstore.journal.__file__
with Broker.open(sys.argv[2]) as b:
    b.create_address("a", routing_types={RoutingType.ANYCAST})
    b.create_queue(QueueConfig(name="a", address="a", routing_type=RoutingType.ANYCAST))
    with b.session() as s:
        s.send("a", Message(b"hello", durable=True))
with Broker.open(sys.argv[2]) as b, b.session() as s:
    d = s.create_consumer("a").receive(timeout=5)
    assert d.message.body == b"hello"
    d.ack()
try:
    import mqstore.journal._frames as frames
except ImportError:
    print("python")
else:
    assert frames.__file__.startswith(sys.argv[1]), frames.__file__
    print("compiled")
import importlib, mqstore.compiled as c
loaded = [importlib.import_module(name) for name in c.COMPILED]
kinds = {c.is_compiled(m) for m in loaded}
assert len(kinds) == 1, [(m.__name__, m.__file__) for m in loaded]  # all compiled, or none
assert all(m.__file__.startswith(sys.argv[1]) for m in loaded)
print(c.build())
"""


def build_wheel(tmp: Path, env: Optional[Dict[str, str]] = None) -> Path:
    """A wheel built from a copy of the checkout (the build leaves its ``build/`` there), with
    ``MQSTORE_PURE`` only as ``env`` gives it (the pure test run sets it for its processes)."""
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "demo-data", "*.egg-info", "__pycache__", "*.so"))
    out = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(out), str(src)], check=True,
                   env={**without_pure(), **(env or {})}, capture_output=True)
    (wheel,) = out.glob("mqstore-*.whl")
    return wheel


def without_pure() -> Dict[str, str]:
    """This process's environment without ``MQSTORE_PURE``."""
    return {k: v for k, v in os.environ.items() if k != "MQSTORE_PURE"}


def installed(wheel: Path, tmp: Path) -> Path:
    """The wheel unpacked as pip installs it (``--target``), without its dependencies (the
    running environment has them)."""
    target = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                    "--target", str(target), str(wheel)], check=True, capture_output=True)
    return target


def run_installed(target: Path, tmp: Path, *args: str) -> str:
    """Run Python code against the installed copy only: in a new virtual environment that sees
    this one's dependencies (a ``.pth`` line) but not its install of the checkout (the
    editable finder would map ``mqstore.*`` back to the checkout), from a directory with no
    checkout in it."""
    venv = tmp / "venv"
    if not venv.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        (site,) = venv.glob("lib/python*/site-packages")
        deps = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
        (site / "dependencies.pth").write_text("\n".join(deps) + "\n")
    env = {k: v for k, v in without_pure().items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    proc = subprocess.run([str(venv / "bin" / "python"), *args], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def top_level_names(wheel: Path) -> List[str]:
    with zipfile.ZipFile(wheel) as z:
        return sorted({name.split("/")[0] for name in z.namelist()
                       if not name.split("/")[0].endswith((".dist-info", ".data"))})


def test_the_wheel_installs_one_name_and_works_away_from_the_checkout(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    assert top_level_names(wheel) == ["mqstore"]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    for layer in ("journal", "recovery", "engine", "tools", "tools/spark"):
        assert f"mqstore/{layer}/__init__.py" in names
    compiled = [n for n in names if n.endswith(".so")]
    helpers = ["mqstore/journal/_frames", "mqstore/recovery/_fold", "mqstore/recovery/_lmdbwalk",
               "mqstore/tools/spark/_scan"]
    by_mypyc = ["mqstore/_native__mypyc", *(m.replace(".", "/") for m in COMPILED)]
    assert sorted(n.split(".")[0] for n in compiled) == sorted(helpers + by_mypyc), compiled
    for name in COMPILED:  # the source stays beside its compiled module (MQSTORE_PURE=1)
        assert name.replace(".", "/") + ".py" in names
    target = installed(wheel, tmp_path)
    out = run_installed(target, tmp_path, "-c", SMOKE, str(target), str(tmp_path / "store"))
    assert out.split() == ["compiled", "compiled"]
    pure = run_installed(target, tmp_path, "-c", f"import os; os.environ['MQSTORE_PURE'] = '1'\n"
                         f"{SMOKE}", str(target), str(tmp_path / "store2"))
    assert pure.split() == ["compiled", "pure"]  # the C helpers stay; mypyc's modules do not
    version = run_installed(target, tmp_path, "-m", "mqstore.tools.cli", "--version")
    assert "mqstore" in version


def test_without_a_compiler_the_wheel_builds_and_uses_the_python_code(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path, env={"CC": "false", "LDSHARED": "false"})
    with zipfile.ZipFile(wheel) as z:
        assert not [n for n in z.namelist() if n.endswith(".so")]
    target = installed(wheel, tmp_path)
    out = run_installed(target, tmp_path, "-c", SMOKE, str(target), str(tmp_path / "store"))
    assert out.split() == ["python", "pure"]


def test_mqstore_pure_at_install_compiles_only_the_c_helpers(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path, env={"MQSTORE_PURE": "1"})
    with zipfile.ZipFile(wheel) as z:
        compiled = sorted(n.split("/")[-1].split(".")[0] for n in z.namelist()
                          if n.endswith(".so"))
    assert compiled == ["_fold", "_frames", "_lmdbwalk", "_scan"]
    target = installed(wheel, tmp_path)
    out = run_installed(target, tmp_path, "-c", SMOKE, str(target), str(tmp_path / "store"))
    assert out.split() == ["compiled", "pure"]
