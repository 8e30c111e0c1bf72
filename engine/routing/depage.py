"""Depaging: an address's paged messages join their queues, oldest first (Artemis ring queues §4).

A queue that has nothing left on it but paged references asks for more (a consumer, a browser
past the end, a non-destructive cursor): its address moves its oldest paged messages, up to a
refill's worth, onto every queue they were routed to, in order. As each reference joins, the
queue's policies decide as for a new arrival (a ring removes its head, a last-value queue
replaces the older value); one DEPAGE record journals the move and those decisions together,
so a reopen finds the same split between paged and queued. Until that record is durable a
crash only leaves the messages paged: the DELIVERY records that hand them out come after it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from .address import Address
from .core import BrokerCore
from ..queues.queue import MessageRef, Order, Queue
from ..queues.refs import lane_of, pending, with_lsn
from mqstore.journal import Ticket
from mqstore.recovery import schema
from mqstore.recovery.schema import RecordKind

Removal = Tuple[MessageRef, str]


def message_key(ref: MessageRef) -> Order:
    """A key that orders a reference by its message, the same on every queue: the journal
    order of a journaled message (also for its copies on queues that do not journal it), else
    the order its placement gave it (one per message, ``Placement``)."""
    order = ref.order
    return order[:2] if order[1] < 1 << 62 else order


def _share_messages(lists: Sequence[List[MessageRef]]) -> None:
    """References read separately (the index, page files) may carry separate objects for
    one message: give them all one, the one RAM holds if any (its references count on it),
    with the body when a page file read one (a copy on a queue that does not journal it
    needs it once the journaled copies are gone)."""
    shared: Dict[int, Any] = {}
    for refs in lists:
        for r in refs:
            cur = shared.setdefault(r.msg.mid, r.msg)
            if cur is r.msg:
                continue
            keep, other = (r.msg, cur) if r.msg.refcount and not cur.refcount else (cur, r.msg)
            if keep.body is None and other.body is not None:
                keep.body = other.body
                if not keep.refcount:  # charged with its body when it is first held
                    keep.mem_size += len(other.body)
            shared[r.msg.mid] = keep
    for refs in lists:
        for r in refs:
            r.msg = shared[r.msg.mid]


def depage(broker: BrokerCore, addr: Address, asking: Queue, want: int
           ) -> Tuple[List[Removal], Optional[Ticket], Sequence[Queue]]:
    """Move ``addr``'s oldest paged messages, up to ``want`` of them, onto their queues in
    order (broker lock held), for queue ``asking``: a queue that journals nothing and did not
    ask keeps its own (it depends on no other queue's order).

    Returns:
        What the queues' policies removed (detached; the caller forgets them and wakes
        waiting consumers), the ticket of the DEPAGE record (``None`` when nothing was
        journaled), and the queues that received references.

    Raises:
        JournalError: the write failed (the broker fail-stops).
    """
    now = broker.now_ms()
    # a queue that journals nothing depends on no other: only the one that asks moves
    queues = [q for q in addr.queues.values() if q.paged.count() and
              (q is asking or q.paged.reader is not None)]
    firsts = {q.id: q.paged.first(q, want) for q in queues}
    keys = sorted({message_key(r) for refs in firsts.values() for r in refs})[:want]
    if not keys:
        return [], None, []
    upto = keys[-1]  # every queue's list holds all its references up to it (at most ``want``)
    _share_messages(list(firsts.values()))
    removals: List[Removal] = []
    journaled: Optional[Order] = None
    touched = []
    for q in queues:
        joining = [r for r in firsts[q.id] if message_key(r) <= upto]
        for ref in joining:
            if ref.journaled:
                journaled = ref.order if journaled is None else max(journaled, ref.order)
            # from the paged lane to its priority's, as Artemis depages into its priority list
            ref.order = with_lsn(pending(lane_of(ref.msg.priority)), ref.order)
            removals += q.add_tail(ref, now, arrival=False)
            q.paged.taken(ref)
            if not ref.journaled and not ref.msg.journaled:
                broker.sizes.depaged_transient(ref.msg)
        if joining:
            touched.append(q)
    acks = [schema.ack(r.queue.id, r.msg.mid, why) for r, why in removals if r.journaled]
    ticket = None
    if journaled is not None or acks:
        ticket = broker.storage.write([(RecordKind.DEPAGE,
                                schema.depage(addr.name, journaled or (0, 0), acks))])
    for q in touched:
        q.written()
    return removals, ticket, touched
