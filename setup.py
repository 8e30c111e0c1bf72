"""Build of the optional compiled scan (``tools.spark._scan``); everything else is in
pyproject.toml. ``optional=True``: without a compiler the install still succeeds and the
Python scan (the reference) is used."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tools.spark._scan", ["tools/spark/_scan.c"], optional=True,
                             extra_compile_args=["-O2"])])
