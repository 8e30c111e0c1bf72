"""A store that holds every kind of record the engine writes, for tests of offline tools: ring
evictions, last-value replacements, expiry, dead letters, rejects, scheduled messages (DUE),
paging (DEPAGE), transactions, deleted queues (with and without an alternate address),
settings set, replaced and removed, over many small segments."""

from __future__ import annotations

import time

from mqstore.engine import (AddressSettings, Broker, Message, QueueConfig, RoutingType)
from mqstore.journal import JournalOptions

OPTS = JournalOptions(segment_size=16 * 1024)


def build_rich(d: str) -> None:
    """Write the store at ``d`` (a new directory) and close it cleanly."""
    clock = [int(time.time() * 1000)]  # injected: scheduled messages come due when it moves
    # (every delivery journaled: a journal with every kind of record, and redeliveries)
    b = Broker.open(d, journal_options=OPTS, checkpoint_records=0, clock=lambda: clock[0],
                    persist_delivery_count_before_delivery=True)
    for name in ("work", "DLA", "expired", "bulk", "ring", "lvq", "temp", "temp2", "alt"):
        b.create_address(name, {RoutingType.ANYCAST})
    b.set_address_settings("work", AddressSettings(max_delivery_attempts=2,
                                                   dead_letter_address="DLA",
                                                   expiry_address="expired"))
    b.set_address_settings("work", AddressSettings(max_delivery_attempts=2,
                                                   dead_letter_address="DLA",
                                                   expiry_address="expired",
                                                   redelivery_delay=0))
    b.set_address_settings("other.#", AddressSettings(max_delivery_attempts=5))
    b.remove_address_settings("other.#")
    b.set_address_settings("bulk", AddressSettings(max_size_bytes=4000))
    for q, a, extra in (("work", "work", {}), ("DLQ", "DLA", {}), ("EXQ", "expired", {}),
                        ("bulk", "bulk", {}), ("ring", "ring", {"ring_size": 5}),
                        ("lvq", "lvq", {"last_value": True}), ("temp", "temp", {}),
                        ("temp2", "temp2", {"alternate_address": "alt"}), ("alt", "alt", {})):
        b.create_queue(QueueConfig(q, a, **extra))
    now = clock[0]
    with b.session() as s:
        for i in range(20):
            s.send("ring", Message(f"r{i}"))
            s.send("lvq", Message(f"v{i}", {"_AMQ_LVQ_NAME": f"k{i % 3}"}))
        s.send_many("work", [Message(f"w{i}" * 20) for i in range(30)])
        s.send_many("work", [Message(f"x{i}", expiration=now - 1000) for i in range(5)])
        s.send_many("work", [Message(f"s{i}", scheduled_delivery_time=now + 200)
                             for i in range(6)])
        s.send_many("bulk", [Message("b" * 300) for _ in range(40)])  # pages past 4000 bytes
        s.send_many("temp", [Message(f"t{i}") for i in range(7)])
        s.send_many("temp2", [Message(f"u{i}") for i in range(7)])
    b.checkpoint()
    b.expire_messages()
    for _ in range(2):  # past max delivery attempts: the first three go to the DLA
        with b.session(transacted=True) as t:
            c = t.create_consumer("work")
            for _ in range(3):
                assert c.receive(1) is not None
            t.rollback()
            c.close()
    with b.session() as s:
        c = s.create_consumer("work")
        for i in range(10):
            d = c.receive(1)
            d.reject() if i % 4 == 0 else d.ack()
        c.close()
        bulk = s.create_consumer("bulk")
        for _ in range(30):
            bulk.receive(1).ack()
        bulk.close()
    clock[0] += 300
    b.deliver_scheduled()
    with b.session(transacted=True) as t:
        c = t.create_consumer("work")
        for _ in range(4):
            c.receive(1).ack()
        t.send("work", Message("in-tx"))
        t.commit()
        c.close()
    b.delete_queue("temp")
    b.delete_queue("temp2")
    b.checkpoint()
    b.close()
