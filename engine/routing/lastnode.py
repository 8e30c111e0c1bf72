"""Persistence on the last node of a cluster (Qpid queues, "Enforcing
persistence on the last node in a cluster"; Qpid ``qpid.persist_last_node``, qpid-config
``--cluster-durable``).

mqstore is embedded: the cluster is the embedding application's, and it reports how many nodes
are alive (``Broker.set_cluster_nodes``). When that count falls to 1 from more than one (never
when the store started alone), the broker enters last-node mode: every non-durable message on a
durable queue configured ``persist_last_node`` is journaled once, and so is every new one while
the mode lasts, including those that come back to such a queue (cancelled, rolled back) or come
due on it. Leaving the mode stops forcing new messages; entering it again journals only what is
not journaled yet. A forced message is then a journaled one in every way: an ack, a last-value
replacement or a ring eviction removes it from the store, and a crash keeps it.

A message forced after it was queued is journaled where the journal is then, and its place in
the queue becomes that place: it moves behind the messages journaled before it, in the running
broker as after a crash (Qpid's store recovers in store order too), so the queue's order in RAM
and in the index stay one. Paged non-durable messages (in page files) are not forced.
"""

from __future__ import annotations

import heapq
from typing import Any, Dict, List, Optional, Tuple

from .core import BrokerCore
from ..queues.queue import MessageRef, Queue
from ..queues.refs import in_lane, lane_of
from ..values import TIME_MAX, check_int
from mqstore.journal import Ticket
from mqstore.recovery import schema
from mqstore.recovery.schema import RecordKind


class LastNode:
    """The cluster size the embedding application reported, and whether this node is in
    last-node mode.

    Attributes:
        nodes: nodes alive, as last reported (``None``: never reported).
        active: in last-node mode (the count fell to 1 from more than one).
    """

    def __init__(self) -> None:
        self.nodes: Optional[int] = None
        self.active = False

    def report(self, nodes: int) -> Optional[bool]:
        """Take a new count; returns True when the mode starts, False when it ends, None when
        it does not change.

        Raises:
            InvalidArgumentError: nodes not an int >= 1.
        """
        check_int("nodes", nodes, 1, TIME_MAX)
        before, self.nodes = self.nodes, nodes
        if nodes == 1 and before is not None and before > 1 and not self.active:
            self.active = True
            return True
        if nodes > 1 and self.active:
            self.active = False
            return False
        return None


def enter(broker: BrokerCore, queues: List[Queue]) -> Optional[Ticket]:
    """Last-node mode starts: mark ``queues`` (the durable ``persist_last_node`` ones) and
    journal every non-durable message on them (ready, in delivery, scheduled)."""
    refs: List[MessageRef] = []
    scheduled: List[Tuple[int, MessageRef]] = []
    for q in queues:
        q.persisting = True
        refs += [r for r in list(q.ready) + list(q.tail) + list(q.delivering.values())
                 if not r.journaled]
        kept = []
        for at, n, ref in q.scheduled.heap:
            (kept.append((at, n, ref)) if ref.journaled else scheduled.append((at, ref)))
        heapq.heapify(kept)
        q.scheduled.heap = kept
    return force(broker, refs, scheduled)


def leave(queues: List[Queue]) -> None:
    """Last-node mode ends: new non-durable messages are not journaled any more."""
    for q in queues:
        q.persisting = False


def force(broker: BrokerCore, refs: List[MessageRef],
          scheduled: List[Tuple[int, MessageRef]] = ()) -> Optional[Ticket]:  # type: ignore[assignment]
    """Journal ``refs`` (references journaled nowhere, on queues in last-node mode) and
    ``scheduled`` ((due time, reference) taken out of their scheduled buffers' RAM part): one
    MESSAGE record per message for all its forced references, and a DELIVERY record for each
    one in delivery (a crash then ends that delivery as a reopen does). The references are
    journaled ones from then on."""
    by_msg: Dict[int, Tuple[Any, List[MessageRef], int]] = {}
    ordered = sorted(scheduled, key=lambda item: (item[0], item[1].order))  # due order
    for at, ref in [(0, r) for r in refs] + ordered:
        if ref.msg.journaled:  # journaled on another queue already: one record per message
            if at:
                heapq.heappush(ref.queue.scheduled.heap, (at, 0, ref))
            continue
        entry = by_msg.setdefault(ref.msg.mid, (ref.msg, [], at))
        entry[1].append(ref)
    if not by_msg:
        return None
    records: List[tuple] = []
    slots: List[Tuple[Any, List[MessageRef], int, int]] = []
    for msg, group, at in by_msg.values():
        assert msg.body is not None  # a message journaled nowhere keeps its body
        slots.append((msg, group, at, len(records)))
        records.append((RecordKind.MESSAGE, schema.message(
            msg.mid, msg.address, [r.queue.id for r in group], msg.body, msg.properties,
            msg.timestamp, msg.expiration, msg.priority, False, at)))
        for r in group:  # in delivery; or delivered before: the count survives a crash too
            if r.consumer is not None and not at:
                records.append((RecordKind.DELIVERY,
                                schema.delivery(r.queue.id, msg.mid, r.delivery_count)))
            elif r.delivery_count > 0:
                records.append((RecordKind.DELIVERY, schema.delivery(
                    r.queue.id, msg.mid, r.delivery_count, returned=True, at=at)))
    ticket = broker.storage.write(records)
    first = ticket.lsn - len(records) + 1
    touched: Dict[int, Queue] = {}
    for msg, group, at, index in slots:
        if not msg.journaled:
            broker.sizes.release_transient(msg)  # the image counts it now
            msg.journaled = True
        order = (in_lane(lane_of(msg.priority), first + index), 0)  # as the record says
        for ref in group:
            ref.journaled = True
            queue = ref.queue
            if ref.in_queue:  # to its place in the journal: the tail of its lane
                queue.detach(ref)  # (from the lane it is in: a depaged one's is another)
                ref.order = order
                queue.cache.let_go(msg, gone=False)
                queue.load_tail(ref)
                touched[queue.id] = queue
                continue
            ref.order = order
            if at:  # the index's scheduled buffer holds it now
                queue.cache.let_go(msg, gone=False)
                queue.scheduled.added_durable(at)
    for queue in touched.values():
        queue.written()  # a queue that pages sends them to the index
    return ticket


__all__ = ["LastNode", "enter", "force", "leave"]


def set_cluster_nodes(broker: Any, nodes: int) -> None:
    """``Broker.set_cluster_nodes``: the count of live nodes reported; entering last-node mode
    journals the non-durable messages of ``persist_last_node`` queues (``enter``), leaving it
    ends that (``leave``). ``broker``: a ``BrokerCore`` with its ``last_node`` (``LastNode``).

    Raises:
        InvalidArgumentError: nodes not an int >= 1. BrokerFailedError, IllegalStateError.
    """
    with broker.lock:
        broker.storage.check_open()
        change = broker.last_node.report(nodes)
        queues = [q for q in broker.queues.values() if q.config.persist_last_node]
        ticket = None
        if change is True:
            ticket = enter(broker, queues)
        elif change is False:
            leave(queues)
    broker.storage.wait(ticket)
