"""Build of the optional compiled parts (everything else is in pyproject.toml): the journal's
frame encoding (``journal._frames``), the Spark entry scan (``tools.spark._scan``), the index
check (``recovery._lmdbwalk``) and the fold of MESSAGE records (``recovery._fold``). All are
``optional=True``: without a compiler the install still succeeds and the Python code (the
reference each is tested against) is used."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("journal._frames", ["journal/_frames.c"], optional=True, include_dirs=["journal"],
              depends=["journal/crc32c.h"], extra_compile_args=["-O2"]),
    Extension("tools.spark._scan", ["tools/spark/_scan.c"], optional=True,
              include_dirs=["journal"], depends=["journal/crc32c.h"],
              extra_compile_args=["-O2"]),
    Extension("recovery._lmdbwalk", ["recovery/_lmdbwalk.c"], optional=True,
              include_dirs=["journal"], depends=["journal/crc32c.h"],
              extra_compile_args=["-O2"]),
    Extension("recovery._fold", ["recovery/_fold.c"], optional=True, include_dirs=["journal"],
              depends=["journal/crc32c.h"], extra_compile_args=["-O2"]),
])
