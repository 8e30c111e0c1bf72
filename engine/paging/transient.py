"""Messages journaled nowhere, as the address sizes count them (``engine.paging.addressfull``).

A message is journaled nowhere when it was sent non-durable, or when the image let it go (its
durable references are gone) while a queue journaled nowhere still holds it. Such a message
counts in its address's size until its last copy leaves RAM and the page files; then the
address has room again and senders waiting for room look again. ``TransientAccounting`` gets
told of each of those moments by the image, the message cache and the page files.
"""

from __future__ import annotations

from typing import Optional

from .addressfull import AddressSizes, Room
from .memory import MessageCache, StoredMessage
from .pagefile import PageFile
from mqstore.recovery import MessageImage


class TransientAccounting:
    """Keeps ``sizes`` right as messages stop being journaled and leave (broker lock held).

    Args:
        cache: the messages in RAM. sizes: what each address holds. room: senders waiting
            for room. pages: the page files (``None``: no paging of messages journaled
            nowhere, as in tools).
    """

    def __init__(self, cache: MessageCache, sizes: AddressSizes, room: Room,
                 pages: Optional[PageFile]) -> None:
        self.cache = cache
        self.sizes = sizes
        self.room = room
        self.pages = pages

    def image_released(self, gone: MessageImage, paged: bool) -> None:
        """The image let a message go (its durable references are gone): one RAM still holds
        on a queue journaled nowhere is journaled nowhere from now on, and counted as such."""
        held = self.cache.by_id  # (by ``in``: once per message settled)
        msg = held[gone.mid] if gone.mid in held else None
        counted = msg is not None and msg.journaled
        if msg is not None and msg.journaled:
            msg.journaled = False
            self.sizes.add_transient(msg, paged)
        pages = self.pages
        if pages is not None and pages.pending and pages.image_released(gone.mid, paged) and \
                not counted:  # only a page file holds it now, for a queue that journals none
            self.sizes.count_transient(gone.address, gone.body_size, paged)

    def paged_copies_gone(self, address: str, size: int, paged: bool) -> None:
        """A message journaled nowhere whose paged copies did not read back for the queues
        that had it paged, and that no queue holds in RAM: its address has room again."""
        self.sizes.uncount_transient(address, size, paged)
        self.room.notify()

    def transient_gone(self, msg: StoredMessage) -> None:
        """A message journaled nowhere left its last queue (unless a queue still has it paged
        in a page file): its address has room again."""
        if self.pages is not None and self.pages.paged_elsewhere(msg.mid):
            return
        self.sizes.release_transient(msg)
        self.room.notify()
