"""Filters (Artemis ``core/filter``): the filter and selector expressions of queues, consumers
and management calls, parsed once into a ``Filter`` that matches a message (``expression``).

May import: the engine's base modules (``errors``, ``values``, ``model``) only.
"""
