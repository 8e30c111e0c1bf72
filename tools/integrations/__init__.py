"""What other software plugs in through (public as ``mqstore.kombu``, ``mqstore.metrics`` and
``mqstore.crashtest``): the ``mqstore://`` kombu transport for Celery (``kombu``), Prometheus
metrics (``metrics``), and the crash-test kit for applications built on mqstore
(``crashtest``).

May import: the ``engine``, ``recovery`` and ``journal`` layers only.
"""
