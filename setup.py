"""Build of the optional compiled parts (everything else is in pyproject.toml): the journal's
frame encoding (``mqstore.journal._frames``), the Spark entry scan
(``mqstore.tools.spark._scan``), the index check (``mqstore.recovery._lmdbwalk``) and the fold
of MESSAGE records (``mqstore.recovery._fold``). The sources sit in the layers' folders at the
repository root (``journal/_frames.c`` ...). All are ``optional=True``: without a compiler the
install still succeeds and the Python code (the reference each is tested against) is used."""

from setuptools import Extension, setup


def compiled(name: str, source: str) -> Extension:
    """One optional C module; every one includes the journal's CRC-32C (``journal/crc32c.h``)."""
    return Extension(name, [source], optional=True, include_dirs=["journal"],
                     depends=["journal/crc32c.h"], extra_compile_args=["-O2"])


setup(ext_modules=[
    compiled("mqstore.journal._frames", "journal/_frames.c"),
    compiled("mqstore.tools.spark._scan", "tools/spark/_scan.c"),
    compiled("mqstore.recovery._lmdbwalk", "recovery/_lmdbwalk.c"),
    compiled("mqstore.recovery._fold", "recovery/_fold.c"),
])
