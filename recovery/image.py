"""The image: a plain model of the durable state, folded mechanically from journal records.

``StoreImage.apply`` folds one record. Replay at open, the tail after an index checkpoint, and
the running engine (for every record it writes) all fold through it, so a rebuilt image equals
the one kept up to date at run time. The fold also reports, through a ``LivenessSink``, which
records it makes dead, so the journal can reclaim segments: a message record dies with its last
reference; an ACK is a tombstone that lives until the record it cancels is gone; a DELIVERY
record dies when superseded or acked; a TX record dies when its messages are gone and then
waits, like an ACK, for the records its acks cancel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

from journal import Location
from recovery.schema import RecordKind

Order = Tuple[int, int]  # (LSN of the record that added the reference, slot in that record)


class LivenessSink(Protocol):
    """Where the fold reports dead records (a ``Journal``, or a recorder in tests)."""

    def mark_dead(self, locations: Sequence[Location]) -> None: ...

    def mark_dead_after(self, location: Location, targets: Sequence[Location]) -> None: ...


class NullSink:
    """A sink that ignores liveness (read-only inspection)."""

    def mark_dead(self, locations: Sequence[Location]) -> None:
        pass

    def mark_dead_after(self, location: Location, targets: Sequence[Location]) -> None:
        pass


@dataclass
class AddressImage:
    """A durable address: id, name, routing types ("anycast"/"multicast"), auto-created flag."""

    id: int
    name: str
    routing_types: Tuple[str, ...]
    auto_created: bool
    location: Location


@dataclass
class RefImage:
    """A message reference on a durable queue: message id, order key, delivery count (times it
    was handed to a consumer), the DELIVERY record holding that count, and whether that record
    left it in delivery (handed out, not settled nor returned)."""

    mid: int
    order: Order
    delivery_count: int = 0
    delivery_location: Optional[Location] = None
    in_delivery: bool = False


@dataclass
class QueueImage:
    """A durable queue, its configuration, and its references in queue order."""

    id: int
    name: str
    address: str
    routing_type: str
    config: Dict[str, Any]
    location: Location
    refs: Dict[int, RefImage] = field(default_factory=dict)
    update_location: Optional[Location] = None


@dataclass
class MessageImage:
    """A durable message: where its body is (record location; ``slot`` >= 0 inside a TX record),
    its metadata, and how many references it still has."""

    mid: int
    address: str
    location: Location
    slot: int
    properties: Dict[str, Any]
    timestamp: int
    expiration: int
    priority: int
    body_size: int
    refcount: int


@dataclass
class TxImage:
    """A TX record still needed: messages of it still referenced, and what its acks cancel."""

    remaining: int
    ack_targets: List[Location]


@dataclass
class StoreImage:
    """The durable state of a store.

    Attributes:
        addresses, queues, messages: by id.
        txs: TX records still live, by location.
        settings: address-settings entries by match pattern, with the record holding each.
        last_lsn: LSN of the last record folded.
        next_id: the next free id for addresses, queues, messages and transactions.
    """

    addresses: Dict[int, AddressImage] = field(default_factory=dict)
    queues: Dict[int, QueueImage] = field(default_factory=dict)
    messages: Dict[int, MessageImage] = field(default_factory=dict)
    txs: Dict[Location, TxImage] = field(default_factory=dict)
    settings: Dict[str, Tuple[Dict[str, Any], Location]] = field(default_factory=dict)
    last_lsn: int = 0
    next_id: int = 1
    _folding: Optional[Location] = field(default=None, repr=False, compare=False)

    # -- folding ------------------------------------------------------------------------------
    def apply(self, kind: int, payload: Mapping[str, Any], location: Location, lsn: int,
              sink: LivenessSink) -> None:
        """Fold one record. Unknown kinds are skipped (reported dead). Never raises on
        references to things that are gone (their records were reclaimed)."""
        self.last_lsn = max(self.last_lsn, lsn)
        self._folding = location if kind == RecordKind.TX else None
        if kind == RecordKind.MESSAGE:
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
            self.queues[qid] = QueueImage(qid, payload["name"], payload["addr"], payload["rt"],
                                          dict(payload.get("cfg") or {}), location)
        elif kind == RecordKind.QUEUE_DEL:
            self._delete_queue(int(payload["id"]), location, sink)
        elif kind == RecordKind.ADDRESS_ADD:
            aid = int(payload["id"])
            self._bump(aid)
            self.addresses[aid] = AddressImage(aid, payload["name"], tuple(payload["rt"]),
                                               bool(payload.get("auto")), location)
        elif kind == RecordKind.SETTINGS:
            self._settings(payload, location, sink)
        elif kind == RecordKind.QUEUE_UPDATE:
            queue = self.queues.get(int(payload["id"]))
            if queue is None:
                sink.mark_dead([location])
            else:
                if queue.update_location is not None:
                    sink.mark_dead([queue.update_location])
                queue.config = dict(payload.get("cfg") or {})
                queue.update_location = location
        elif kind == RecordKind.ADDRESS_DEL:
            gone = self.addresses.pop(int(payload["id"]), None)
            if gone is None:
                sink.mark_dead([location])
            else:
                sink.mark_dead([gone.location])
                sink.mark_dead_after(location, [gone.location])
        else:
            sink.mark_dead([location])

    def _settings(self, p: Mapping[str, Any], location: Location, sink: LivenessSink) -> None:
        match = p["match"]
        old = self.settings.pop(match, None)
        if p.get("settings") is None:  # a removal: a tombstone for the entry it removes
            if old is None:
                sink.mark_dead([location])
            else:
                sink.mark_dead([old[1]])
                sink.mark_dead_after(location, [old[1]])
            return
        if old is not None:
            sink.mark_dead([old[1]])
        self.settings[match] = (dict(p["settings"]), location)

    def _bump(self, ident: int) -> None:
        if ident >= self.next_id:
            self.next_id = ident + 1

    def _add_message(self, p: Mapping[str, Any], location: Location, lsn: int, slot: int) -> bool:
        mid = int(p["mid"])
        self._bump(mid)
        queues = [q for q in p.get("q", ()) if q in self.queues]
        if not queues:
            return False
        self.messages[mid] = MessageImage(mid, p.get("addr", ""), location, slot,
                                          dict(p.get("props") or {}), int(p.get("ts", 0)),
                                          int(p.get("exp", 0)), int(p.get("prio", 4)),
                                          len(p.get("body", b"")), len(queues))
        order = (lsn, max(slot, 0))
        for q in queues:
            self.queues[q].refs[mid] = RefImage(mid, order)
        return True

    def _ack(self, p: Mapping[str, Any], sink: LivenessSink) -> Optional[Location]:
        """Remove a reference; return the location of the message's record (the ACK's target),
        or ``None`` when there was nothing to remove."""
        queue = self.queues.get(int(p["q"]))
        mid = int(p["m"])
        ref = queue.refs.pop(mid, None) if queue is not None else None
        if ref is None:
            return None
        msg = self.messages[mid]
        self._release_ref(ref, msg, sink)
        return msg.location

    def _release_ref(self, ref: RefImage, msg: MessageImage, sink: LivenessSink) -> None:
        if ref.delivery_location is not None:
            sink.mark_dead([ref.delivery_location])
        msg.refcount -= 1
        if msg.refcount > 0:
            return
        del self.messages[msg.mid]
        if msg.slot < 0:
            sink.mark_dead([msg.location])
            return
        tx = self.txs.get(msg.location)
        if tx is not None:
            tx.remaining -= 1
            if tx.remaining <= 0 and self._tx_done(msg.location):
                del self.txs[msg.location]
                sink.mark_dead_after(msg.location, tx.ack_targets)

    def _tx_done(self, location: Location) -> bool:
        """Whether a TX record's fold is complete (not still inside ``_tx`` for it)."""
        return location != self._folding

    def _delivery(self, p: Mapping[str, Any], location: Location, sink: LivenessSink) -> None:
        queue = self.queues.get(int(p["q"]))
        ref = queue.refs.get(int(p["m"])) if queue is not None else None
        if ref is None:
            sink.mark_dead([location])
            return
        if ref.delivery_location is not None:
            sink.mark_dead([ref.delivery_location])
        ref.delivery_count = int(p["n"])
        ref.delivery_location = location
        ref.in_delivery = not p.get("r", False)

    def _tx(self, p: Mapping[str, Any], location: Location, lsn: int, sink: LivenessSink) -> None:
        """Messages first, then acks: an ack in the record may remove a message of the same
        record (a ring eviction or last-value replacement decided during the send)."""
        self._bump(int(p.get("tx", 0)))
        remaining = sum(1 for slot, m in enumerate(p.get("msgs", ()))
                        if self._add_message(m, location, lsn, slot))
        tx = TxImage(remaining, [])
        if remaining:
            self.txs[location] = tx
        for a in p.get("acks", ()):
            target = self._ack(a, sink)
            if target is not None and target != location:
                tx.ack_targets.append(target)
        if location in self.txs and self.txs[location].remaining > 0:
            return
        self.txs.pop(location, None)
        sink.mark_dead_after(location, tx.ack_targets)

    def _delete_queue(self, qid: int, location: Location, sink: LivenessSink) -> None:
        queue = self.queues.pop(qid, None)
        if queue is None:
            sink.mark_dead([location])
            return
        for ref in queue.refs.values():
            self._release_ref(ref, self.messages[ref.mid], sink)
        if queue.update_location is not None:
            sink.mark_dead([queue.update_location])
        sink.mark_dead([queue.location])
        sink.mark_dead_after(location, [queue.location])

    # -- queries and maintenance --------------------------------------------------------------
    def live_locations(self) -> List[Location]:
        """Every location the image refers to (for checking them against the journal)."""
        locs = [a.location for a in self.addresses.values()]
        locs += [q.location for q in self.queues.values()]
        locs += [q.update_location for q in self.queues.values() if q.update_location]
        locs += [loc for _values, loc in self.settings.values()]
        locs += [m.location for m in self.messages.values()]
        locs += [r.delivery_location for q in self.queues.values() for r in q.refs.values()
                 if r.delivery_location is not None]
        return locs

    def relocate(self, moved: Mapping[Location, Location]) -> None:
        """Apply compaction's relocations to every location held."""
        if not moved:
            return
        for a in self.addresses.values():
            a.location = moved.get(a.location, a.location)
        self.settings = {m: (v, moved.get(loc, loc)) for m, (v, loc) in self.settings.items()}
        for q in self.queues.values():
            q.location = moved.get(q.location, q.location)
            if q.update_location is not None:
                q.update_location = moved.get(q.update_location, q.update_location)
            for r in q.refs.values():
                if r.delivery_location is not None:
                    r.delivery_location = moved.get(r.delivery_location, r.delivery_location)
        for m in self.messages.values():
            m.location = moved.get(m.location, m.location)
        self.txs = {moved.get(loc, loc): TxImage(t.remaining, [moved.get(x, x)
                                                               for x in t.ack_targets])
                    for loc, t in self.txs.items()}

    def summary(self) -> Dict[str, int]:
        """Counts for reports: addresses, queues, messages, references."""
        return {"addresses": len(self.addresses), "queues": len(self.queues),
                "messages": len(self.messages),
                "references": sum(len(q.refs) for q in self.queues.values())}
