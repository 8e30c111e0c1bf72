"""What each address holds, as the image folds records: its size and whether it pages.

Seed 000 §4 and Artemis's paging: an address's *size* is the messages routed to it that its
queues still reference, each message once, and their body bytes; a full address with the PAGE
policy *pages*: from the first message journaled as paged (``"pg"`` in its MESSAGE record), every
message of the address is paged (on disk only, not on its queues yet) until none is left, so
paged messages always come after the others in queue order. DEPAGE records move the oldest
paged messages back into the size as they join their queues.

``AddressLedger`` keeps both per address name, in RAM (addresses are few), written with every
index commit, so reopening knows every address's size and paging state without reading a
message.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Tuple

from .entries import PAGED_LANE, MessageImage, Order, PageState


class AddressLedger:
    """Sizes and paging states of addresses (durable messages only).

    Attributes:
        sizes: per address name, ``[messages, body bytes]`` held and not paged.
        total_bytes: the sum of those bytes over all addresses.
        pages: the addresses that page, by name (``PageState``).
    """

    def __init__(self) -> None:
        self.sizes: Dict[str, List[int]] = {}
        self.total_bytes = 0
        self.pages: Dict[str, PageState] = {}

    def size(self, address: str) -> Tuple[int, int]:
        """``(messages, body bytes)`` ``address`` holds, paged ones excluded."""
        got = self.sizes.get(address)
        return (got[0], got[1]) if got else (0, 0)

    def is_paged(self, msg: MessageImage) -> bool:
        """Whether ``msg`` is paged (its address pages it; not on its queues yet)."""
        state = self.pages.get(msg.address)
        return state is not None and msg.order >= state.start

    def added(self, address: str, order: Order, size: int, journaled_paged: bool) -> bool:
        """A message of ``size`` body bytes was routed to ``address``; ``journaled_paged``
        when its record says it was paged (that starts paging). Returns whether it is paged."""
        pages = self.pages  # (lookups by ``in``: this runs once per message)
        state = pages[address] if pages and address in pages else None
        if state is None and journaled_paged:
            state = pages[address] = PageState(order)
        if state is not None and order >= state.start:
            state.messages += 1
            state.size += size
            return True
        sizes = self.sizes  # _resize(address, 1, size), inline
        if address not in sizes:
            sizes[address] = [1, size]
        else:
            got = sizes[address]
            got[0] += 1
            got[1] += size
        self.total_bytes += size
        return False

    def grow(self, sizes: Mapping[str, List[int]]) -> None:
        """Messages routed to addresses that do not page: ``sizes`` maps an address to
        ``[messages, body bytes]`` to add (what ``added`` does one message at a time)."""
        for address, (n, size) in sizes.items():
            got = self.sizes.get(address)
            if got is None:
                self.sizes[address] = [n, size]
            else:
                got[0] += n
                got[1] += size
            self.total_bytes += size

    def released(self, msg: MessageImage) -> bool:
        """``msg`` has no reference left. Returns whether it was paged: at its address's
        paging, or journaled as paged and never depaged (a copy on a wildcard address's queue
        outlived its references on its address's queues, and later depages went past it)."""
        pages = self.pages
        state = pages[msg.address] if pages and msg.address in pages else None
        paged = state is not None and (msg.order >= state.start or msg.lane == PAGED_LANE)
        if state is not None and paged:
            state.messages -= 1
            state.size -= msg.body_size
            if state.messages <= 0:
                del self.pages[msg.address]
        else:
            self._resize(msg.address, -1, -msg.body_size)
        return paged

    def depaged(self, address: str, upto: Order, moved: List[MessageImage]) -> None:
        """``moved``, the paged messages of ``address`` up to order key ``upto``, joined their
        queues: they count in its size again; paging ends when none is left."""
        state = self.pages[address]
        for msg in moved:
            state.messages -= 1
            state.size -= msg.body_size
            self._resize(address, 1, msg.body_size)
        state.start = (upto[0], upto[1] + 1)
        if state.messages <= 0:
            del self.pages[address]

    def _resize(self, address: str, messages: int, size: int) -> None:
        sizes = self.sizes
        if address in sizes:
            got = sizes[address]
        else:
            got = sizes[address] = [0, 0]
        got[0] += messages
        got[1] += size
        self.total_bytes += size
        if got[0] <= 0:
            del self.sizes[address]

    def to_meta(self) -> Dict[str, Any]:
        """The ledger as checkpoint meta fields (``sizes``, ``pages``)."""
        return {"sizes": sorted([name, n, b] for name, (n, b) in self.sizes.items()),
                "pages": sorted([name, st.start[0], st.start[1], st.messages, st.size]
                                for name, st in self.pages.items())}

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> "AddressLedger":
        """Rebuild from ``to_meta``'s fields of a checkpoint's meta entry."""
        out = cls()
        out.sizes = {name: [int(n), int(b)] for name, n, b in meta.get("sizes", [])}
        out.total_bytes = sum(b for _n, b in out.sizes.values())
        out.pages = {name: PageState((int(lsn), int(slot)), int(n), int(b))
                     for name, lsn, slot, n, b in meta.get("pages", [])}
        return out
