"""A small application for the crash-test kit's tests: durable sends, then acks, and the checks
an application would make (nothing reported sent is lost, nothing reported acked comes back,
order kept). ``DURABLE`` false makes it claim what a non-durable send cannot keep."""

from mqstore.engine import Message, QueueConfig

DURABLE = True


def setup(broker):  # type: ignore[no-untyped-def]
    broker.create_address("orders")
    broker.create_queue(QueueConfig("orders", "orders"))


def workload(broker, ledger):  # type: ignore[no-untyped-def]
    # acks that return once durable: what "nothing reported acked comes back" needs (by
    # default an ack is durable at the journal's next group commit, Artemis's default)
    with broker.session(block_on_acknowledge=True) as s:
        for n in range(30):
            with ledger.op("sent", n):
                s.send("orders", Message(b"%d" % n, durable=DURABLE))
        c = s.create_consumer("orders")
        for _ in range(10):
            d = c.receive(1)
            n = int(d.message.body)
            with ledger.op("acked", n):
                d.ack()


def check(broker, ledger):  # type: ignore[no-untyped-def]
    with broker.session() as s:
        present = [int(m.message.body) for m in s.create_browser("orders")]
    acked = set(ledger.done_keys("acked"))
    lost = [n for n in ledger.done_keys("sent")
            if n not in present and n not in acked and n not in ledger.maybe_keys("acked")]
    assert not lost, f"lost {lost}"
    assert not acked & set(present), "an acked message came back"
    assert present == sorted(present), "out of order"
