"""Address-full policies: how much an address holds, and what a send to a full one does.

Seed 000 §4 and Artemis's address settings: ``max_size_bytes`` and ``max_size_messages`` bound
what an address holds, the broker's ``global_max_size`` bounds all addresses together, and
``address_full_policy`` says what a send to a full address does: PAGE (stored, kept on disk
only until the address drains), DROP (dropped and counted), FAIL (``AddressFullError``, nothing
stored) or BLOCK (the sender waits for room).

What an address holds (its *size*) is the messages routed to it and still referenced by one of
its queues, ready or in delivery, each message once however many queues hold it, and their body
bytes. Durable messages are counted by the image, which folds every record the broker writes,
so the count is current at run time and survives a reopen without reading a message; messages
journaled nowhere are counted here while RAM holds them. Messages an address holds as paged are
not part of its size (Artemis: paged messages do not count against the address's memory).

An address is full when it already holds a limit or more: the message that crosses a limit is
accepted, as in Artemis. Messages the broker itself moves (dead letters, expiry) are never
refused: the policies apply to senders.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

from ..errors import AddressFullError
from .memory import StoredMessage
from ..config.settings import DEFAULTS, UNLIMITED, AddressFullPolicy, AddressSettings
from mqstore.recovery import StoreImage

T = TypeVar("T")
class AddressSizes:
    """Messages and body bytes each address holds (see the module docstring).

    Args:
        image: the live image (durable messages). global_max_size: bytes all addresses may
            hold together before every address is full (-1: no such limit).
    """

    def __init__(self, image: StoreImage, global_max_size: int = UNLIMITED) -> None:
        self.image = image
        self.global_max_size = global_max_size
        self.transient: Dict[str, List[int]] = {}
        self.transient_bytes = 0
        self.transient_paged: Dict[str, List[int]] = {}

    def size(self, address: str) -> Tuple[int, int]:
        """``(messages, body bytes)`` ``address`` holds now (paged ones excluded)."""
        n, b = self.image.ledger.size(address)
        t = self.transient.get(address)
        return (n + t[0], b + t[1]) if t else (n, b)

    def total_bytes(self) -> int:
        """Body bytes all addresses hold together."""
        return self.image.ledger.total_bytes + self.transient_bytes

    def paged(self, address: str) -> Tuple[int, int]:
        """``(messages, body bytes)`` ``address`` holds as paged."""
        state = self.image.ledger.pages.get(address)
        n, b = (state.messages, state.size) if state is not None else (0, 0)
        t = self.transient_paged.get(address)
        return (n + t[0], b + t[1]) if t else (n, b)

    def paging(self, address: str) -> bool:
        """Whether ``address`` pages: paged messages are left, so later ones page too."""
        return address in self.image.ledger.pages or address in self.transient_paged

    def add_transient(self, msg: StoredMessage, paged: bool) -> None:
        """A message journaled nowhere was placed on its address's queues (as paged or
        not)."""
        msg.paged = paged
        self.count_transient(msg.address, msg.size, paged)

    def count_transient(self, address: str, size: int, paged: bool) -> None:
        """One more message journaled nowhere held by ``address`` (``size`` body bytes)."""
        tally(self.transient_paged if paged else self.transient, address, 1, size)
        if not paged:
            self.transient_bytes += size

    def depaged_transient(self, msg: StoredMessage) -> None:
        """Such a message joined its queues: it counts in its address's size now."""
        if msg.paged:
            tally(self.transient_paged, msg.address, -1, -msg.size)
            self.add_transient(msg, False)

    def lost_transient(self, address: str, messages: int, size: int) -> None:
        """Paged messages journaled nowhere whose page file entries did not read back (for
        any of their queues) are gone: ``address`` no longer counts them as paged."""
        tally(self.transient_paged, address, -messages, -size)

    def release_transient(self, msg: StoredMessage) -> None:
        """Such a message left its last queue."""
        self.uncount_transient(msg.address, msg.size, msg.paged)

    def uncount_transient(self, address: str, size: int, paged: bool) -> None:
        """One message journaled nowhere, counted by ``count_transient`` (as paged or not),
        is gone: ``address`` no longer holds its ``size`` body bytes."""
        tally(self.transient_paged if paged else self.transient, address, -1, -size)
        if not paged:
            self.transient_bytes -= size

    def limit_reached(self, address: str, st: AddressSettings, extra: Tuple[int, int] = (0, 0),
                      extra_total: int = 0) -> Optional[str]:
        """The limit ``address`` has reached (``"max_size_bytes"``, ``"max_size_messages"``,
        ``"global_max_size"``) when it also held ``extra`` (messages, bytes) and all
        addresses ``extra_total`` bytes more; ``None`` when it has room."""
        if self.global_max_size < 0 and (st.max_size_bytes is None or st.max_size_bytes < 0) \
                and (st.max_size_messages is None or st.max_size_messages < 0):
            return None  # no limit: nothing to count (the common case, on every send)
        n, b = self.size(address)
        if st.max_size_bytes is not None and st.max_size_bytes >= 0 and \
                b + extra[1] >= st.max_size_bytes:
            return "max_size_bytes"
        if st.max_size_messages is not None and st.max_size_messages >= 0 and \
                n + extra[0] >= st.max_size_messages:
            return "max_size_messages"
        if self.global_max_size >= 0 and self.total_bytes() + extra_total >= \
                self.global_max_size:
            return "global_max_size"
        return None


class Admission:
    """What the address-full policies make of one send (``admit``).

    Attributes:
        accepted: the items to place now, in order. paged: for each accepted item, whether
            its address pages it (PAGE policy, address full or already paging).
        dropped: addresses of the items dropped (DROP policy), one entry per message.
        blocked: the items, in order, that wait for room (BLOCK policy): the first one found
            its address full, the rest come after it. blocked_on: that address.
    """

    def __init__(self) -> None:
        self.accepted: List[Any] = []
        self.paged: List[bool] = []
        self.dropped: List[str] = []
        self.blocked: List[Any] = []
        self.blocked_on = ""


def admit(sizes: AddressSizes, settings: Callable[[str], AddressSettings],
          paging: Callable[[str], bool], items: Sequence[T], addresses: Sequence[str],
          size_of: Callable[[T], int], stored: Sequence[bool], block: bool = True
          ) -> Admission:
    """Apply the address-full policies to a send's items in order, counting each accepted one
    as held by its address before deciding the next.

    Args:
        sizes: what addresses hold. settings: an address's effective settings. paging:
            whether an address pages already (its later messages then page too, in order).
        items: the messages with their routes. addresses: each item's address, in order.
            size_of: an item's body bytes. stored: for each item, whether it reaches at
            least one queue (an unrouted message holds nothing). block: false makes a BLOCK
            address accept (a transaction's sends waited for room when they were made).
        An address's settings and paging are asked once per run of items to it.

    Raises:
        AddressFullError: an item found its FAIL address full: nothing of the send may be
            placed (the caller has changed nothing yet).
    """
    out = Admission()
    extra: Dict[str, Tuple[int, int]] = {}
    extra_total = 0
    unlimited_total = sizes.global_max_size < 0
    paged = [False] * len(items)
    kept: Optional[List[int]] = None  # the items accepted, once one was dropped
    end = len(items)
    last: Optional[str] = None  # the previous item's address, whose facts these are:
    st, policy, pages_now, counts = DEFAULTS, AddressFullPolicy.PAGE, False, True
    for i, item in enumerate(items):
        if not stored[i]:
            if kept is not None:
                kept.append(i)
            continue
        address = addresses[i]
        if address != last:  # (a batch mostly goes to one address: asked once for it)
            last = address
            st = settings(address)
            policy = st.address_full_policy
            pages_now = policy == AddressFullPolicy.PAGE and paging(address)
            counts = not (unlimited_total and (st.max_size_bytes is None or
                                               st.max_size_bytes < 0) and
                          (st.max_size_messages is None or st.max_size_messages < 0))
        if not counts:  # no limit applies: nothing to count (the common case)
            paged[i] = pages_now
            if kept is not None:
                kept.append(i)
            continue
        pages = pages_now
        limit = None if pages else sizes.limit_reached(address, st, extra.get(address, (0, 0)),
                                                       extra_total)
        if limit is not None and policy == AddressFullPolicy.FAIL:
            raise AddressFullError(address, limit)
        if limit is not None and policy == AddressFullPolicy.DROP:
            out.dropped.append(address)
            if kept is None:
                kept = list(range(i))
            continue
        if limit is not None and policy == AddressFullPolicy.BLOCK and block:
            out.blocked = list(items[i:])
            out.blocked_on = address
            end = i
            break
        pages = pages or (limit is not None and policy == AddressFullPolicy.PAGE)
        paged[i] = pages
        if kept is not None:
            kept.append(i)
        if not pages:
            size = size_of(item)
            n, b = extra.get(address, (0, 0))
            extra[address] = (n + 1, b + size)
            extra_total += size
    if kept is None:
        out.accepted, out.paged = list(items[:end]), paged[:end]
    else:
        out.accepted = [items[j] for j in kept]
        out.paged = [paged[j] for j in kept]
    return out


class Room:
    """Senders waiting for room on BLOCK addresses: threads wait on a condition of the broker
    lock, asyncio tasks on futures; ``notify`` (broker lock held) wakes them all to look
    again whenever an address may have shrunk.

    Args:
        lock: the broker lock.
    """

    def __init__(self, lock: Any) -> None:
        self._cond = threading.Condition(lock)
        self._futures: List[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]] = []
        self.waiting = 0

    def wait(self, deadline: Optional[float]) -> bool:
        """Wait (broker lock held; released meanwhile) until notified or ``deadline``
        (``time.monotonic()`` seconds; ``None``: no deadline). False when the deadline
        passed."""
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            return False
        self.waiting += 1
        try:
            self._cond.wait(timeout)
        finally:
            self.waiting -= 1
        return deadline is None or time.monotonic() < deadline

    def future(self, loop: asyncio.AbstractEventLoop) -> "asyncio.Future[None]":
        """A future resolved at the next ``notify`` (broker lock held)."""
        fut: "asyncio.Future[None]" = loop.create_future()
        self._futures.append((loop, fut))
        self.waiting += 1
        return fut

    def notify(self) -> None:
        """Wake every waiter (broker lock held)."""
        if not self.waiting:
            return
        self._cond.notify_all()
        futures, self._futures = self._futures, []
        self.waiting -= len(futures)
        for loop, fut in futures:
            if fut.done() or loop.is_closed():  # its wait ended (timeout) or its loop did
                continue
            try:
                loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:  # the loop closed meanwhile: nobody awaits it any more
                pass


def deadline_of(timeout: Optional[float]) -> Optional[float]:
    """The ``time.monotonic()`` deadline ``timeout`` seconds from now (``None``: none)."""
    return None if timeout is None else time.monotonic() + timeout


def timed_out(address: str, pending: int, total: int, timeout: Optional[float]
              ) -> AddressFullError:
    """The error for a BLOCK send whose wait for room ended at its timeout."""
    return AddressFullError(address, "timeout", f": {pending} of {total} messages waited "
                            f"{timeout} s for room and were not sent", sent=total - pending)


def tally(table: Dict[str, List[int]], address: str, messages: int, size: int) -> None:
    """Add ``messages`` and ``size`` bytes to ``address``'s ``[messages, bytes]`` in
    ``table``; an address left with none leaves the table."""
    got = table.setdefault(address, [0, 0])
    got[0] += messages
    got[1] += size
    if got[0] <= 0:
        del table[address]


def _resolve(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)
