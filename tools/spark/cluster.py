"""Running the journal source on a cluster whose executors lack mqstore.

The source's ``read()`` runs in the executors' Python, which must import
``mqstore.tools.spark``; its dependencies there are pyarrow (with pyspark's own), msgpack,
crcmod and pyroaring. ``ship`` checks with a one-task job whether the executors can import
mqstore and, when they cannot, zips the package's Python files and adds the zip to the job
(``SparkContext.addPyFile``). A zip cannot load compiled modules, so those executors use the
Python scan, the reference the compiled one is tested against (about 4x slower); installing
mqstore on every executor gives full speed.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import tempfile
import zipfile
from typing import Any, Dict

log = logging.getLogger("mqstore.tools")

LAYERS = ("mqstore", "mqstore.journal", "mqstore.recovery", "mqstore.engine", "mqstore.tools")


def executors_have_mqstore(spark: Any) -> bool:
    """Whether a task on the executors can find the ``mqstore`` package (one-task job)."""
    probe = spark.sparkContext.parallelize([0], 1).map(
        lambda _: importlib.util.find_spec("mqstore") is not None)
    return bool(probe.collect()[0])


def package_zip(directory: str) -> str:
    """Write ``mqstore-python.zip`` in ``directory``: every ``.py`` file of the mqstore package
    as it is installed (an editable install maps the layers' folders in), laid out as
    ``mqstore/...``; compiled parts are left out. Returns the zip's path."""
    files: Dict[str, str] = {}
    for name in LAYERS:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"cannot find the installed package {name}")
        root = list(spec.submodule_search_locations)[0]
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for filename in names:
                if filename.endswith(".py"):
                    rel = os.path.relpath(os.path.join(folder, filename), root)
                    files.setdefault(os.path.join(*name.split("."), rel), os.path.join(folder,
                                                                                       filename))
    path = os.path.join(directory, "mqstore-python.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, source in sorted(files.items()):
            z.write(source, arcname)
    return path


def ship(spark: Any) -> bool:
    """Make the journal source work on executors that lack mqstore: when they cannot import it,
    add the package's Python files as a zip to ``spark``'s jobs (a warning says they will use
    the Python scan, about 4x slower than the compiled one). Call it once per SparkSession,
    before reading. Returns whether the package was shipped (False: the executors have it)."""
    if executors_have_mqstore(spark):
        return False
    path = package_zip(tempfile.mkdtemp(prefix="mqstore-ship-"))
    spark.sparkContext.addPyFile(path)
    log.warning("the Spark executors cannot import mqstore: shipped its Python files (%s); they "
                "read with the Python scan, about 4x slower than the compiled one (install "
                "mqstore on every executor for full speed)", path)
    return True
