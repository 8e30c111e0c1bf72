"""One SparkSession for the whole test run (starting one costs 5-8 s and ~500 MB)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH"))
                                               if p)
    from pyspark.sql import SparkSession
    session = (SparkSession.builder.master("local[2]").appName("mqstore-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .getOrCreate())
    from mqstore.tools.spark import register
    register(session)
    yield session
    session.stop()
