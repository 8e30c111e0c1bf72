"""The demo's departures: one day of 2013 replayed on an injected clock through scheduled
messages (Artemis ring queues §3).

Every flight of the day is sent at once to the queue ``flights.departures``, scheduled at its
departure time (ms since the epoch, 2013), in an order that is not departure order (by carrier
and flight number). The broker runs on a clock that replays the day compressed into a few
seconds; a consumer receives each flight when it departs. The job checks that flights come out
in departure order (equal times in send order), none before its time, and that
``scheduled_count`` drains to 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Sequence, Tuple

from mqstore.engine import Broker, Message, QueueConfig, RoutingType
from .flights import Flight

QUEUE = "flights.departures"
DAY_SECONDS = 4.0  # real seconds the replayed day takes


@dataclass
class Departures:
    """What the departures run saw: flights of the day, the day replayed (2013 ms since the
    epoch, first and last departure), the real seconds it took, the most flights ever
    scheduled at once, the departures as received ``(departure ms, send rank, clock at
    receipt)``, and the queue's counts at the end."""

    flights: int
    first_ms: int
    last_ms: int
    seconds: float
    peak_scheduled: int
    received: List[Tuple[int, int, int]] = field(default_factory=list)
    end_counts: Tuple[int, int] = (0, 0)

    def checks(self) -> Dict[str, bool]:
        """The departures' checks, by name."""
        deps = [(ms, rank) for ms, rank, _at in self.received]
        return {f"departures: {self.flights:,} flights of one day delivered in departure "
                f"order": deps == sorted(deps) and len(deps) == self.flights,
                "departures: none delivered before its departure time on the replayed clock":
                    all(at >= ms for ms, _rank, at in self.received),
                "departures: scheduled_count drained to 0 (and the queue to empty)":
                    self.end_counts == (0, 0) and self.peak_scheduled == self.flights}


def one_day(flights: Sequence[Flight]) -> List[Flight]:
    """The flights of the busiest day among the first week (as data, not by name)."""
    days: Dict[int, List[Flight]] = {}
    for f in flights:
        days.setdefault(f.timestamp_ms // 86_400_000, []).append(f)
    week = sorted(days)[:7]
    return max((days[d] for d in week), key=len) if week else []


class ReplayClock:
    """2013 time: ``start_ms`` until ``start()``, then running ``speed`` times faster than
    real time."""

    def __init__(self, start_ms: int, speed: float) -> None:
        self.start_ms = start_ms
        self.speed = speed
        self.t0: float | None = None

    def start(self) -> None:
        """Let the clock run from now."""
        self.t0 = time.monotonic()

    def __call__(self) -> int:
        if self.t0 is None:
            return self.start_ms
        return self.start_ms + int((time.monotonic() - self.t0) * 1000 * self.speed)


def run_departures(directory: str, flights: Sequence[Flight], memory_budget: int,
                   open_broker: Callable[..., Broker] = Broker.open) -> Departures:
    """Replay one day of ``flights`` through ``QUEUE`` of the store in ``directory``."""
    day = one_day(flights)
    first, last = min(f.timestamp_ms for f in day), max(f.timestamp_ms for f in day)
    speed = max(last - first, 1) / (DAY_SECONDS * 1000)
    clock = ReplayClock(first - 60_000, speed)
    started = time.monotonic()
    broker = open_broker(directory, memory_budget=memory_budget, clock=clock)
    try:
        if QUEUE not in broker.address_names():
            broker.create_address(QUEUE, {RoutingType.ANYCAST})
            broker.create_queue(QueueConfig(QUEUE, QUEUE))
        order = sorted(range(len(day)), key=lambda i: (day[i].properties["carrier"],
                                                       int(day[i].properties["flight"]), i))
        rank = {day[i].seq: n for n, i in enumerate(order)}
        departs = {f.seq: f.timestamp_ms for f in day}
        with broker.session() as s:
            s.send_many(QUEUE, [Message(day[i].line, dict(day[i].properties),
                                        scheduled_delivery_time=day[i].timestamp_ms)
                                for i in order])
            peak = broker.queue_info(QUEUE).scheduled_count
            result = Departures(len(day), first, last, 0.0, peak)
            clock.start()  # the day begins once every flight is scheduled
            consumer = s.create_consumer(QUEUE)
            while len(result.received) < len(day):
                got = consumer.receive(timeout=0.02)  # a receive puts what is due on the queue
                if got is None:
                    if time.monotonic() - started > DAY_SECONDS * 20:
                        break  # the checks report what is missing
                    continue
                seq = int(got.message.properties["seq"])
                result.received.append((departs[seq], rank[seq], clock()))
                got.ack()
        info = broker.queue_info(QUEUE)
        result.end_counts = (info.message_count, info.scheduled_count)
    finally:
        broker.close()
    result.seconds = time.monotonic() - started
    return result


__all__ = ["DAY_SECONDS", "Departures", "QUEUE", "ReplayClock", "one_day", "run_departures"]
