"""The folds that remove a reference (a part of ``StoreImage``): an
ACK record's, alone or inside a TX or DUE record, and what it frees, the message its last
reference held (and a TX record none of whose messages is referenced any more). Kept apart from
``recovery.image`` to keep each module to one subject; the methods are ``StoreImage``'s.

What it uses of the other parts is declared once, in ``recovery.parts``.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

from mypy_extensions import trait

from mqstore.journal import Location
from .entries import (ID, LANE_SHIFT, LSN_MASK, TRIPLE, MessageImage, QueueImage, RefImage,
                      ref_key, sched_key, tx_key)
from .errors import IndexInvalidError
from .parts import ImageParts


@trait  # a part of StoreImage (mypyc compiles a mixin as a trait)
class ReferenceSettling(ImageParts):
    """Removing references and freeing what they held (see the module docstring)."""

    def _ack(self, p: Mapping[str, Any], sink: Any) -> Optional[Location]:
        """Remove a reference; return the location of the message's record (the ACK's target),
        or ``None`` when there was nothing to remove."""
        # the second most frequent fold (every message settled): kept to plain steps
        qid, mid = int(p["q"]), int(p["m"])
        if qid not in self.queues:
            return None
        queue = self.queues[qid]
        key = ID.pack(mid)
        msg = self.tables.msg.get(key)  # self.message, inline
        if msg is None:
            return None
        if self._replaced:
            gone = self._replaced.pop((qid, mid), None)
            if gone is not None:  # replaced in place by the record's message: placed no more
                self._remove_ref(queue, gone, msg, sink, placed=False)
                self._release_msg(msg, sink, key)
                return msg.location
        ref, _where = self._ref_of(qid, mid, msg)
        if ref is None:
            return None
        if ref.mid != mid:
            raise IndexInvalidError(f"queue {qid} holds message {ref.mid} where message {mid} "
                                    f"belongs")
        self._unplace(queue, ref, msg)  # _remove_ref, inline
        if ref.in_delivery:
            self.tables.busy.delete(ref_key(qid, mid))
        if ref.delivery_location is not None:
            self._superseded(ref.delivery_location, sink)
        if qid not in self.counted:
            self.counted.add(qid)
        self._release_msg(msg, sink, key)
        return msg.location

    def _ref_of(self, qid: int, mid: int, msg: MessageImage
                ) -> Tuple[Optional[RefImage], Optional[bytes]]:
        """Message ``mid``'s reference on queue ``qid`` (``ref``, as the folds look it up) and
        its ``qref`` key when it is at its message's order key (most are), else ``None``."""
        slot = msg.slot
        where = TRIPLE.pack(qid, msg.lane << LANE_SHIFT | msg.lsn, slot if slot > 0 else 0)
        ref = self.tables.qref.get(where)  # (order_key(qid, msg.order), inline)
        if ref is not None:
            return ref, where
        return self.ref(qid, mid, msg), None  # moved (scheduled, or onto the head)

    def _remove_ref(self, queue: QueueImage, ref: RefImage, msg: Optional[MessageImage],
                    sink: Any, placed: bool = True) -> None:
        if placed:
            self._unplace(queue, ref, msg)
        if ref.in_delivery:
            self.tables.busy.delete(ref_key(queue.id, ref.mid))
        if ref.delivery_location is not None:
            self._superseded(ref.delivery_location, sink)
        self.counted.add(queue.id)

    def _unplace(self, queue: QueueImage, ref: RefImage, msg: Optional[MessageImage]) -> None:
        """Take ``ref`` out of its table (``sched`` or ``qref``) and the ``moved`` table, and
        out of the queue's counts."""
        t = self.tables
        apart = msg is not None and queue.address != msg.address  # a wildcard's copy
        order = ref.order
        if ref.at:
            t.sched.delete(sched_key(queue.id, ref.at, order))
            queue.scheduled -= 1
        else:
            if msg is not None and not apart and self.ledger.pages and \
                    self.ledger.is_paged(msg):
                queue.paged -= 1
            t.qref.delete(TRIPLE.pack(queue.id, order[0], order[1]))  # order_key
            queue.count -= 1
        head = order[0] & LSN_MASK == 0  # is_head_order
        if ref.at or head or (msg is not None and (order[0] != msg.lane << LANE_SHIFT | msg.lsn
                                                   or order[1] != (msg.slot if msg.slot > 0
                                                                   else 0))):
            key = ref_key(queue.id, ref.mid)
            where = t.moved.get(key) if head else None
            t.moved.delete(key)
            if where is not None and len(where) > 3:  # moved there by a DUE record
                self._due_gone(Location(*where[3:6]))
        elif apart and t.moved.count:  # placed apart while its message was paged (depaged
            key = ref_key(queue.id, ref.mid)  # since: at its message's order key now)
            if t.moved.get(key) is not None:
                t.moved.delete(key)

    def _release_msg(self, msg: MessageImage, sink: Any,
                     key: Optional[bytes] = None) -> None:
        """One reference of ``msg`` less (``key``: its ``msg`` key, when the caller has it)."""
        msg.refcount -= 1
        if key is None:
            key = ID.pack(msg.mid)
        if msg.refcount > 0:
            self.tables.msg.put(key, msg)
            return
        self.tables.msg.delete(key)
        paged = self.ledger.released(msg)
        if self.released is not None:
            self.released(msg, paged)
        self._drop(msg.location)
        if msg.slot < 0:
            sink.mark_dead([msg.location])
            return
        tkey = tx_key(msg.location)
        tx = self.tables.tx.get(tkey)
        if tx is not None:
            tx.remaining -= 1
            if tx.remaining <= 0 and self._tx_done(msg.location):
                self.tables.tx.delete(tkey)
                sink.mark_dead_after(msg.location, tx.ack_targets)
            else:
                self.tables.tx.put(tkey, tx)

    def _tx_done(self, location: Location) -> bool:
        """Whether a TX record's fold is complete (not still inside ``_tx`` for it)."""
        return location != self._folding
