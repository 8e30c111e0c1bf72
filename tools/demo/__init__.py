"""The demo (``make demo``, ``mqstore demo``): the main job on the 2013 New York City flights
(``flights``), killed with SIGKILL midway and resumed (``command``, its producing ``child`` and
the ``job`` both run), with one day of departures replayed through scheduled messages
(``departures``).

May import: ``tools.bench`` (the fdatasync probe), the CLI's modules at ``tools``' top, and the
``engine``, ``recovery`` and ``journal`` layers.
"""
