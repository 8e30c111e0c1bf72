"""Queue management by filter or id (issue 15; Artemis QueueControl removeMessages,
removeMessage, moveMessages, moveMessage): only what no consumer holds is touched, the work is
journaled before it returns, and a crash part way leaves each message in exactly one place."""

from __future__ import annotations

import random
from pathlib import Path
from typing import List

import pytest

from mqstore.engine import (AddressSettings, Broker, FilterSyntaxError, InvalidArgumentError,
                            Message, QueueConfig, QueueNotFoundError, RoutingType)
from mqstore.engine.paging.memory import MIN_BUDGET
from mqstore.journal import JournalOptions, MqStoreError, SimulatedFileSystem
from mqstore.recovery import MemoryIndex

OPTS = JournalOptions(segment_size=4096, max_record_size=2000)
NOW = 1_700_000_000_000


def ns(b: Broker, queue: str) -> List[int]:
    with b.session() as s:
        return [m.message.properties["n"] for m in s.create_browser(queue)]


def setup(b: Broker, n: int = 9) -> None:
    b.create_address("a")
    b.create_queue(QueueConfig("q", "a"))
    b.create_address("other")
    b.create_queue(QueueConfig("t", "other", filter="n < 0"))  # refuses all it is sent
    with b.session() as s:
        s.send_many("a", [Message(b"x", {"n": i, "color": "red" if i % 3 == 0 else "blue"})
                          for i in range(n)])


def test_remove_messages_by_filter_leaves_deliveries_and_the_rest(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d) as b:
        setup(b)
        with b.session() as s:
            held = s.create_consumer("q", window=1).receive(0)  # n=0, red, in delivery
            control = b.queue_control("q")
            assert control.remove_messages("color = 'red'") == 2
            assert ns(b, "q") == [1, 2, 4, 5, 7, 8]
            info = control.info()
            assert (info.message_count, info.delivering_count, info.messages_killed) == (7, 1, 2)
            held.release()
        assert ns(b, "q") == [0, 1, 2, 4, 5, 7, 8]
    with Broker.open(d) as b:  # journaled
        assert ns(b, "q") == [0, 1, 2, 4, 5, 7, 8]
        assert b.queue_control("a::q").remove_messages() == 7
        assert ns(b, "q") == []


def test_remove_and_move_one_message_by_id(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        setup(b, 4)
        with b.session() as s:
            ids = [m.message.message_id for m in s.create_browser("q")]
            held = s.create_consumer("q", window=1).receive(0)
            control = b.queue_control("q")
            assert control.remove_message(ids[0]) is False  # a consumer holds it
            assert control.remove_message(ids[2]) is True
            assert control.remove_message(ids[2]) is False  # gone already
            assert control.remove_message(10**12) is False
            assert control.move_message(ids[3], "t") is True  # its filter is not applied
            assert ns(b, "q") == [1] and ns(b, "t") == [3]
            moved = next(iter(s.create_browser("t"))).message
            assert moved.message_id not in ids
            assert (moved.properties["_AMQ_ORIG_QUEUE"],
                    moved.properties["_AMQ_ORIG_ADDRESS"]) == ("q", "a")
            assert b.queue_info("q").messages_acknowledged == 1  # Artemis counts a move
            held.ack()
        with pytest.raises(InvalidArgumentError):
            control.remove_message(0)
        with pytest.raises(InvalidArgumentError):
            control.remove_message("1")  # type: ignore[arg-type]


def test_move_dead_letters_back_to_their_queue(tmp_path: Path) -> None:
    """Messages that reached the dead-letter queue go back to the queue they came from,
    selected by their origin, in order (Artemis moveMessages with a filter)."""
    with Broker.open(str(tmp_path / "s"), address_settings={
            "a": AddressSettings(dead_letter_address="dla", max_delivery_attempts=1)}) as b:
        setup(b, 6)
        b.create_address("dla")
        b.create_queue(QueueConfig("dlq", "dla"))
        b.create_address("b")
        b.create_queue(QueueConfig("bq", "b"))
        b.set_address_settings("b", AddressSettings(dead_letter_address="dla",
                                                    max_delivery_attempts=1))
        with b.session() as s:
            s.send("b", Message(b"", {"n": 100}))
            for queue in ("q", "bq"):
                c = s.create_consumer(queue)
                while (d := c.receive(0)) is not None:
                    if d.message.properties["n"] % 2 == 0:
                        d.reject()
                    else:
                        d.ack()
                c.close()
        assert ns(b, "dlq") == [0, 2, 4, 100]
        control = b.queue_control("dlq")
        assert control.move_messages("q", "_AMQ_ORIG_QUEUE = 'q'") == 3
        assert ns(b, "q") == [0, 2, 4] and ns(b, "dlq") == [100]
        with b.session() as s:
            assert [d.message.properties["n"] for d in
                    s.create_consumer("q").receive_many(10, timeout=0)] == [0, 2, 4]


def test_filters_reach_the_index_the_scheduled_and_the_paged_messages(tmp_path: Path) -> None:
    now = [NOW]
    settings = {"a": AddressSettings(max_size_messages=400)}
    with Broker.open(str(tmp_path / "s"), memory_budget=MIN_BUDGET, clock=lambda: now[0],
                     address_settings=settings, journal_options=OPTS) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a"))
        with b.session() as s:
            for start in range(0, 600, 100):  # the last 200 page at address level
                s.send_many("a", [Message(b"x" * 50, {"n": i})
                                  for i in range(start, start + 100)])
            s.send("a", Message(b"", {"n": 1000}, scheduled_delivery_time=NOW + 5000))
            s.send("a", Message(b"", {"n": 1001}, scheduled_delivery_time=NOW + 5000))
        info = b.queue_info("q")
        assert info.paged_count > 0 and info.scheduled_count == 2
        assert b.queues["q"].horizon is not None  # the queue reads from the index
    with Broker.open(str(tmp_path / "s"), memory_budget=MIN_BUDGET, clock=lambda: now[0],
                     address_settings=settings, journal_options=OPTS) as b:
        control = b.queue_control("q")
        gone = control.remove_messages("n / 100 * 100 = n AND n < 1000 OR n = 1001")
        assert gone == 6 + 1
        left = ns(b, "q")
        assert left == [i for i in range(600) if i % 100]
        assert b.queue_info("q").scheduled_count == 1


def test_bad_arguments_change_nothing(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        setup(b, 3)
        control = b.queue_control("q")
        with pytest.raises(FilterSyntaxError):
            control.remove_messages("n =")
        with pytest.raises(FilterSyntaxError):
            control.move_messages("t", "n = = 1")
        with pytest.raises(QueueNotFoundError):
            control.move_messages("nowhere")
        with pytest.raises(InvalidArgumentError):
            control.move_messages("a::q")
        with pytest.raises(QueueNotFoundError):
            b.queue_control("nope")
        assert ns(b, "q") == [0, 1, 2]


@pytest.mark.parametrize("seed", range(6))
def test_a_crash_during_a_move_leaves_each_message_in_one_place(seed: int) -> None:
    """The disk fails at a random operation of a move that takes several records, then the
    power goes with a random part of what was not synced: every message is on its queue or
    on the target, never both, never lost, in order on each."""
    rng = random.Random(seed)
    fs, index = SimulatedFileSystem(), MemoryIndex()
    b = Broker.open("/s", fs=fs, index=index, journal_options=OPTS)
    b.create_address("a")
    b.create_queue(QueueConfig("q", "a"))
    b.create_address("b", {RoutingType.MULTICAST})
    b.create_queue(QueueConfig("t", "b", RoutingType.MULTICAST))
    with b.session() as s:
        s.send_many("a", [Message(b"y" * 60, {"n": i}, priority=rng.choice([0, 4, 9]))
                          for i in range(200)])
    want = ns(b, "q")
    fs.fail_at, fs.fail_sticky = fs.op_count + rng.randrange(1, 30), True
    try:
        b.queue_control("q").move_messages("t", "n >= 20")
    except MqStoreError:  # the broker fail-stopped part way
        pass
    crashed = fs.crash(keep=rng.randrange(fs.unsynced_count() + 1), tear="sector", rng=rng)
    with Broker.open("/s", fs=crashed, index=index.crash(rng), journal_options=OPTS) as b2:
        left, moved = ns(b2, "q"), ns(b2, "t")
        assert sorted(left + moved) == list(range(200))
        assert left == [x for x in want if x in set(left)]
        assert moved == [x for x in want if x in set(moved)]
        assert all(x >= 20 for x in moved)


def test_a_copy_too_large_for_a_record_is_left_where_it_is(tmp_path: Path) -> None:
    """Moving adds the origin properties: a message near the record size limit whose copy no
    longer fits stays on its queue (logged), and the others move."""
    long_name = "t" * 200
    with Broker.open(str(tmp_path / "s"), journal_options=OPTS) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a"))
        b.create_address(long_name)
        b.create_queue(QueueConfig("big", long_name))
        with b.session() as s:
            s.send("a", Message(b"x" * 1400, {"n": 0}))
            s.send("a", Message(b"y", {"n": 1}))
        assert b.queue_control("q").move_messages("big") == 1
        assert ns(b, "q") == [0] and ns(b, "big") == [1]
        assert b.queue_info("q").message_count == 1
