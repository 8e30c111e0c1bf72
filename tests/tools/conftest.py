"""One SparkSession for the whole test run (starting one costs 5-8 s and ~500 MB)."""

from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="session", autouse=True)
def catalogue(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Spark source's queue-name catalogue in the run's temporary directory, not the
    user's cache."""
    path = str(tmp_path_factory.mktemp("catalogue"))
    os.environ["MQSTORE_CATALOGUE"] = path
    return path


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
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
