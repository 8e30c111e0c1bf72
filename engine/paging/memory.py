"""The broker's RAM budget and what shares it: queue heads, deliveries, decoded messages.

Seed 003_*.txt (ActiveMQ's design for massive queues) links every cache to "a fixed amount of RAM".
Here one ``MemoryBudget`` (``Broker.open(memory_budget=...)``, bytes) is charged for every message
reference held in RAM (a queue's head, a consumer's deliveries) and every message those references
share (``MessageCache``, ActiveMQ massive queues' PendingCache). A durable queue's references live
in the live index (``recovery.image``); RAM holds only its head, refilled from the index in queue
order as it drains (``IndexReader``), so the backlog costs disk, not RAM.

The charges are estimates of the Python objects' sizes (``REF_BYTES`` per reference, measured
with ``tracemalloc`` on CPython 3.11, plus the message's properties and any body kept in RAM),
enforced by accounting: ``statistics()`` reports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..model import Message
from mqstore.recovery import IndexInvalidError, StoreImage

DEFAULT_BUDGET = 64 << 20  # bytes
REF_BYTES = 300            # a MessageRef, its place in a deque, its cache entry
MESSAGE_BYTES = 500        # a StoredMessage with an empty properties dict
MIN_HEAD = 16              # references a paging queue always may hold in RAM
HEAD_MAX = 256             # references a queue's head holds at most (a QueueArea of
# ActiveMQ massive queues)
REFILL = 256               # references read from the index per refill, budget allowing
MIN_BUDGET = 4096          # bytes; a budget this small makes every durable queue page


def _load_trim() -> Optional[Callable[[int], int]]:
    try:
        import ctypes
        return ctypes.CDLL("libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc
        return None


_TRIM = _load_trim()


def give_back_memory() -> None:
    """Return freed heap memory to the OS (glibc's ``malloc_trim``; nothing elsewhere). Called
    after each index commit: the overlay of changes it wrote, their encodings and LMDB's dirty
    pages were freed, but glibc keeps such memory mapped, so RSS would stay at the high-water
    mark of the largest commit instead of following the budget."""
    if _TRIM is not None:
        _TRIM(0)


def message_bytes(properties: Dict[str, Any], body: Optional[bytes]) -> int:
    """The RAM a ``StoredMessage`` is charged: its object, its properties (about 100 bytes a
    pair plus the values' lengths) and the body when kept in RAM."""
    size = MESSAGE_BYTES + (len(body) if body is not None else 0)
    for key, value in properties.items():
        size += 100 + len(key) + (len(value) if isinstance(value, (str, bytes)) else 0)
    return size


class StoredMessage:
    """A message held in RAM (shared by its in-memory references).

    Attributes:
        mid: message id. address: where it was sent. durable: journaled on durable queues.
        properties, timestamp, expiration (ms since epoch, 0 never), priority.
        body: the bytes, or ``None`` when every queue it reached journals it: then it is
            read from the journal on demand (references separate from bodies; ``kept_body``).
            A journaled message sent in this run keeps the bytes from the write path while
            it stays in RAM (``engine.routing.placement.WRITE_PATH_BODY``; charged in ``mem_size``).
        journaled: whether the image holds it (its body is read by id from its record).
        refcount: references to it held in RAM (``engine.paging.memory.MessageCache``).
        mem_size: the bytes it is charged to the RAM budget.
        size: its body's length in bytes (what address sizes count).
        paged: for one journaled nowhere, whether its address holds it as paged.
    """

    __slots__ = ("mid", "address", "durable", "properties", "timestamp", "expiration",
                 "priority", "body", "journaled", "refcount", "mem_size", "size", "paged",
                 "__weakref__")

    def __init__(self, mid: int, address: str, durable: bool, properties: Dict[str, Any],
                 timestamp: int, expiration: int, priority: int, body: Optional[bytes],
                 journaled: bool = False, size: Optional[int] = None) -> None:
        self.mid = mid
        self.address = address
        self.durable = durable
        self.properties = properties
        self.timestamp = timestamp
        self.expiration = expiration
        self.priority = priority
        self.body = body
        self.journaled = journaled
        self.refcount = 0
        if size is None:
            size = len(body) if body is not None else 0
        self.size = size  # (the body's length, when given with the body)
        # message_bytes, inline for a message without properties (most of them)
        self.mem_size = message_bytes(properties, body) if properties else \
            MESSAGE_BYTES + (size if body is not None else 0)
        self.paged = False

    def to_message(self, body: bytes) -> Message:
        """A user-facing copy with ``body``."""
        return Message.stored(body, dict(self.properties) if self.properties else {},
                              self.durable, self.priority, self.expiration, self.timestamp,
                              self.mid, self.address)


@dataclass(frozen=True)
class MemoryStatistics:
    """The RAM budget's state (``Broker.statistics().memory``).

    Attributes:
        budget: the budget in bytes. used: bytes charged now. peak: the most charged since
            open. references: message references held in RAM. messages: messages held in RAM.
        paged_out: references moved from RAM to the index only since open (a head trimmed or
            new arrivals on a paging queue). paged_in: references read back from the index.
    """

    budget: int
    used: int
    peak: int
    references: int
    messages: int
    paged_out: int
    paged_in: int


class MemoryBudget:
    """One broker's RAM budget (guarded by the broker lock).

    Args:
        limit: bytes, at least ``MIN_BUDGET``.

    Attributes:
        head_max: references a queue's head holds at most: ``HEAD_MAX``, or fewer when the
            budget could not hold eight such heads (at least 2).
        min_head: references a paging queue keeps however full the budget is.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head_max = max(2, min(HEAD_MAX, limit // (8 * (REF_BYTES + MESSAGE_BYTES))))
        self.min_head = min(MIN_HEAD, self.head_max)
        self.used = 0
        self.peak = 0
        self.references = 0
        self.messages = 0
        self.paged_out = 0
        self.paged_in = 0

    def charge(self, size: int) -> None:
        """Account ``size`` bytes more."""
        self.used += size
        if self.used > self.peak:
            self.peak = self.used

    def release(self, size: int) -> None:
        """Account ``size`` bytes less."""
        self.used -= size

    def over(self) -> bool:
        """Whether more is charged than the budget allows."""
        return self.used > self.limit

    def refill_size(self) -> int:
        """How many references a refill may read: ``REFILL`` (at most ``head_max``) when the
        budget has room for them, else ``min_head`` (a queue always makes progress)."""
        room = self.limit - self.used
        want = min(REFILL, self.head_max)
        return want if room > want * (REF_BYTES + MESSAGE_BYTES) else self.min_head

    def statistics(self) -> MemoryStatistics:
        """A snapshot."""
        return MemoryStatistics(self.limit, self.used, self.peak, self.references,
                                self.messages, self.paged_out, self.paged_in)


class MessageCache:
    """Messages held in RAM by id, shared by their in-memory references; charged to the
    budget while any reference holds them (``StoredMessage.refcount`` counts those).

    Args:
        budget: the RAM budget. gone: called with a message journaled nowhere when its last
            reference left RAM (it is then gone for good).
    """

    def __init__(self, budget: MemoryBudget,
                 gone: Optional[Callable[[StoredMessage], None]] = None) -> None:
        self.budget = budget
        self.gone = gone
        self.by_id: Dict[int, StoredMessage] = {}

    def get(self, mid: int) -> Optional[StoredMessage]:
        """The message if held."""
        return self.by_id.get(mid)

    def hold(self, msg: StoredMessage) -> None:
        """A reference to ``msg`` entered RAM."""
        msg.refcount += 1
        budget = self.budget
        budget.references += 1
        if msg.refcount == 1:
            self.by_id[msg.mid] = msg
            budget.messages += 1
            budget.used += REF_BYTES + msg.mem_size  # charge, inline (every arrival)
        else:
            budget.used += REF_BYTES
        if budget.used > budget.peak:
            budget.peak = budget.used

    def let_go(self, msg: StoredMessage, gone: bool = True) -> None:
        """A reference to ``msg`` left RAM (settled, or paged out). ``gone`` false: it went
        to a page file (``engine.paging.pagefile``), so the message is not gone with it."""
        msg.refcount -= 1
        budget = self.budget
        budget.references -= 1
        by_id = self.by_id
        if msg.refcount <= 0 and msg.mid in by_id and by_id[msg.mid] is msg:
            del by_id[msg.mid]
            budget.messages -= 1
            budget.used -= REF_BYTES + msg.mem_size  # release, inline
            if gone and not msg.journaled:
                self.forget(msg)
        else:
            budget.used -= REF_BYTES

    def forget(self, msg: StoredMessage) -> None:
        """``msg`` is gone for good (its last reference left, in RAM or in a page file):
        one journaled nowhere is reported to ``gone``."""
        if not msg.journaled and self.gone is not None:
            self.gone(msg)


def _stored(m: Any) -> StoredMessage:
    """A message the index holds (a ``MessageImage``) as an in-memory one, its body not read."""
    return StoredMessage(m.mid, m.address, True, m.properties, m.timestamp, m.expiration,
                         m.priority, None, True, m.body_size)


class IndexReader:
    """Reads a durable queue's references from the live index in queue order, and the
    messages they point to, as in-memory objects (internal to ``engine.queues.queue``).

    Args:
        image: the live image. cache: the messages held in RAM.
        guard: runs each read (``StorageManager.guard``): a read that meets damage (a
            value's CRC, a reference to a message the index does not hold, raised as
            ``IndexInvalidError``) runs again once the index is rebuilt from the journal; it
            raises ``BrokerFailedError`` when it cannot be.

    Attributes:
        rows_read: queue references read so far (what ``mqstore bench selectors`` counts).
    """

    def __init__(self, image: StoreImage, cache: MessageCache,
                 guard: Callable[..., Any]) -> None:
        self.image = image
        self.cache = cache
        self._guarded = guard
        self.rows_read = 0

    def count(self, qid: int) -> int:
        """References the index holds for queue ``qid``."""
        q = self.image.queues.get(qid)
        return 0 if q is None else q.count

    def message(self, mid: int) -> Optional[StoredMessage]:
        """Message ``mid`` from the cache, or built from the index (not held); ``None`` when
        the index does not hold it."""
        msg = self.cache.get(mid)
        if msg is not None:
            return msg
        m = self._guarded(self.image.message, mid)
        return None if m is None else _stored(m)

    def order_of(self, qid: int, mid: int) -> Optional[Tuple[int, ...]]:
        """The order key the index gives message ``mid``'s reference on queue ``qid``
        (``None``: it holds none). It differs from the one in RAM for a reference that took
        the place of one journaled nowhere (a Qpid last-value replacement in place): in the
        index it stays at its own record's place."""
        ref = self._guarded(self.image.ref, qid, mid)
        return None if ref is None else tuple(ref.order)

    def scheduled_count(self, qid: int) -> int:
        """References the index holds in queue ``qid``'s scheduled buffer."""
        q = self.image.queues.get(qid)
        return 0 if q is None else q.scheduled

    def scheduled(self, qid: int, upto: Optional[int], limit: int, after: Any = None
                  ) -> List[Tuple[StoredMessage, Any]]:
        """Up to ``limit`` of queue ``qid``'s scheduled references due at ``upto`` ms at the
        latest (``None``: any time), after ``after`` (a ``RefImage``), in due order: (message,
        ``RefImage``) each; the messages come from the cache or are built from the index."""
        def read() -> List[Tuple[StoredMessage, Any]]:
            refs = self.image.scheduled_refs(qid, upto, limit, after)
            return [(self._message_of(qid, r.mid), r) for r in refs]
        return self._guarded(read)

    def scheduled_ref(self, qid: int, mid: int) -> Optional[Tuple[StoredMessage, Any]]:
        """Message ``mid``'s reference in queue ``qid``'s scheduled buffer, or ``None``."""
        def read() -> Optional[Tuple[StoredMessage, Any]]:
            ref = self.image.ref(qid, mid)
            if ref is None or not ref.at:
                return None
            return self._message_of(qid, mid), ref
        return self._guarded(read)

    def _message_of(self, qid: int, mid: int) -> StoredMessage:
        """Message ``mid``, which a reference of queue ``qid`` points to.

        Raises:
            IndexInvalidError: the index does not hold it (damage: the caller rebuilds)."""
        msg = self.cache.get(mid)
        if msg is not None:
            return msg
        m = self.image.message(mid)
        if m is None:
            raise IndexInvalidError(f"queue {qid} has a reference to message {mid}, "
                                    f"which the index does not hold")
        return _stored(m)

    def paged(self, qid: int) -> int:
        """Paged references the index holds for queue ``qid`` (its address pages them)."""
        q = self.image.queues.get(qid)
        return 0 if q is None else q.paged

    def read(self, qid: int, after: Optional[Tuple[int, ...]], limit: int
             ) -> List[Tuple[StoredMessage, Tuple[int, ...], int]]:
        """Up to ``limit`` references after order key ``after`` (a journaled reference's: its
        first two parts): (message, order, delivery count) each; the messages come from the
        cache or are built from the index."""
        start = None if after is None else (after[0], after[1])

        def read() -> List[Tuple[StoredMessage, Tuple[int, ...], int]]:
            refs = self.image.queue_refs(qid, start, limit)
            return [(self._message_of(qid, r.mid), r.order, r.delivery_count) for r in refs]
        out = self._guarded(read)
        self.rows_read += len(out)
        return out
