"""Queue filters and consumer selectors (issue 15; Artemis filter expressions; seed 003's target
lists): a queue filter keeps what does not match off the queue, journaled with the queue; a
consumer with a selector gets only what matches, in queue order, the rest stays for others;
on a queue larger than its RAM head the selector does not read the backlog again for every
delivery."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import List

import pytest

from tests.waiting import PATIENCE, receivers_waiting
from mqstore.engine import (AddressSettings, Broker, FilterSyntaxError, Message, QueueConfig,
                            RoutingType)
from mqstore.engine.paging.memory import MIN_BUDGET
from mqstore.journal import SimulatedFileSystem
from mqstore.recovery import MemoryIndex


def colors(b: Broker, queue: str, selector: str = "") -> List[str]:
    with b.session() as s:
        return [m.message.properties["color"] for m in s.create_browser(queue, selector)]


def take_all(consumer: object) -> List[int]:
    out = []
    while (d := consumer.receive(0)) is not None:  # type: ignore[attr-defined]
        out.append(d.message.properties["n"])
        d.ack()
    return out


def fill(b: Broker, n: int, color_of=lambda i: "red" if i % 3 == 0 else "blue",
         address: str = "a", **kw: object) -> None:
    with b.session() as s:
        s.send_many(address, [Message(b"x" * 100, {"color": color_of(i), "n": i}, **kw)
                              for i in range(n)])  # type: ignore[arg-type]


# -- queue filters --------------------------------------------------------------------------------
def test_a_queue_filter_keeps_what_does_not_match_off_the_queue(tmp_path: Path) -> None:
    """Multicast: each queue gets what its filter matches (Artemis predefined queues with a
    filter); the filter is journaled with the queue and applies after a reopen."""
    d = str(tmp_path / "s")
    with Broker.open(d) as b:
        b.create_address("news", {RoutingType.MULTICAST})
        b.create_queue(QueueConfig("sport", "news", RoutingType.MULTICAST,
                                   filter="topic = 'sport'"))
        b.create_queue(QueueConfig("big", "news", RoutingType.MULTICAST,
                                   filter="words > 500 OR urgent"))
        b.create_queue(QueueConfig("all", "news", RoutingType.MULTICAST))
        with b.session() as s:
            s.send("news", Message(b"1", {"topic": "sport", "words": 100}))
            s.send("news", Message(b"2", {"topic": "politics", "words": 900}))
            s.send("news", Message(b"3", {"topic": "sport", "urgent": True}))
        counts = {q: b.queue_info(q).message_count for q in ("sport", "big", "all")}
        assert counts == {"sport": 2, "big": 2, "all": 3}
        assert b.queue_info("sport").filter == "topic = 'sport'"
    with Broker.open(d) as b:
        assert b.queue_info("sport").filter == "topic = 'sport'"
        with b.session() as s:
            s.send("news", Message(b"4", {"topic": "weather"}))
        assert (b.queue_info("sport").message_count, b.queue_info("all").message_count) == (2, 4)
        with b.session() as s:
            assert [m.message.body for m in s.create_browser("big")] == [b"2", b"3"]


def test_the_filter_survives_power_loss_and_an_index_rebuild() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with Broker.open("/s", fs=fs, index=index) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("reds", "a", filter="color = 'red'"))
        fill(b, 6)
    want = 2
    for lost_index in (False, True):
        crashed = fs.crash(keep=0)
        b = Broker.open("/s", fs=crashed, index=MemoryIndex() if lost_index else index)
        try:
            assert b.queue_info("reds").filter == "color = 'red'"
            assert colors(b, "reds") == ["red"] * want
            fill(b, 3)  # 0 is red: one more
            want += 1
            assert colors(b, "reds") == ["red"] * want
        finally:
            b.close()
        fs = crashed


def test_anycast_goes_round_robin_among_the_queues_that_match(tmp_path: Path) -> None:
    """An anycast address sends each message to one queue whose filter matches; one that no
    queue matches is not stored (Artemis drops a message with no matching binding)."""
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("r1", "a", filter="color = 'red'"))
        b.create_queue(QueueConfig("r2", "a", filter="color = 'red'"))
        b.create_queue(QueueConfig("g", "a", filter="color = 'green'"))
        with b.session() as s:
            for color in ("red", "red", "red", "red", "green", "blue"):
                s.send("a", Message(b"", {"color": color}))
            s.send("a::g", Message(b"", {"color": "red"}))  # FQQN: the filter still applies
        assert [b.queue_info(q).message_count for q in ("r1", "r2", "g")] == [2, 2, 1]
        assert b.address_info("a").number_of_messages == 5


def test_dead_letters_pass_the_dead_letter_queues_filters(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a"))
        b.create_address("dla", {RoutingType.MULTICAST})
        b.create_queue(QueueConfig("dead_red", "dla", RoutingType.MULTICAST,
                                   filter="color = 'red' AND _AMQ_ORIG_QUEUE = 'q'"))
        b.create_queue(QueueConfig("dead_all", "dla", RoutingType.MULTICAST))
        b.set_address_settings("a", AddressSettings(dead_letter_address="dla",
                                                    max_delivery_attempts=1))
        fill(b, 3)
        with b.session() as s:
            c = s.create_consumer("q")
            for _ in range(3):
                c.receive(0).reject()
        assert [b.queue_info(q).message_count for q in ("dead_red", "dead_all")] == [1, 3]


def test_a_bad_filter_creates_nothing(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("a")
        with pytest.raises(FilterSyntaxError) as exc:
            b.create_queue(QueueConfig("q", "a", filter="color = 'red"))
        assert "color = 'red" in str(exc.value)
        assert b.address_info("a").queues == ()


# -- consumer selectors ---------------------------------------------------------------------------
def test_each_selector_gets_what_matches_in_order_and_leaves_the_rest(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a"))
        fill(b, 12)
        with b.session() as s:
            reds = s.create_consumer("q", selector="color = 'red'")
            assert reds.selector == "color = 'red'"
            big = s.create_consumer("q", selector="color = 'blue' AND n >= 8")
            assert take_all(reds) == [0, 3, 6, 9]
            assert take_all(big) == [8, 10, 11]
            assert b.queue_info("q").message_count == 5
            assert take_all(s.create_consumer("q")) == [1, 2, 4, 5, 7]


def test_a_selector_respects_priority_and_gets_released_messages_back_first(
        tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a"))
        with b.session() as s:
            for i, (color, prio) in enumerate([("red", 4), ("blue", 9), ("red", 9), ("red", 0),
                                               ("red", 4)]):
                s.send("a", Message(b"", {"color": color, "n": i}, priority=prio))
            reds = s.create_consumer("q", selector="color = 'red'")
            first = reds.receive(0)
            second = reds.receive(0)
            assert [first.message.properties["n"], second.message.properties["n"]] == [2, 0]
            second.release()  # back to the head of its priority, ahead of 4
            first.release()
            assert take_all(reds) == [2, 0, 4, 3]
            assert take_all(s.create_consumer("q")) == [1]


def test_a_waiting_selector_is_woken_only_by_what_matches(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a"))
        got: dict = {}

        def wait(name: str, selector: str) -> None:
            with b.session() as s:
                d = s.create_consumer("q", selector=selector).receive(PATIENCE)
                got[name] = None if d is None else d.message.properties["color"]
                if d is not None:
                    d.ack()

        threads = [threading.Thread(target=wait, args=("reds", "color = 'red'")),
                   threading.Thread(target=wait, args=("greens", "color = 'green'"))]
        for t in threads:
            t.start()
        receivers_waiting(b, "q", 2)
        with b.session() as s:
            s.send("a", Message(b"", {"color": "green"}))  # the first waiter does not match
            s.send("a", Message(b"", {"color": "red"}))
        for t in threads:
            t.join(PATIENCE)
        assert got == {"reds": "red", "greens": "green"}


def test_browser_and_non_destructive_consumer_with_a_selector(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a", non_destructive=True))
        fill(b, 7)
        assert colors(b, "q", "color = 'red'") == ["red"] * 3
        with b.session() as s:
            c = s.create_consumer("q", selector="color = 'blue'")
            assert [d.message.properties["n"] for d in c.receive_many(10, timeout=0)] == \
                [1, 2, 4, 5]
        assert b.queue_info("q").message_count == 7


def test_a_bad_selector_creates_no_consumer(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a"))
        with b.session() as s:
            for bad in ("color =", "1 +", "x IN (1)"):
                with pytest.raises(FilterSyntaxError):
                    s.create_consumer("q", selector=bad)
                with pytest.raises(FilterSyntaxError):
                    s.create_browser("q", selector=bad)
        assert b.queue_info("q").consumer_count == 0


# -- a queue larger than its RAM head ---------------------------------------------------------
def test_a_selector_on_a_paging_queue_reads_the_backlog_once(tmp_path: Path) -> None:
    """3,000 messages on the smallest RAM budget (a head of a few references, the rest in the
    index); one in 100 is red. A selecting consumer gets the 30 red ones in order while a
    plain consumer drains the queue in between; the index rows read for the selector stay
    within a few passes over the queue (one per selector), not one pass per delivery (seed
    003)."""
    d = str(tmp_path / "s")
    with Broker.open(d, memory_budget=MIN_BUDGET) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a"))
        for start in range(0, 3000, 500):
            with b.session() as s:
                s.send_many("a", [Message(b"x" * 200, {"color": "red" if i % 100 == 42
                                                       else "blue", "n": i})
                                  for i in range(start, start + 500)])
        queue = b.queues["q"]
        assert queue.horizon is not None  # it pages
        before = queue.reader.rows_read
        with b.session() as s:
            reds = s.create_consumer("q", selector="color = 'red'")
            plain = s.create_consumer("q", selector="color <> 'red' AND n < 1500")
            got = []
            for _ in range(30):
                d1 = reds.receive(0)
                got.append(d1.message.properties["n"])
                d1.ack()
                for d2 in plain.receive_many(40, timeout=0):
                    d2.ack()
            assert got == list(range(42, 3000, 100))
            assert reds.receive(0) is None
        rows = queue.reader.rows_read - before  # both selectors, and the head's refills
        assert rows < 3 * 3000, rows
        assert b.queue_info("q").message_count == 3000 - 30 - 30 * 40


def test_a_selector_on_a_paging_queue_after_restart_and_release(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d, memory_budget=MIN_BUDGET) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a"))
        fill(b, 600, color_of=lambda i: "red" if i % 50 == 7 else "blue")
    with Broker.open(d, memory_budget=MIN_BUDGET) as b, b.session() as s:
        reds = s.create_consumer("q", selector="color = 'red'", window=100)
        held = reds.receive_many(5, timeout=0)
        assert [x.message.properties["n"] for x in held] == [7, 57, 107, 157, 207]
        s.recover()  # back on the queue, delivered once
        again = reds.receive_many(100, timeout=0)
        assert [x.message.properties["n"] for x in again] == list(range(7, 600, 50))
        assert [x.delivery_count for x in again[:6]] == [2] * 5 + [1]
        s.recover()
        plain = s.create_consumer("q", window=1000)
        ns = []
        while batch := plain.receive_many(500, timeout=0):
            ns += [x.message.properties["n"] for x in batch]
        assert sorted(ns) == list(range(600)) and len(ns) == 600
    shutil.rmtree(os.path.join(d, "index"))  # the same after a rebuild from the journal
    with Broker.open(d, memory_budget=MIN_BUDGET) as b:
        assert b.queue_info("q").message_count == 600


def test_transacted_sends_are_filtered_at_commit(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("reds", "a", filter="color = 'red'"))
        with b.session(transacted=True) as tx:
            fill(b, 0)
            for color in ("red", "blue", "red"):
                tx.send("a", Message(b"", {"color": color}))
            assert b.queue_info("reds").message_count == 0
            tx.commit()
        assert colors(b, "reds") == ["red", "red"]

