"""Ending open deliveries at a close and at a reopen, the same way.

A clean close cancels every unsettled delivery of every session in one go, in consumption order.
Reopening after kill -9 or a power loss ends the deliveries the journal shows open (a DELIVERY
record not followed by an ack or a return) with the very same cancel, in the same order (the
DELIVERY records' order). So a ring queue drops what has no room when it comes back (Artemis ring
queues: "keep B, C, & D and delete A"), a last-value queue drops what a newer value replaced
(Artemis addressing §4.9), and max-delivery-attempts dead-letters, whichever way the store was left:
the state after a crash is the state after a clean close (issue 11, defect 9).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from ..routing.core import BrokerCore
from ..routing.orphans import settle_out
from .settle import cancel
from ..errors import BrokerFailedError
from ..queues.policies import LastValuePolicy
from ..queues.queue import Queue
from mqstore.journal import Location, Ticket
from mqstore.recovery import RefImage, StoreImage
from mqstore.recovery.schema import AckReason


def end_open_deliveries(broker: BrokerCore) -> None:
    """At close: cancel every unsettled delivery of every session, and what its consumers
    prefetched (``engine.delivery.prefetch``: delivery counts put back), in consumption order
    (``MessageRef.taken``). Nothing is done after a storage failure (recovery ends them at the
    next open)."""
    if broker.storage.failed:
        return
    try:
        with broker.lock:
            refs = [d._ref for s in broker.sessions for d in s.take_unsettled()]
            refs += [r for s in broker.sessions for c in s.consumers
                     for r in c.prefetched.drain()]
            ticket = cancel(broker, sorted(refs, key=lambda r: r.taken), delayed=False)
        broker.storage.wait(ticket)
    except BrokerFailedError:
        pass  # failed meanwhile: recovery ends them at the next open


def end_recovered_deliveries(broker: BrokerCore, image: StoreImage) -> None:
    """At open, right after the broker loaded ``image``: the references the image shows in
    delivery (their last DELIVERY record not marked returned) are put in delivery and
    cancelled in consumption order, the order of those DELIVERY records. The queues' heads are
    then in journal order again, as a reopen after a clean close reads them (a paging queue
    leaves them to the index, which has them in queue order). The decisions are journaled.

    Raises:
        BrokerFailedError: writing the decisions failed.
    """
    busy: List[Tuple[Location, Queue, RefImage]] = []
    for qid, mid in image.in_delivery():
        queue = broker.queues_by_id.get(qid)
        ref = image.ref(qid, mid)
        if queue is None or queue.non_destructive or ref is None or \
                ref.delivery_location is None:
            continue  # (non-destructive: nothing was taken off the queue)
        busy.append((ref.delivery_location, queue, ref))
    if not busy:
        return
    with broker.lock:
        refs = [queue.take_recovered(r.mid, r.order, r.delivery_count)
                for _loc, queue, r in sorted(busy, key=lambda item: item[0])]
        ticket = cancel(broker, [r for r in refs if r is not None], delayed=False)
        for queue in {q.id: q for _l, q, _r in busy}.values():
            queue.sort_ready()
            queue.page_out_head()
    broker.storage.wait(ticket)


def replace_superseded(broker: BrokerCore) -> None:
    """At open, after ``end_recovered_deliveries``: on an Artemis last-value queue, a message
    that a newer one with the same key superseded while it was in delivery, and whose delivery
    left no record (``persist_delivery_count_before_delivery`` off, the default), is on the
    queue again beside the newer one. It is replaced now (an ACK with reason ``replaced``), as
    the cancel of its delivery would have replaced it: the queue is the same after a crash as
    after a clean close. (Qpid last-value queues journal every delivery, so their cancels
    decide it already.)

    Raises:
        BrokerFailedError: writing the decisions failed.
    """
    ticket: Optional[Ticket] = None
    with broker.lock:
        for queue in list(broker.queues.values()):
            for policy in queue.policies:
                if type(policy) is LastValuePolicy:  # (not a Qpid one, a subclass)
                    gone = policy.superseded(list(queue.ready))
                    for ref in gone:
                        queue.take_ref(ref)
                    if gone:
                        ticket = settle_out(broker, queue, gone, None,
                                            AckReason.REPLACED.value)[0] or ticket
    broker.storage.wait(ticket)
