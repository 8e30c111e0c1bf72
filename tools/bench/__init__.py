"""Benchmarks (``mqstore bench ...``): scripts that print ratios measured in one run, never a
timed assertion (ARCHITECTURE.md "Tests"): the journal's group commit (``journal``), end to end
against its peers (``e2e``, ``floors``, ``rabbitmq``), RAM with big backlogs (``memory``),
scheduled messages (``scheduled``), selectors (``selectors``), the Spark source and report
(``spark``, ``report``), and the CPU and memory of a process tree they measure with
(``proctree``).

May import: the CLI's modules at ``tools``' top, ``tools.spark``, and the ``engine``,
``recovery`` and ``journal`` layers.
"""
