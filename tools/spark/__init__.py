"""Journal segments as a Spark batch source (PySpark 4.x Python Data Source API).

    from . import register, read_journal
    register(spark)                              # format "mqjournal"
    df = read_journal(spark, "/data/store")      # or spark.read.format("mqjournal").load(...)

pyspark and pyarrow are imported only when this package is used (``pip install mqstore[spark]``).
"""

from .cluster import ship
from .source import read_journal, register

__all__ = ["read_journal", "register", "ship"]
