"""The queue semantics a program sees through the session API, run twice: on the embedded broker
(``broker.session()``) and through ``mqstore.connect`` on the same broker served over AMQP 1.0.
Each case uses only what both give (send, consumers, subscribers, receive, ack, reject,
release), so a difference is a bug of the served path. The broker's clock is injected, so
scheduled and expiring messages need no waiting."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, List

import pytest

from mqstore import (AddressFullError, AddressSettings, Broker, Message, QueueConfig,
                     RoutingType, connect, serve)
from mqstore.engine import AddressFullPolicy
from tests.waiting import PATIENCE, wait_for

T0 = 1_800_000_000_000  # the injected clock's start, ms since the epoch


class Side:
    """One way in: ``session()`` gives a session (embedded or remote) on ``broker``."""

    def __init__(self, broker: Broker, session: Callable[[], Any], clock: List[int]) -> None:
        self.broker = broker
        self.session = session
        self.clock = clock

    def bodies(self, consumer: Any, n: int) -> List[bytes]:
        """``n`` messages' bodies, each acked."""
        out = []
        for _ in range(n):
            d = consumer.receive(PATIENCE)
            assert d is not None, f"only {out} of {n}"
            out.append(d.message.body)
            d.ack()
        return out


@pytest.fixture(params=["embedded", "served"])
def side(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Side]:
    clock = [T0]
    broker = Broker.open(str(tmp_path / "store"), expiry_scan_ms=0, clock=lambda: clock[0])
    try:
        if request.param == "embedded":
            yield Side(broker, broker.session, clock)
            return
        with serve(broker, "127.0.0.1:0", anonymous=True) as server:
            remote = connect(server.url, client_id="app")
            try:
                yield Side(broker, remote.session, clock)
            finally:
                remote.close()
    finally:
        broker.close()


def queue(broker: Broker, name: str, **config: Any) -> None:
    broker.create_address(name, routing_types={RoutingType.ANYCAST})
    broker.create_queue(QueueConfig(name, name, routing_type=RoutingType.ANYCAST, **config))


def test_fifo_within_a_priority_and_higher_priorities_first(side: Side) -> None:
    queue(side.broker, "q")
    s = side.session()
    s.send_many("q", [Message(b"low1", priority=1), Message(b"high", priority=9),
                      Message(b"low2", priority=1), Message(b"mid", priority=5)])
    assert side.bodies(s.create_consumer("q"), 4) == [b"high", b"mid", b"low1", b"low2"]


def test_a_selector_takes_only_what_it_matches(side: Side) -> None:
    queue(side.broker, "q")
    s = side.session()
    s.send_many("q", [Message(b"a", {"color": "red"}), Message(b"b", {"color": "blue"})])
    blue = s.create_consumer("q", selector="color = 'blue'")
    assert side.bodies(blue, 1) == [b"b"]
    assert side.bodies(s.create_consumer("q"), 1) == [b"a"]


def test_a_scheduled_message_waits_for_its_time(side: Side) -> None:
    queue(side.broker, "q")
    s = side.session()
    s.send("q", Message(b"later", scheduled_delivery_time=T0 + 60_000))
    s.send("q", Message(b"delayed", delivery_delay=30_000))
    s.send("q", Message(b"now"))
    c = s.create_consumer("q")
    assert side.bodies(c, 1) == [b"now"]
    assert side.broker.queue_info("q").scheduled_count == 2
    side.clock[0] = T0 + 120_000
    side.broker.deliver_scheduled()
    assert side.bodies(c, 2) == [b"delayed", b"later"]


def test_an_expired_message_is_not_delivered(side: Side) -> None:
    queue(side.broker, "q")
    s = side.session()
    s.send("q", Message(b"stale", expiration=T0 + 1_000))
    s.send("q", Message(b"fresh", expiration=T0 + 100_000))
    side.clock[0] = T0 + 10_000
    assert side.bodies(s.create_consumer("q"), 1) == [b"fresh"]


def test_a_group_stays_with_one_consumer(side: Side) -> None:
    queue(side.broker, "q")
    s = side.session()
    one = s.create_consumer("q", window=10)
    two = s.create_consumer("q", window=10)
    s.send_many("q", [Message(b"%d" % i, group_id="g") for i in range(4)])
    first = one.receive(PATIENCE)
    assert first is not None and first.message.group_id == "g"
    assert two.receive(0) is None  # the group is one's
    assert [first.message.body] + side.bodies(one, 3) == [b"0", b"1", b"2", b"3"]
    first.ack()


def test_last_value_and_ring_queues(side: Side) -> None:
    queue(side.broker, "prices", last_value_key="sym")
    queue(side.broker, "board", ring_size=2)
    s = side.session()
    s.send_many("prices", [Message(b"1", {"sym": "A"}), Message(b"2", {"sym": "B"}),
                           Message(b"3", {"sym": "A"})])
    s.send_many("board", [Message(b"x"), Message(b"y"), Message(b"z")])
    assert sorted(side.bodies(s.create_consumer("prices"), 2)) == [b"2", b"3"]
    assert side.bodies(s.create_consumer("board"), 2) == [b"y", b"z"]


def test_max_delivery_attempts_dead_letters(side: Side) -> None:
    queue(side.broker, "q")
    queue(side.broker, "DLQ")
    side.broker.set_address_settings("q", AddressSettings(max_delivery_attempts=2,
                                                          dead_letter_address="DLQ"))
    s = side.session()
    s.send("q", Message(b"poison"))
    c = s.create_consumer("q", window=1)
    for count in (1, 2):
        d = c.receive(PATIENCE)
        assert d is not None and d.delivery_count == count
        d.release()
    wait_for(lambda: side.broker.queue_info("DLQ").message_count == 1, "dead-lettered")
    assert side.bodies(s.create_consumer("DLQ"), 1) == [b"poison"]


def test_a_closed_consumer_gives_back_what_it_held(side: Side) -> None:
    queue(side.broker, "q")
    s = side.session()
    s.send_many("q", [Message(b"a"), Message(b"b")])
    c = s.create_consumer("q")
    held = c.receive(PATIENCE)
    assert held is not None and held.message.body == b"a"
    c.close()
    d = s.create_consumer("q").receive(PATIENCE)
    assert d is not None and d.message.body == b"a" and d.delivery_count == 2


def test_multicast_copies_to_each_subscription_and_fqqn_reads_one(side: Side) -> None:
    side.broker.create_address("news", routing_types={RoutingType.MULTICAST})
    side.broker.create_queue(QueueConfig("news.all", "news", routing_type=RoutingType.MULTICAST))
    s = side.session()
    sub = s.create_subscriber("news")
    s.send("news", Message(b"headline"))
    assert side.bodies(sub, 1) == [b"headline"]
    assert side.bodies(s.create_consumer("news::news.all"), 1) == [b"headline"]


def test_a_full_address_with_fail_refuses_and_stores_nothing(side: Side) -> None:
    queue(side.broker, "q")
    side.broker.set_address_settings("q", AddressSettings(
        max_size_messages=1, address_full_policy=AddressFullPolicy.FAIL))
    s = side.session()
    s.send("q", Message(b"one"))
    with pytest.raises(AddressFullError):
        s.send("q", Message(b"two"))
    assert side.broker.queue_info("q").message_count == 1


def test_receive_times_out_with_none(side: Side) -> None:
    queue(side.broker, "q")
    assert side.session().create_consumer("q").receive(0.05) is None


def test_an_exclusive_queue_feeds_its_first_consumer_only(side: Side) -> None:
    queue(side.broker, "q", exclusive=True)
    s = side.session()
    first = s.create_consumer("q")
    second = s.create_consumer("q")
    s.send_many("q", [Message(b"a"), Message(b"b")])
    assert second.receive(0) is None
    assert side.bodies(first, 2) == [b"a", b"b"]
    first.close()
    s.send("q", Message(b"c"))
    assert side.bodies(second, 1) == [b"c"]  # the next one in attach order takes over


def test_max_consumers_refuses_one_more(side: Side) -> None:
    from mqstore import ResourceLimitError
    queue(side.broker, "q", max_consumers=1)
    s = side.session()
    s.create_consumer("q")
    with pytest.raises(ResourceLimitError):
        s.create_consumer("q")


def test_a_non_destructive_queue_keeps_what_it_delivers(side: Side) -> None:
    queue(side.broker, "q", non_destructive=True)
    s = side.session()
    s.send("q", Message(b"kept"))
    assert side.bodies(s.create_consumer("q"), 1) == [b"kept"]
    assert side.bodies(s.create_consumer("q"), 1) == [b"kept"]
    assert side.broker.queue_info("q").message_count == 1
