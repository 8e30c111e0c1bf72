"""Queues (Artemis ``core/server``'s queue, Qpid's queue): a queue's references in RAM by
priority (``lanes``, ``refs``), its paged part (``paged``), its scheduled buffer
(``scheduledbuffer``), the policies composed into it (``policies``, ``limits``), message groups
and consumer selectors (``groups``, ``selection``), and the deleted queues kept for management
(``deleted``). A queue decides; it never writes: what it decides is journaled above it.

May import: ``paging``, ``config``, ``addressing``, ``filters``, the base modules, and the
``recovery`` and ``journal`` layers (never ``storage``: a queue does not write).
"""
