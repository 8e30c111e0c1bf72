"""Settings and configuration (Artemis ``core/settings``, ``core/config``): address settings
matched by wildcard (``settings``), and the configuration files that declare addresses, queues
and settings, Artemis's ``broker.xml`` (``brokerxml``) and TOML (``files``).

May import: ``addressing``, ``filters`` and the base modules (``errors``, ``values``,
``model``).
"""
