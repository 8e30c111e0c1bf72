"""Scheduled delivery (Artemis ring queues §3): scheduled messages coming due onto the head
of their queues (``due``) and the thread that makes them come due when nobody asks
(``timer``). A queue's scheduled buffer itself is ``queues.scheduledbuffer``.

May import: ``routing`` and every package below it.
"""
