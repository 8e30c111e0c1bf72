"""Delivery (Artemis ``core/server``'s consumers and sessions, server side): handing out,
settling (ack, reject, release, cancel) and transactions (``settle``), consumer prefetch
(``prefetch``), browsers (``browser``), and ending open deliveries at a close or a reopen
(``restart``).

May import: ``scheduling``, ``routing`` and every package below them.
"""
