"""Storage (Artemis ``core/persistence``): the write path to the journal and the live index
(``persistence``), the broker's fail-stop rule and the index rebuilt while running
(``manager``, the ``StorageManager``), and opening a store's directory (``opening``).

May import: ``paging``, ``config``, ``addressing``, ``filters``, the base modules, and the
``recovery`` and ``journal`` layers.
"""
