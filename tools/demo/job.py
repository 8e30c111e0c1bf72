"""The demo's job on an open broker: one producer thread replays flights to the multicast
address ``flights`` (and the hourly weather to ``weather``); worker threads consume and ack the
work queue ``flights.ops`` in batches. ``flights.board`` is a ring of the last 50 departures,
``flights.planes`` a non-destructive last-value queue keyed by tail number (where each plane was
last seen), ``weather.airports`` one keyed by airport.

Events are reported through a callback as they become durable: ``("sent", last_seq)`` after a
batch send returned, ``("acking", [seq...])`` before acking a batch and ``("acked", [seq...])``
after the ack returned. The same code runs in the child that gets killed and in the resumed run.
"""

from __future__ import annotations

import threading
from typing import Callable, List, Sequence

from mqstore.engine import AlreadyExistsError, Broker, Message, QueueConfig, RoutingType
from .flights import Flight

ADDRESS = "flights"
WORK_QUEUE = "flights.ops"
BOARD_QUEUE = "flights.board"    # ring of the last 50 departures
PLANES_QUEUE = "flights.planes"  # last value per tail number, non-destructive
WEATHER = "weather"
WEATHER_QUEUE = "weather.airports"  # last value per origin, non-destructive
BOARD_SIZE = 50
MEMORY_BUDGET = 16 << 20  # bytes: small enough that the work queue's backlog pages
Event = Callable[[str, object], None]


def ensure_topology(broker: Broker) -> None:
    """Create the addresses and queues when missing."""
    mc = RoutingType.MULTICAST
    for action in (lambda: broker.create_address(ADDRESS, {mc}),
                   lambda: broker.create_address(WEATHER, {mc}),
                   lambda: broker.create_queue(QueueConfig(WORK_QUEUE, ADDRESS, mc)),
                   lambda: broker.create_queue(QueueConfig(BOARD_QUEUE, ADDRESS, mc,
                                                           ring_size=BOARD_SIZE)),
                   lambda: broker.create_queue(QueueConfig(PLANES_QUEUE, ADDRESS, mc,
                                                           last_value_key="tailnum",
                                                           non_destructive=True)),
                   lambda: broker.create_queue(QueueConfig(WEATHER_QUEUE, WEATHER, mc,
                                                           last_value_key="origin",
                                                           non_destructive=True))):
        try:
            action()
        except AlreadyExistsError:
            pass


def weather_resume(broker: Broker, weather: Sequence[Flight]) -> int:
    """Index of the first weather report not yet sent (the latest per airport is on the
    weather queue; reports go out in time order)."""
    with broker.session() as s:
        sent = [int(m.message.properties["seq"]) for m in s.create_browser(WEATHER_QUEUE)]
    return max(sent) + 1 if sent else 0


def produce(broker: Broker, flights: Sequence[Flight], start: int, batch: int,
            event: Event, weather: Sequence[Flight] = ()) -> None:
    """Send flights ``start..`` in order, ``batch`` per durable send; before each batch, the
    weather reports up to that batch's last departure."""
    w = weather_resume(broker, weather) if weather else 0
    with broker.session() as s:
        for i in range(start, len(flights), batch):
            chunk = flights[i:i + batch]
            until = chunk[-1].timestamp_ms
            j = w
            while j < len(weather) and weather[j].timestamp_ms <= until:
                j += 1
            if j > w:
                s.send_many(WEATHER, [Message(f.line, dict(f.properties),
                                              timestamp=f.timestamp_ms) for f in weather[w:j]])
                w = j
            s.send_many(ADDRESS, [Message(f.line, dict(f.properties), timestamp=f.timestamp_ms)
                                  for f in chunk])
            event("sent", chunk[-1].seq)
        if w < len(weather):
            s.send_many(WEATHER, [Message(f.line, dict(f.properties), timestamp=f.timestamp_ms)
                                  for f in weather[w:]])


def work(broker: Broker, stop: threading.Event, event: Event, batch: int = 200) -> None:
    """Consume and ack ``flights.ops`` until ``stop`` is set and the queue is drained. The
    acks wait for their fsync (``block_on_acknowledge=True``; by default, Artemis's, an ack is
    durable at the next group commit), since "acked" is reported as durable: the check after
    the kill counts on it."""
    with broker.session(block_on_acknowledge=True) as s:
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
        event: Event, weather: Sequence[Flight] = ()) -> None:
    """Produce from ``start`` and consume everything, with ``workers`` worker threads."""
    ensure_topology(broker)
    stop = threading.Event()
    threads = [threading.Thread(target=work, args=(broker, stop, event), daemon=True)
               for _ in range(workers)]
    for t in threads:
        t.start()
    try:
        produce(broker, flights, start, batch, event, weather)
    finally:
        stop.set()
        for t in threads:
            t.join()
