"""Paging (Artemis ``core/paging``): the one RAM budget and what shares it, the messages held
in RAM and read back from the index (``memory``), page files for paged messages journaled
nowhere (``pagefile``), and how much each address holds with what a send to a full one does
(``addressfull``).

May import: ``config``, ``addressing``, ``filters``, the base modules, and the ``recovery`` and
``journal`` layers.
"""
