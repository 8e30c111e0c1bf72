"""The journal source on executors that lack mqstore, through the shipping helper: a Spark
session whose Python workers see every dependency but not mqstore reads the same rows as the
plain reader once ``ship`` has added the package (with the Python scan: a zip cannot load the
compiled one)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mqstore.tools.spark.columns import plain_scan
from tests.recovery.test_index import build

pytestmark = pytest.mark.slow

JOB = textwrap.dedent("""
    import logging, os, sys
    logging.basicConfig(level=logging.WARNING)
    os.environ["PYSPARK_PYTHON"] = sys.argv[1]
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").appName("mqstore-ship")
             .config("spark.ui.enabled", "false").getOrCreate())
    from mqstore.spark import read_journal, ship
    from mqstore.tools.spark.cluster import executors_have_mqstore
    print("before", executors_have_mqstore(spark))
    print("shipped", ship(spark))
    print("after", executors_have_mqstore(spark))
    print("shipped again", ship(spark))
    print("rows", read_journal(spark, sys.argv[2]).count())
    spark.stop()
""")


def python_without_mqstore(where: Path) -> str:
    """A Python that sees this environment's libraries (pyspark, pyarrow, msgpack...) but not
    mqstore: a new virtual environment whose only link is a ``.pth`` line naming the
    site-packages directories (so the editable install's finder is not loaded)."""
    venv = where / "executor-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python*/site-packages")
    deps = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    (site / "dependencies.pth").write_text("\n".join(deps) + "\n")
    return str(venv / "bin" / "python")


def test_ship_makes_the_source_work_where_mqstore_is_not_installed(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    store = str(tmp_path / "store")
    build(store, rounds=1)
    executor_python = python_without_mqstore(tmp_path)
    lacks = subprocess.run([executor_python, "-c", "import mqstore"], cwd=tmp_path,
                           capture_output=True)
    assert lacks.returncode != 0  # the executors' Python really lacks it
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")}
    proc = subprocess.run([sys.executable, "-c", JOB, executor_python, store], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = dict(line.rsplit(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert (out["before"], out["shipped"], out["after"], out["shipped again"]) == \
        ("False", "True", "True", "False")
    assert int(out["rows"]) == plain_scan(store)
    assert "Python scan" in proc.stderr  # it says the executors read the slower way
