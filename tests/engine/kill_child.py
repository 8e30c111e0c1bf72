"""Child for the broker kill -9 test: a producer thread and a consumer thread on one broker
(with the smallest RAM budget, its address also pages after three messages).

Prints ``s N`` before sending message N and ``S N`` once the send returned (durable); ``D N C``
after receiving N with delivery count C; ``a N`` before acking and ``A N`` once the ack returned
(durable); with acks that do not block (``block_on_acknowledge=False``), ``N K`` once the ack
returned (journaled, durable once a send that starts after it returns). With ``persist`` false
the broker does not journal deliveries of durable messages before hand-out
(``persist_delivery_count_before_delivery=False``). Now and then it compacts the journal (a
kill inside a compaction must leave an index the next open uses).
"""

from __future__ import annotations

import random
import sys
import threading
import time

from mqstore.engine import (AddressSettings, AlreadyExistsError, Broker, Message, QueueConfig,
                            RoutingType)
from mqstore.journal import JournalOptions

_out = threading.Lock()


def say(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main(directory: str, start: int, seed: int, budget: int, block: bool, persist: bool
         ) -> None:
    rng = random.Random(seed)
    paging = AddressSettings(max_size_messages=3) if budget < 65536 else AddressSettings()
    broker = Broker.open(directory, journal_options=JournalOptions(segment_size=128 * 1024),
                         checkpoint_records=500, memory_budget=budget,
                         address_settings={"a": paging},
                         persist_delivery_count_before_delivery=persist)
    try:
        broker.create_address("a", {RoutingType.ANYCAST})
        broker.create_queue(QueueConfig("q", "a"))
    except AlreadyExistsError:
        pass
    say("ready")

    def produce() -> None:
        session = broker.session()
        n = start
        while True:
            batch = list(range(n, n + rng.randrange(1, 5)))
            for k in batch:
                say(f"s {k}")
            session.send_many("a", [Message(b"%d" % k) for k in batch])
            for k in batch:
                say(f"S {k}")
            n += len(batch)
            time.sleep(rng.random() * 0.003)  # let the consumer keep up

    def consume() -> None:
        session = broker.session(block_on_acknowledge=block)
        consumer = session.create_consumer("q", window=20)
        while True:
            d = consumer.receive(timeout=0.2)
            if d is None:
                continue
            k = int(d.message.body)
            say(f"D {k} {d.delivery_count}")
            if rng.random() < 0.8:
                say(f"a {k}")
                d.ack()
                say(f"A {k}" if block else f"N {k}")
            if rng.random() < 0.02:  # a kill may land inside it: the index must stay usable
                broker.compact(force=True)

    threading.Thread(target=produce, daemon=True).start()
    consume()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
         sys.argv[5] == "1", sys.argv[6] == "1")
