"""Folds of the records that move references between the parts of a durable queue, and reads
of its scheduled buffer; ``StoreImage`` (``recovery.image``) inherits them.

- A MESSAGE record with a due time (``"at"``) puts its references in the queues' scheduled buffers:
  the ``sched`` table, in due order, each noted in the ``moved`` table (Artemis ring queues §3).
- A DUE record puts scheduled references on the head of their queue (order keys
  ``head_order``); it lives, counted in the ``tx`` table like a TX record, until every
  reference it moved has left that head.
- A DEPAGE record puts an address's paged references on their queues (Artemis ring queues §4).
- A TX record whose message says ``"ip"`` puts its reference on a Qpid last-value queue in
  place of the one it replaces (Qpid queues): it takes that one's order key (also when that
  one's record is gone: the entry names the key), noted in the ``moved`` table; the replaced
  one waits for the record's ack of it (``_replacing``).
- A MESSAGE record of a paged message also reaching a queue of a wildcard address (another
  address than the message's) puts that copy at its priority lane's key, not paged, noted in
  the ``moved`` table (``_place_apart``; Artemis addressing §4.17, Artemis pages a reference at its
  queue's own address).

The methods use the image's tables and its reference bookkeeping (``_unplace``, ``_ack``,
``_tx_done``): they are part of ``StoreImage``, kept apart to keep each module to one subject.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from mypy_extensions import trait

from mqstore.journal import Location
from .entries import (ID, PAIR, QUAD, MessageImage, Order, QueueImage, RefImage,
                      TxImage, below, in_lane, lane_of, lsn_in, order_key, ref_key,
                      sched_key, tx_key)
from .parts import ImageParts

HEAD_SHIFT = 20  # a reference put on its queue's head by a DUE record at LSN l, as the i-th of
# the record, gets order key (lane, LSN 0; l << HEAD_SHIFT | i): before every key from a message
# record in its lane (LSN >= 1), after every head key of an earlier DUE record


def head_order(lsn: int, i: int, lane: int) -> Order:
    """The order key of the ``i``-th reference a DUE record at ``lsn`` puts on its queue's
    head (``i`` < 2**20): the head of its message's priority ``lane`` (Artemis puts a
    scheduled message that comes due at the head of its priority level)."""
    return (in_lane(lane, 0), (lsn << HEAD_SHIFT) | i)


def is_head_order(order: Tuple[int, ...]) -> bool:
    """Whether ``order`` is a head key (``head_order``: a scheduled message came due)."""
    return lsn_in(order) == 0


@trait  # a part of StoreImage (mypyc compiles a mixin as a trait)
class ReferenceMoves(ImageParts):
    """The folds that move references (a mixin of ``StoreImage``; see the module docstring)."""

    def _replacing(self, queue: QueueImage, mid: int, entries: Any) -> bool:
        """Folding message ``mid`` of a TX record that says it replaces message ``old`` on
        ``queue`` in place (``[queue id, old(, order key)]``): when ``old`` is on it, ``mid``'s
        reference takes ``old``'s order key now and ``old``'s waits in ``_replaced`` for the
        record's ack of it (which comes after the record's messages); when ``old``'s record is
        gone (reclaimed, compacted away), it takes the order key the entry gives. True then;
        False: place it as usual."""
        entry = next((e for e in entries if int(e[0]) == queue.id), None)
        if entry is None or self._folding is None:
            return False
        old = int(entry[1])
        msg = self.message(old)
        ref = self.ref(queue.id, old, msg) if msg is not None else None
        t = self.tables
        if ref is not None and not ref.at and ref.mid == old:
            order = ref.order
            self._unplace(queue, ref, msg)
            self._replaced[(queue.id, old)] = ref
        elif len(entry) >= 4 and msg is None:
            order = (int(entry[2]), int(entry[3]))
            if t.qref.get(order_key(queue.id, order)) is not None:
                return False  # taken (never so when the journal is whole): its own place
        else:
            return False
        t.qref.put(order_key(queue.id, order), RefImage(mid, order), True)
        key = ref_key(queue.id, mid)
        t.moved.put(key, [0, order[0], order[1]], t.moved.get(key) is None)
        queue.count += 1
        self.counted.add(queue.id)
        return True

    def _place_apart(self, queue: QueueImage, mid: int, order: Order) -> None:
        """Put message ``mid``'s reference on ``queue`` at ``order``, not its message's order
        key (noted in the ``moved`` table): a copy on a queue of a wildcard address that
        matched the address sent to is not paged with the message (``engine.routing.placement``)."""
        t = self.tables
        t.qref.put(order_key(queue.id, order), RefImage(mid, order), True)
        key = ref_key(queue.id, mid)
        t.moved.put(key, [0, order[0], order[1]], t.moved.get(key) is None)
        queue.count += 1
        self.counted.add(queue.id)

    def scheduled_refs(self, qid: int, upto: Optional[int] = None, limit: int = 1024,
                       after: Optional[RefImage] = None) -> List[RefImage]:
        """Up to ``limit`` references in queue ``qid``'s scheduled buffer, in due order (equal
        times in order-key order), due at ``upto`` ms at the latest (``None``: any time),
        after reference ``after`` (from the first when ``None``)."""
        start = QUAD.pack(qid, 0, 0, 0) if after is None else \
            self._key(qid, after) + b"\x00"
        stop = QUAD.pack(qid + 1, 0, 0, 0) if upto is None or upto >= (1 << 64) - 1 else \
            QUAD.pack(qid, upto + 1, 0, 0)
        return [ref for _key, ref in self.tables.sched.range(start, stop, limit)]

    def all_scheduled(self, qid: int) -> Iterator[RefImage]:
        """Every reference in queue ``qid``'s scheduled buffer, in due order (in chunks)."""
        after: Optional[RefImage] = None
        while True:
            chunk = self.scheduled_refs(qid, None, 1024, after)
            yield from chunk
            if len(chunk) < 1024:
                return
            after = chunk[-1]

    def _schedule(self, queue: QueueImage, ref: RefImage, mid: int) -> None:
        """Put ``ref`` (not in any table now, ``ref.at`` set) in ``queue``'s scheduled
        buffer."""
        t = self.tables
        t.sched.put(sched_key(queue.id, ref.at, ref.order), ref, True)
        key = ref_key(queue.id, mid)
        t.moved.put(key, [ref.at, ref.order[0], ref.order[1]], t.moved.get(key) is None)
        queue.scheduled += 1
        self.counted.add(queue.id)

    def _due_gone(self, location: Location) -> None:
        """One reference a DUE record put on a head left it: the record is dead once none
        is left (as a TX record with its messages), then waits for what its acks cancel."""
        tkey = tx_key(location)
        due = self.tables.tx.get(tkey)
        if due is None:
            return
        due.remaining -= 1
        if due.remaining > 0 or not self._tx_done(location):
            self.tables.tx.put(tkey, due)
            return
        self.tables.tx.delete(tkey)
        self._sink.mark_dead_after(location, due.ack_targets)

    def _due(self, p: Mapping[str, Any], location: Location, lsn: int, sink: Any
             ) -> None:
        """Scheduled references that came due join the head of their queue, in the record's
        order (``head_order``), then the acks the queue's policies decided apply (a full ring
        removes the scheduled message itself, Artemis ring queues §3). The record lives until every
        reference it moved has left that head, then until every record its acks cancel is
        gone: counted in the ``tx`` table as a TX record is (each moved reference's ``moved``
        entry names the record), so a big due backlog costs index entries, not RAM."""
        queue = self.queues.get(int(p["q"]))
        targets: List[Location] = []
        moved = 0
        tkey = tx_key(location)
        due = TxImage(0, [])
        if queue is not None:
            t = self.tables
            for i, mid in enumerate(p.get("m", ())):
                msg = self.message(int(mid))
                ref = self.ref(queue.id, int(mid), msg) if msg is not None else None
                if ref is None or msg is None:
                    continue
                # not scheduled: a replay without the record that had put it in the buffer
                # (a DELIVERY returning it with a redelivery delay, superseded by a later one
                # and compacted away); the running broker moved it to this head, so does this
                self._unplace(queue, ref, msg)
                ref.at = 0
                ref.order = head_order(lsn, i, msg.lane)
                t.qref.put(order_key(queue.id, ref.order), ref, True)
                key = ref_key(queue.id, ref.mid)
                t.moved.put(key, [0, ref.order[0], ref.order[1], *location],
                            t.moved.get(key) is None)
                queue.count += 1
                self.counted.add(queue.id)
                moved += 1
        if moved:
            due.remaining = moved
            self.tables.tx.put(tkey, due, fresh=True)
        for a in p.get("acks", ()):
            target = self._ack(a, sink)
            if target is not None and target != location:
                targets.append(target)
        live = self.tables.tx.get(tkey) if moved else None
        if live is not None and live.remaining > 0:
            live.ack_targets = targets
            self.tables.tx.put(tkey, live)
            return
        if live is not None:
            self.tables.tx.delete(tkey)
        if targets:
            sink.mark_dead_after(location, targets)
        else:
            sink.mark_dead([location])

    def _depage(self, p: Mapping[str, Any], location: Location, sink: Any) -> None:
        """The address's paged messages up to ``upto`` join their queues (they count in its
        size again), then the acks the queues' policies decided apply. The record lives until
        every message it moved and every record its acks cancel is gone: a rebuild must see
        those messages on their queues, not paged."""
        address = p["addr"]
        upto = (int(p["upto"][0]), int(p["upto"][1]))
        state = self.ledger.pages.get(address)
        targets: List[Location] = []
        if state is not None and upto >= state.start:
            moved: Dict[int, MessageImage] = {}
            qref = self.tables.qref
            for queue in [q for q in self.queues.values() if q.address == address]:
                self.counted.add(queue.id)
                after = order_key(queue.id, below(state.start))
                prefix = ID.pack(queue.id)
                while True:
                    chunk = qref.scan(prefix, after, 1024)
                    for key, ref in chunk:
                        if (PAIR.unpack(key[8:])) > upto:
                            chunk = []
                            break
                        queue.paged -= 1
                        msg = moved.get(ref.mid) or self.message(ref.mid)
                        if msg is None:
                            continue
                        moved[ref.mid] = msg
                        # it joins its queue in its priority's lane (keys before the scan's)
                        qref.delete(key)
                        ref.order = (in_lane(lane_of(msg.priority), lsn_in(ref.order)),
                                     ref.order[1])
                        qref.put(order_key(queue.id, ref.order), ref, True)
                    if len(chunk) < 1024:
                        break
                    after = chunk[-1][0]
            self.ledger.depaged(address, upto, list(moved.values()))
            for mid, msg in moved.items():  # not paged any more: its references' lane
                msg.lane = lane_of(msg.priority)
                self.tables.msg.put(ID.pack(mid), msg)
            for msg in moved.values():
                if msg.location not in targets:
                    targets.append(msg.location)
        for a in p.get("acks", ()):
            target = self._ack(a, sink)
            if target is not None and target not in targets:
                targets.append(target)
        if targets:
            sink.mark_dead_after(location, targets)
        else:
            sink.mark_dead([location])


__all__ = ["HEAD_SHIFT", "ReferenceMoves", "head_order", "is_head_order"]
