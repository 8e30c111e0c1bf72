"""The demo's job on an open broker: one producer thread replays flights to the multicast
address ``flights``; worker threads consume and ack the work queue ``flights.ops`` in batches.

Events are reported through a callback as they become durable: ``("sent", last_seq)`` after a
batch send returned, ``("acking", [seq...])`` before acking a batch and ``("acked", [seq...])``
after the ack returned. The same code runs in the child that gets killed and in the resumed run.
"""

from __future__ import annotations

import threading
from typing import Callable, List, Sequence

from engine import AlreadyExistsError, Broker, Message, QueueConfig, RoutingType
from tools.flights import Flight

ADDRESS = "flights"
WORK_QUEUE = "flights.ops"
Event = Callable[[str, object], None]


def ensure_topology(broker: Broker) -> None:
    """Create the address and the work queue when missing."""
    try:
        broker.create_address(ADDRESS, {RoutingType.MULTICAST})
    except AlreadyExistsError:
        pass
    try:
        broker.create_queue(QueueConfig(WORK_QUEUE, ADDRESS, RoutingType.MULTICAST))
    except AlreadyExistsError:
        pass


def produce(broker: Broker, flights: Sequence[Flight], start: int, batch: int,
            event: Event) -> None:
    """Send flights ``start..`` in order, ``batch`` per durable send."""
    with broker.session() as s:
        for i in range(start, len(flights), batch):
            chunk = flights[i:i + batch]
            s.send_many(ADDRESS, [Message(f.line, dict(f.properties), timestamp=f.timestamp_ms)
                                  for f in chunk])
            event("sent", chunk[-1].seq)


def work(broker: Broker, stop: threading.Event, event: Event, batch: int = 200) -> None:
    """Consume and ack ``flights.ops`` until ``stop`` is set and the queue is drained."""
    with broker.session() as s:
        consumer = s.create_consumer(WORK_QUEUE, window=batch)
        while True:
            got = consumer.receive_many(batch, timeout=0.2)
            if not got:
                if stop.is_set():
                    return
                continue
            seqs: List[int] = [int(d.message.properties["seq"]) for d in got]
            event("acking", seqs)
            s.ack_many(got)
            event("acked", seqs)


def run(broker: Broker, flights: Sequence[Flight], start: int, workers: int, batch: int,
        event: Event) -> None:
    """Produce from ``start`` and consume everything, with ``workers`` worker threads."""
    ensure_topology(broker)
    stop = threading.Event()
    threads = [threading.Thread(target=work, args=(broker, stop, event), daemon=True)
               for _ in range(workers)]
    for t in threads:
        t.start()
    try:
        produce(broker, flights, start, batch, event)
    finally:
        stop.set()
        for t in threads:
            t.join()
