"""Page files: paged messages journaled nowhere, on disk until their queues take them.

Seed 000 §4 (Artemis pages non-durable messages of a paging address too) and Qpid queues (Qpid's
flow_to_disk: "the content of messages is written to disk and released from memory"): a
message that is journaled nowhere (a non-durable message, or one routed to non-durable queues)
and that its address pages leaves RAM for a page file; its queues read it back in order when it
joins them (``engine.routing.depage``). Nothing here is synced or survives a restart: the files of a
previous run are deleted at open, as a non-durable message does not outlive the broker.

Entries are appended to numbered page files of ``PAGE_SIZE`` bytes (Artemis's page-size-bytes
default): ``u32 length, u32 CRC-32C`` then a msgpack list ``[mid, address, durable, properties,
timestamp, expiration, priority, body, [[queue id, order key], ...], journaled]``. Each queue
reads the entries routed to it from its own cursor (``PageCursor``); a page file is deleted once
every queue it names has passed all its entries. A write that fails (a full disk...) leaves the
message in RAM, as before paging; a read that fails drops the entry, logged and counted (it was
never promised to survive anything). A dropped entry's routing cannot be read either, so each
page keeps, per queue, how many of its entries the queue has not passed yet, and per address
the messages and bytes still counted as paged: a queue that reads past a page (or finds no
entry where its count says some are left) drops what it did not pass as lost, and a page whose
entries are all passed or lost gives its addresses back what they still count (``lost``).

What RAM keeps per message: nothing until one of its queues takes it; then, while others have
not, a small record of how many still have it paged (``pending``), so that its address's size
counts it once.
"""

from __future__ import annotations

import logging
import struct
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import msgpack

from .addressfull import tally
from .memory import StoredMessage
from mqstore.journal import FileSystem
from mqstore.journal.crc import crc32c

log = logging.getLogger("mqstore.engine")  # the engine layer's logger

PAGE_SIZE = 10 << 20  # bytes per page file (Artemis page-size-bytes)
_HEAD = struct.Struct("<II")
READ_AHEAD = 64 << 10  # bytes read at once while a cursor scans


@dataclass(frozen=True)
class PageFileStatistics:
    """Page file counters since open: files there now, entries written, writes that failed
    (their messages stayed in RAM), entries that did not read back (dropped)."""

    files: int
    written: int
    write_failures: int
    read_failures: int


@dataclass
class PageCursor:
    """Where a queue reads the page files: the next entry to look at, and how many entries
    routed to it are ahead."""

    page: int = 0
    offset: int = 0
    ahead: int = 0


@dataclass
class PagedEntry:
    """One entry read for a queue: the message (from RAM when another queue holds it, else
    built from the entry), its order key on that queue, its page, the cursor position after
    it, how many queues it was written for, how many entries of the queue the read went past
    up to it (this one included), and whether it was journaled nowhere when written (its
    page then counts it as paged until a queue takes it)."""

    msg: StoredMessage
    order: Tuple[int, ...]
    page: int
    after: Tuple[int, int]
    queues: int
    seen: int
    counted: bool = False


class PageFile:
    """The page files of one broker (guarded by the broker lock).

    Args:
        fs: the file-system seam. directory: where the page files go (created; emptied).
        held: a message held in RAM by id, or ``None`` (``MessageCache.get``).

    Attributes:
        pending: per message id taken by some of its queues and not yet by all, or journaled
            too (the image counts those until it lets them go): ``[queues that still have it
            paged here, whether it counts as taken (not paged), whether the image let it go]``.
        written, read_failures, write_failures: counters since open.
    """

    def __init__(self, fs: FileSystem, directory: str,
                 held: Any = lambda mid: None,
                 lost: Callable[[str, int, int], None] = lambda address, n, size: None,
                 gone: Callable[[str, int, bool], None] = lambda address, size, paged: None
                 ) -> None:
        self.fs = fs
        self.dir = directory
        self.held = held
        self.lost = lost
        self.gone = gone
        if not fs.exists(directory):
            fs.mkdir(directory)
        for name in fs.listdir(directory):
            if name.endswith(".page"):
                fs.unlink(f"{directory}/{name}")
        self.handles: Dict[int, int] = {}
        self.live: Dict[int, int] = {}  # page -> (entry, queue) pairs not yet passed
        self.unpassed: Dict[int, Dict[int, int]] = {}  # page -> queue id -> its entries left
        # page -> address -> [messages, bytes] written there and still counted as paged
        self.paged_size: Dict[int, Dict[str, List[int]]] = {}
        self.page = 0
        self.end = 0
        self.pending: Dict[int, List[Any]] = {}
        # page -> ids of messages in ``pending`` with an entry there: when the page goes with
        # queues that never read their entry back, those queues will never pass it
        self.pending_in: Dict[int, set] = {}
        self._live: "weakref.WeakValueDictionary[int, StoredMessage]" = \
            weakref.WeakValueDictionary()  # read back and still referenced: one object each
        self.written = 0
        self.read_failures = 0
        self.write_failures = 0

    def _path(self, page: int) -> str:
        return f"{self.dir}/{page:08d}.page"

    def append(self, msg: StoredMessage, body: bytes, orders: List[Tuple[int, Tuple[int, ...]]],
               elsewhere: bool = False) -> Optional[int]:
        """Write ``msg`` for the queues of ``orders`` (``(queue id, order key)`` each);
        ``elsewhere``: RAM holds other references to it (a wildcard address's queue's copy),
        so it is tracked in ``pending`` from now on, as a journaled one is: when those go, it
        is still paged here. Returns its page, or ``None`` when the write failed (the caller
        keeps it in RAM)."""
        payload = msgpack.packb([msg.mid, msg.address, msg.durable, msg.properties,
                                 msg.timestamp, msg.expiration, msg.priority, body,
                                 [[qid, list(order)] for qid, order in orders], msg.journaled],
                                use_bin_type=True)
        frame = _HEAD.pack(len(payload), crc32c(payload)) + payload
        try:
            if self.end and self.end + len(frame) > PAGE_SIZE:
                self.page += 1
                self.end = 0
            handle = self.handles.get(self.page)
            if handle is None:
                handle = self.handles[self.page] = self.fs.open(self._path(self.page),
                                                                create=True)
            self.fs.pwrite(handle, frame, self.end)
        except OSError as exc:
            self.write_failures += 1
            log.warning("a paged message stays in RAM: its page file write failed: %s", exc)
            return None
        self.end += len(frame)
        self.live[self.page] = self.live.get(self.page, 0) + len(orders)
        left = self.unpassed.setdefault(self.page, {})
        for qid, _order in orders:
            left[qid] = left.get(qid, 0) + 1
        if msg.journaled or elsewhere:  # held elsewhere too: track it from now on
            self._track(msg, self.page, len(orders))
        if not msg.journaled:  # counted as paged by its address until a queue takes it
            tally(self.paged_size.setdefault(self.page, {}), msg.address, 1, msg.size)
        self.written += 1
        return self.page

    def read(self, qid: int, cursor: PageCursor, limit: int,
             after: Optional[Tuple[int, ...]] = None) -> List[PagedEntry]:
        """Up to ``limit`` entries routed to queue ``qid`` from ``cursor`` on (with an order
        key after ``after`` when given), in order; the cursor does not move (``passed``
        does). An entry that cannot be read is dropped (``read_failures``) and passed."""
        out: List[PagedEntry] = []
        page, offset = cursor.page, cursor.offset
        seen = 0
        while len(out) < limit and seen < cursor.ahead and (page, offset) < (self.page,
                                                                           self.end):
            got = self._entry(page, offset)
            if got is None:  # past the end of a finished page
                page, offset = page + 1, 0
                continue
            raw, size = got
            nxt = (page, offset + size)
            if raw is None:
                self.read_failures += 1
                log.error("a paged non-durable message is dropped: page file %s at offset %d "
                          "does not read back", self._path(page), offset)
                page, offset = nxt
                continue
            mid, address, durable, props, ts, exp, prio, body, routes, journaled = raw
            for rqid, order in routes:
                if rqid != qid:
                    continue
                seen += 1
                key = tuple(order)
                if after is None or key > after:
                    msg = self._message(mid, address, durable, props, ts, exp, prio, body,
                                        journaled)
                    out.append(PagedEntry(msg, key, page, nxt, len(routes), seen,
                                          not journaled))
            page, offset = nxt
        return out

    def _entry(self, page: int, offset: int) -> Optional[Tuple[Optional[List[Any]], int]]:
        handle = self.handles.get(page)
        if handle is None:
            return None
        end = self.end if page == self.page else self.fs.size(handle)
        if offset >= end:
            return None
        try:
            head = self.fs.pread(handle, _HEAD.size, offset)
            length, crc = _HEAD.unpack(head)
            if offset + _HEAD.size + length > end:  # the length itself is damaged
                return None, end - offset
            payload = self.fs.pread(handle, length, offset + _HEAD.size)
            if len(payload) != length or crc32c(payload) != crc:
                return None, _HEAD.size + length  # this entry only: the next is checked
            return msgpack.unpackb(payload, raw=False, strict_map_key=False), _HEAD.size + length
        except (OSError, ValueError, struct.error):
            return None, end - offset  # nothing after it can be trusted in this page

    def _message(self, mid: int, address: str, durable: bool, props: Dict[str, Any], ts: int,
                 exp: int, prio: int, body: bytes, journaled: bool) -> StoredMessage:
        msg = self.held(mid) or self._live.get(mid)
        if msg is None:
            state = self.pending.get(mid)
            msg = StoredMessage(mid, address, durable, props, ts, exp, prio, body,
                                journaled and not (state is not None and state[2]))
            msg.paged = state is None or not state[1]
            self._live[mid] = msg
        return msg

    def image_released(self, mid: int, paged: bool) -> bool:
        """The image no longer holds message ``mid`` (its durable references are gone).
        Returns whether a queue still has it paged here: it is then journaled nowhere, and
        counted as paged when the image counted it so (``paged``)."""
        state = self.pending.get(mid)
        if state is None:
            return False
        state[1] = state[1] or not paged
        state[2] = True
        return True

    def passed(self, entry: PagedEntry, qid: int, taken: bool = True) -> bool:
        """Queue ``qid``, one of the queues ``entry``'s message was written for, took it
        (``taken``) or left it (a deleted queue); the page file goes once all its entries are
        passed. Returns whether every queue has passed it now."""
        msg, page = entry.msg, entry.page
        state = self.pending.get(msg.mid)
        if state is None:
            state = self._track(msg, page, entry.queues)
        state[0] -= 1
        if entry.counted and not state[1] and (taken or state[0] <= 0):
            # it stops counting as paged: taken by its first queue, or passed by its last
            sizes = self.paged_size.get(page)
            if sizes is not None:
                tally(sizes, msg.address, -1, -msg.size)
        state[1] = state[1] or taken
        left = self.unpassed.get(page)
        if left is not None and left.get(qid, 0) > 0:
            left[qid] -= 1
        self._passed_pairs(page, 1)
        if state[0] <= 0:
            del self.pending[msg.mid]
            in_page = self.pending_in.get(page)
            if in_page is not None:
                in_page.discard(msg.mid)
            return True
        return False

    def _track(self, msg: StoredMessage, page: int, queues: int) -> List[Any]:
        """Start tracking ``msg`` (written to ``page`` for ``queues`` queues) in ``pending``:
        ``[queues that still have it paged, taken, image let it go, address, body bytes,
        journaled when written]``."""
        state = self.pending[msg.mid] = [queues, False, False, msg.address, msg.size,
                                         msg.journaled]
        self.pending_in.setdefault(page, set()).add(msg.mid)
        return state

    def _unread_gone(self, page: int) -> None:
        """``page`` went with entries some queues never read back (damaged): those queues
        will never pass them. A message no RAM holds any more is then gone for good, and its
        address stops counting it (it was kept counted while a queue still had it paged);
        one RAM still holds goes when its last reference does, as any other."""
        for mid in self.pending_in.pop(page, ()):
            state = self.pending.get(mid)
            if state is None or state[0] <= 0:  # (passed by its last queue just now)
                continue
            del self.pending[mid]
            if self.held(mid) is not None:
                continue
            _left, taken, released, address, size, journaled = state
            if taken:  # counted as held on its queues (``AddressSizes.depaged_transient``)
                self.gone(address, size, False)
            elif journaled and released:  # the image handed it over, counted as paged
                self.gone(address, size, True)
            # (never journaled and never taken: its page's ``paged_size`` still counts it)

    def lost_between(self, qid: int, first: int, stop: Optional[int] = None) -> int:
        """Queue ``qid`` has read past pages ``first`` up to ``stop`` (``None``: past every
        page): its entries there that it did not pass did not read back. They are dropped;
        returns how many. Costs O(pages in the range)."""
        lost = 0
        for p in range(first, self.page + 1 if stop is None else stop):
            left = self.unpassed.get(p)
            n = left.pop(qid, 0) if left is not None else 0
            if n:
                lost += n
                self._passed_pairs(p, n)
        return lost

    def _passed_pairs(self, page: int, n: int) -> None:
        """``n`` (entry, queue) pairs of ``page`` are passed or lost; the file goes once all
        are (a new one is started), giving its addresses back what they still count as
        paged: the messages of entries that did not read back for any queue."""
        left = self.live.get(page, n) - n
        if left > 0:
            self.live[page] = left
            return
        self._drop(page)
        self.unpassed.pop(page, None)
        for address, (messages, size) in self.paged_size.pop(page, {}).items():
            if messages > 0:
                self.lost(address, messages, size)
        self._unread_gone(page)
        if page == self.page:
            self.page += 1
            self.end = 0

    def paged_elsewhere(self, mid: int) -> bool:
        """Whether a queue still has message ``mid`` paged in a page file."""
        return mid in self.pending

    def _drop(self, page: int) -> None:
        self.live.pop(page, None)
        handle = self.handles.pop(page, None)
        try:
            if handle is not None:
                self.fs.close(handle)
            self.fs.unlink(self._path(page))
        except OSError as exc:  # a leftover is deleted at the next open
            log.warning("a used page file could not be deleted: %s", exc)

    def statistics(self) -> PageFileStatistics:
        """A snapshot of the counters."""
        return PageFileStatistics(len(self.handles), self.written, self.write_failures,
                                  self.read_failures)

    def close(self) -> None:
        """Delete every page file (their messages do not outlive the broker)."""
        for page in list(self.handles):
            self._drop(page)
