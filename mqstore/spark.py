"""Journal segments as a Spark batch source (``mqstore.tools.spark``; PySpark 4.x Python Data
Source API). Needs ``pip install mqstore[spark]``; pyspark is imported only when used."""

from mqstore.tools.spark import read_journal, register, ship

__all__ = ["read_journal", "register", "ship"]
