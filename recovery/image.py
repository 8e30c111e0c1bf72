"""The image: the durable state of a store, folded mechanically from journal records.

``StoreImage.apply`` folds one record. Replay at open, the tail after an index checkpoint, and
the running engine (for every record it writes) all fold through it, so a rebuilt image equals
the one kept up to date at run time. The fold also reports, through a ``LivenessSink``, which
records it makes dead, so the journal can reclaim segments: a message record dies with its last
reference; an ACK is a tombstone that lives until the record it cancels is gone; a DELIVERY
record dies when superseded or acked; a TX record dies when its messages are gone and then
waits, like an ACK, for the records its acks cancel.

Where the state lives (issue 12, ActiveMQ massive queues): addresses, queues and settings are few
and kept in RAM; messages, references, each queue's order, references in delivery and TX records
live in tables over the index store (``recovery.entries``), so the image costs RAM only for what
changed since the last index commit. Each queue keeps its count of references; ``seglive`` counts
the locations the image holds per segment, so a check that every segment the image needs is present
costs O(segments). The folds that move references between a queue's parts (a scheduled buffer, the
head, paged messages) are ``recovery.moves``'s.
"""

from __future__ import annotations

from typing import (Any, Callable, Dict, Iterator, List, Mapping, Optional, Protocol, Sequence,
                    Tuple)

from mqstore.journal import Location
from .entries import (ID, LANE_SHIFT, PAIR, TRIPLE, AddressImage,
                      DeletedQueueImage, ImageTables, MessageImage, Order, PageState,
                      PAGED_LANE, QueueImage, RefImage, TxImage, lane_of, order_key, ref_key,
                      sched_key, tx_key)
from .ledger import AddressLedger
from .indexstore import MemoryIndex
from .deletions import QueueDeletions
from .holds import SegmentHolds
from .moves import HEAD_SHIFT, ReferenceMoves, head_order, is_head_order
from .settling import ReferenceSettling
from .schema import RecordKind


class LivenessSink(Protocol):
    """Where the fold reports dead records (a ``Journal``, or a recorder in tests)."""

    def mark_dead(self, locations: Sequence[Location]) -> None: ...

    def mark_dead_after(self, location: Location, targets: Sequence[Location]) -> None: ...


__all__ = ["HEAD_SHIFT", "head_order", "is_head_order", "AddressImage", "LivenessSink",
           "MessageImage", "NullSink", "Order", "PageState", "QueueImage", "RefImage",
           "StoreImage", "TxImage"]


_MESSAGE, _TX, _DUE = int(RecordKind.MESSAGE), int(RecordKind.TX), int(RecordKind.DUE)
_ACK, _DELIVERY = int(RecordKind.ACK), int(RecordKind.DELIVERY)
class NullSink:
    """A sink that ignores liveness (read-only inspection)."""

    def mark_dead(self, locations: Sequence[Location]) -> None:
        pass

    def mark_dead_after(self, location: Location, targets: Sequence[Location]) -> None:
        pass


STATE = ("store", "addresses", "queues", "settings", "deleted", "tables", "seglive", "ledger",
         "released", "last_lsn", "next_id", "dirty", "counted", "_folding", "_replaced", "_sink")
"""Every attribute of a ``StoreImage`` (what ``StoreImage.take`` takes over)."""


class StoreImage(ReferenceSettling, SegmentHolds, ReferenceMoves, QueueDeletions):
    """The durable state of a store.

    Args:
        store: the index store the large tables live in (an empty ``MemoryIndex`` when
            ``None``: everything then stays in RAM, as offline full replays want).
        counts: committed entries per table (from the checkpoint).

    Attributes:
        addresses, queues: by id (in RAM). settings: address-settings entries by match
            pattern, with the record holding each.
        tables: messages, references, queue order, references in delivery, TX records.
        seglive: locations held per segment sequence.
        ledger: what each address holds and whether it pages (``recovery.ledger``).
        released: called with a message the image no longer holds (its last durable
            reference is gone) and whether it was paged; the engine may still hold it on a
            queue journaled nowhere.
        last_lsn: LSN of the last record folded. next_id: the next free id for addresses,
            queues, messages and transactions.
        dirty: names of the small entries changed since the last index commit
            (``("addr"|"queue"|"settings", key)``).
        counted: ids of the queues whose counts (``count``, ``paged``) changed since the last
            index commit: a commit rewrites those queues' entries only.
    """

    def __init__(self, store: Any = None, counts: Optional[Mapping[str, int]] = None) -> None:
        self.store = MemoryIndex() if store is None else store
        self.addresses: Dict[int, AddressImage] = {}
        self.queues: Dict[int, QueueImage] = {}
        self.settings: Dict[str, Tuple[Dict[str, Any], Location]] = {}
        self.deleted: List[DeletedQueueImage] = []  # oldest first, at most KEEP_DELETED
        self.tables = ImageTables(self.store, counts)
        self.seglive: Dict[int, int] = {}
        self.ledger = AddressLedger()
        self.released: Optional[Callable[[MessageImage, bool], None]] = None
        self.last_lsn = 0
        self.next_id = 1
        self.dirty: set = set()
        self.counted: set = set()
        self._folding: Optional[Location] = None
        # references a TX record's messages replaced in place, until the record's acks of them
        self._replaced: Dict[Tuple[int, int], RefImage] = {}
        self._sink: Any = NullSink()  # a LivenessSink: where _due_gone reports (the last fold's)

    # -- reading ------------------------------------------------------------------------------
    def message(self, mid: int) -> Optional[MessageImage]:
        """The message ``mid`` or ``None``."""
        return self.tables.msg.get(ID.pack(mid))

    def ref(self, qid: int, mid: int, msg: Optional[MessageImage] = None
            ) -> Optional[RefImage]:
        """Message ``mid``'s reference on queue ``qid`` or ``None`` (``msg``: the message,
        when the caller has read it already); scheduled or moved to the head too."""
        if msg is None:
            msg = self.message(mid)
            if msg is None:
                return None
        t = self.tables
        ref = t.qref.get(order_key(qid, msg.order))
        if ref is not None or not t.moved.count:
            return ref
        where = t.moved.get(ref_key(qid, mid))
        if where is None:
            return None
        at, order = int(where[0]), (int(where[1]), int(where[2]))
        return t.sched.get(sched_key(qid, at, order)) if at else \
            t.qref.get(order_key(qid, order))

    def _key(self, qid: int, ref: RefImage) -> bytes:
        """Where ``ref`` is: its ``sched`` key while scheduled, else its ``qref`` key."""
        return sched_key(qid, ref.at, ref.order) if ref.at else order_key(qid, ref.order)

    def _put_ref(self, qid: int, ref: RefImage) -> None:
        """Write back a reference that stays where it is."""
        (self.tables.sched if ref.at else self.tables.qref).put(self._key(qid, ref), ref)

    def queue_refs(self, qid: int, after: Optional[Order] = None, limit: int = 1024
                   ) -> List[RefImage]:
        """Up to ``limit`` references of queue ``qid`` in queue order, after order key
        ``after`` (from the start when ``None``)."""
        prefix = ID.pack(qid)
        start = prefix if after is None else order_key(qid, after)
        return [ref for _key, ref in self.tables.qref.scan(prefix, start, limit)]

    def refs(self, qid: int) -> Iterator[RefImage]:
        """Every reference of queue ``qid`` in queue order (read in chunks)."""
        after: Optional[Order] = None
        while True:
            chunk = self.queue_refs(qid, after, 1024)
            yield from chunk
            if len(chunk) < 1024:
                return
            after = chunk[-1].order

    def in_delivery(self) -> List[Tuple[int, int]]:
        """``(queue id, message id)`` of every reference left in delivery."""
        return [PAIR.unpack(key) for key, _v in self.tables.busy.items()]

    def messages(self) -> Iterator[MessageImage]:
        """Every message (a full scan)."""
        for _key, msg in self.tables.msg.items():
            yield msg

    # -- folding ------------------------------------------------------------------------------
    def apply_many(self, records: Sequence[Tuple[int, Mapping[str, Any]]],
                   locations: Sequence[Location], lsn: int, sink: LivenessSink) -> None:
        """``apply`` of each of ``records`` (kind, payload) in turn, at ``locations``, with
        consecutive LSNs from ``lsn`` (the records of one append): MESSAGE and ACK records,
        most of them, are folded without ``apply``'s dispatch.

        Raises:
            IndexInvalidError: as ``apply``; the records before the failing one are folded.
        """
        self._sink = sink
        for (kind, payload), location in zip(records, locations):
            if kind == _DELIVERY:
                if lsn > self.last_lsn:
                    self.last_lsn = lsn
                self._folding = None
                self._delivery(payload, location, sink)
            elif kind == _MESSAGE or kind == _ACK:
                if lsn > self.last_lsn:
                    self.last_lsn = lsn
                self._folding = None
                if kind == _MESSAGE:
                    if not self._add_message(payload, location, lsn, -1):
                        sink.mark_dead([location])
                else:
                    target = self._ack(payload, sink)
                    if target is None:
                        sink.mark_dead([location])
                    else:
                        sink.mark_dead_after(location, [target])
            else:
                self.apply(kind, payload, location, lsn, sink)
            lsn += 1

    def apply(self, kind: int, payload: Mapping[str, Any], location: Location, lsn: int,
              sink: LivenessSink) -> None:
        """Fold one record. Unknown kinds are skipped (reported dead). Never raises on
        references to things that are gone (their records were reclaimed).

        Raises:
            IndexInvalidError: a committed index value read on the way is damaged.
        """
        if lsn > self.last_lsn:
            self.last_lsn = lsn
        self._folding = location if kind == _TX or kind == _DUE else None
        self._sink = sink
        if kind == _MESSAGE:
            if not self._add_message(payload, location, lsn, -1):
                sink.mark_dead([location])
        elif kind == RecordKind.ACK:
            target = self._ack(payload, sink)
            if target is None:
                sink.mark_dead([location])
            else:
                sink.mark_dead_after(location, [target])
        elif kind == RecordKind.DELIVERY:
            self._delivery(payload, location, sink)
        elif kind == RecordKind.TX:
            self._tx(payload, location, lsn, sink)
        elif kind == RecordKind.QUEUE_ADD:
            qid = int(payload["id"])
            self._bump(qid)
            old = self.queues.get(qid)
            if old is not None:
                self._drop(old.location)
            self.queues[qid] = QueueImage(qid, payload["name"], payload["addr"], payload["rt"],
                                          dict(payload.get("cfg") or {}), location)
            self._hold(location)
            self.dirty.add(("queue", qid))
        elif kind == RecordKind.QUEUE_DEL:
            self._delete_queue(payload, location, sink)
        elif kind == RecordKind.ADDRESS_ADD:
            aid = int(payload["id"])
            self._bump(aid)
            old_a = self.addresses.get(aid)
            if old_a is not None:
                self._drop(old_a.location)
            self.addresses[aid] = AddressImage(aid, payload["name"], tuple(payload["rt"]),
                                               bool(payload.get("auto")), location)
            self._hold(location)
            self.dirty.add(("addr", aid))
        elif kind == RecordKind.SETTINGS:
            self._settings(payload, location, sink)
        elif kind == RecordKind.QUEUE_UPDATE:
            self._queue_update(payload, location, sink)
        elif kind == RecordKind.DEPAGE:
            self._depage(payload, location, sink)
        elif kind == RecordKind.DUE:
            self._due(payload, location, lsn, sink)
        elif kind == RecordKind.ADDRESS_DEL:
            gone = self.addresses.pop(int(payload["id"]), None)
            if gone is None:
                sink.mark_dead([location])
            else:
                self.dirty.add(("addr", gone.id))
                self._superseded(gone.location, sink)
                sink.mark_dead_after(location, [gone.location])
        else:
            sink.mark_dead([location])

    def _queue_update(self, p: Mapping[str, Any], location: Location, sink: LivenessSink
                      ) -> None:
        queue = self.queues.get(int(p["id"]))
        if queue is None:
            sink.mark_dead([location])
            return
        self._superseded(queue.update_location, sink)
        queue.config = dict(p.get("cfg") or {})
        queue.update_location = location
        self._hold(location)
        self.dirty.add(("queue", queue.id))

    def _settings(self, p: Mapping[str, Any], location: Location, sink: LivenessSink) -> None:
        match = p["match"]
        old = self.settings.pop(match, None)
        self.dirty.add(("settings", match))
        if old is not None:
            self._superseded(old[1], sink)
        if p.get("settings") is None:  # a removal: a tombstone for the entry it removes
            if old is None:
                sink.mark_dead([location])
            else:
                sink.mark_dead_after(location, [old[1]])
            return
        self.settings[match] = (dict(p["settings"]), location)
        self._hold(location)

    def _bump(self, ident: int) -> None:
        if ident >= self.next_id:
            self.next_id = ident + 1

    def _add_message(self, p: Mapping[str, Any], location: Location, lsn: int, slot: int) -> bool:
        # the most frequent fold (every message, and all of a rebuild): kept to plain steps
        mid = int(p["mid"])
        if mid >= self.next_id:
            self.next_id = mid + 1
        known = self.queues
        queues = [known[q] for q in p["q"] if q in known] if "q" in p else None
        if not queues:
            return False
        t = self.tables
        # the payload's fields looked up by ``in``, not ``get`` (a call each): the keys
        # ``schema.message`` writes always, then those it writes when set
        address = p["addr"] if "addr" in p else ""
        size = len(p["body"]) if "body" in p else 0
        props = p["props"] if "props" in p else None
        at = p["at"] if "at" in p else 0
        prio = int(p["prio"]) if "prio" in p else 4
        pg = "pg" in p and bool(p["pg"]) and not at
        lane = PAGED_LANE if pg else 9 - prio if 0 <= prio <= 9 else lane_of(prio)
        t.msg.put(ID.pack(mid), MessageImage(mid, address, location, slot,
                                             dict(props) if props else {},
                                             int(p["ts"]) if "ts" in p else 0,
                                             int(p["exp"]) if "exp" in p else 0, prio, size,
                                             len(queues), lsn, lane), fresh=True)
        order = (lane << LANE_SHIFT | lsn, slot if slot > 0 else 0)
        paged = self.ledger.added(address, order, size, pg)
        seglive, seg = self.seglive, location.segment
        seglive[seg] = seglive[seg] + 1 if seg in seglive else 1  # _hold
        if at:  # into the queues' scheduled buffers (Artemis ring queues §3)
            at = int(at)
            for queue in queues:
                self._schedule(queue, RefImage(mid, order, at=at), mid)
            return True
        put, counted = t.qref.put, self.counted
        # Qpid last-value replacements in place: [[queue id, message id]...]
        ip = p["ip"] if "ip" in p else None
        for queue in queues:
            if ip and self._replacing(queue, mid, ip):
                continue
            if paged and queue.address != address:  # a wildcard address's copy: not paged
                self._place_apart(queue, mid, (lane_of(prio) << LANE_SHIFT | lsn, order[1]))
                continue
            put(TRIPLE.pack(queue.id, order[0], order[1]), RefImage(mid, order), True)
            queue.count += 1
            queue.paged += paged
            if queue.id not in counted:  # (a test, not a call, for most messages)
                counted.add(queue.id)
        return True

    def _delivery(self, p: Mapping[str, Any], location: Location, sink: LivenessSink) -> None:
        qid, mid = int(p["q"]), int(p["m"])
        msg = self.tables.msg.get(ID.pack(mid)) if qid in self.queues else None
        ref, where = self._ref_of(qid, mid, msg) if msg is not None else (None, None)
        if ref is None:
            sink.mark_dead([location])
            return
        if ref.delivery_location is not None:
            self._superseded(ref.delivery_location, sink)
        busy = not ("r" in p and p["r"])
        key = PAIR.pack(qid, mid)  # ref_key
        if busy and not ref.in_delivery:
            self.tables.busy.put(key, list(location), fresh=True)
        elif busy:
            self.tables.busy.put(key, list(location))
        elif ref.in_delivery:
            self.tables.busy.delete(key)
        ref.delivery_count = int(p["n"])
        ref.delivery_location = location
        ref.in_delivery = busy
        seglive, seg = self.seglive, location.segment
        seglive[seg] = seglive[seg] + 1 if seg in seglive else 1  # _hold
        at = int(p["at"]) if not busy and "at" in p else 0
        if at and at != ref.at:  # returned through the scheduled buffer (redelivery delay);
            # already there when a rebuild replays it without the DUE record that had put it
            # on the head (that record died when the reference left the head)
            queue = self.queues[qid]
            msg = self.message(mid)
            self._unplace(queue, ref, msg)
            ref.at = at
            if msg is not None:
                ref.order = msg.order
            self._schedule(queue, ref, mid)
            return
        if where is not None:  # _put_ref, where it was found
            self.tables.qref.put(where, ref)
        else:
            self._put_ref(qid, ref)

    def _tx(self, p: Mapping[str, Any], location: Location, lsn: int, sink: LivenessSink) -> None:
        """Messages first, then acks: an ack in the record may remove a message of the same
        record (a ring eviction or last-value replacement decided during the send; a
        replacement in place took the replaced reference's place already, ``_replacing``)."""
        self._bump(int(p.get("tx", 0)))
        remaining = sum(1 for slot, m in enumerate(p.get("msgs", ()))
                        if self._add_message(m, location, lsn, slot))
        tx = TxImage(remaining, [])
        tkey = tx_key(location)
        if remaining:
            self.tables.tx.put(tkey, tx, fresh=True)
        for a in p.get("acks", ()):
            target = self._ack(a, sink)
            if target is not None and target != location:
                tx.ack_targets.append(target)
        self._replaced = {}  # each had its ack in the record
        live = self.tables.tx.get(tkey) if remaining else None
        if live is not None and live.remaining > 0:
            self.tables.tx.put(tkey, tx)
            return
        if live is not None:
            self.tables.tx.delete(tkey)
        sink.mark_dead_after(location, tx.ack_targets)

    # -- queries and maintenance --------------------------------------------------------------
    def take(self, other: "StoreImage") -> None:
        """Become ``other``, an image rebuilt from the same journal (``recovery.rebuild``),
        in place: whoever holds this object (the engine's readers) reads the rebuilt state from
        now on. ``released`` stays this image's, and so do ``next_id`` and ``last_lsn`` where
        they are higher: ids handed out without a record (a non-durable message's) are never
        handed out again. ``other`` is not to be used afterwards."""
        keep = self.released, max(self.next_id, other.next_id), \
            max(self.last_lsn, other.last_lsn)
        for name in STATE:  # one by one: a compiled image has no __dict__ to update
            setattr(self, name, getattr(other, name))
        self.released, self.next_id, self.last_lsn = keep

    def summary(self) -> Dict[str, int]:
        """Counts for reports: addresses, queues, messages, references."""
        return {"addresses": len(self.addresses), "queues": len(self.queues),
                "messages": self.tables.msg.count, "references": self.tables.qref.count,
                "scheduled": self.tables.sched.count}
