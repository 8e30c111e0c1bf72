"""Ending open deliveries at a close and at a reopen, the same way.

A clean close cancels every unsettled delivery of every session in one go, in consumption
order. Reopening after kill -9 or a power loss ends the deliveries the journal shows open (a
DELIVERY record not followed by an ack or a return) with the very same cancel, in the same
order (the DELIVERY records' order). So a ring queue drops what has no room when it comes back
(seed 000_721345e89d5d1b64.txt: "keep B, C, & D and delete A"), a last-value queue drops what a
newer value replaced (seed 004 §4.9), and max-delivery-attempts dead-letters, whichever way the
store was left: the state after a crash is the state after a clean close (issue 11, defect 9).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Tuple

from engine.delivery import cancel
from engine.errors import BrokerFailedError
from engine.queue import MessageRef
from journal import Location

if TYPE_CHECKING:  # pragma: no cover
    from engine.broker import Broker


def end_open_deliveries(broker: "Broker") -> None:
    """At close: cancel every unsettled delivery of every session, in consumption order
    (``MessageRef.taken``). Nothing is done after a storage failure (recovery ends them at the
    next open)."""
    from engine.session import Session
    if broker.failed:
        return
    try:
        with broker.lock:
            refs = [d._ref for s in broker.sessions if isinstance(s, Session)
                    for d in s.take_unsettled()]
            ticket = cancel(broker, sorted(refs, key=lambda r: r.taken))
        broker.wait(ticket)
    except BrokerFailedError:
        pass  # failed meanwhile: recovery ends them at the next open


def end_recovered_deliveries(broker: "Broker", busy: List[Tuple[Location, MessageRef]]) -> None:
    """At open: ``busy`` holds each reference the journal shows in delivery, with its last
    DELIVERY record's location (loaded on the ready list in journal order). They are put in
    delivery and cancelled in consumption order; the queues' ready lists are then in journal
    order again, as a reopen after a clean close loads them. The decisions are journaled.

    Raises:
        BrokerFailedError: writing the decisions failed.
    """
    if not busy:
        return
    with broker.lock:
        refs = []
        for _loc, ref in sorted(busy, key=lambda item: item[0]):
            ref.queue.detach(ref)
            ref.queue.delivering[ref.msg.mid] = ref
            refs.append(ref)
        ticket = cancel(broker, refs)
        for queue in {ref.queue.id: ref.queue for ref in refs}.values():
            queue.sort_ready()
    broker.wait(ticket)
