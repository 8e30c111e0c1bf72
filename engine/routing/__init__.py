"""Routing (Artemis ``core/postoffice``): the broker as its subsystems see it (``core``),
addresses (``address``), where a message goes and how it joins its queues (``placement``),
automatic creation and deletion (``autocreate``), topic subscriptions, retroactive addresses,
dead letters and expiry, orphaned messages, depaging, Qpid exclusive queues, purge, restoring
exported messages and last-node persistence: every step that puts references on queues or
takes them off for good, and journals it through ``storage``.

May import: ``queues``, ``storage``, ``paging``, ``config``, ``addressing``, ``filters``, the
base modules, and the ``recovery`` and ``journal`` layers.
"""
