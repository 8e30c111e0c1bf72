"""Wildcard consumers and queues (issue 15; seed 004 §4.17 "when creating consumers"): a
consumer, subscription or queue bound to ``news.#`` or ``news.*.sport`` receives what is sent to
every address the expression matches, in the broker's wildcard syntax; nothing is sent to a
wildcard address itself. A copy on a wildcard address's queue is never paged with its message
(Artemis pages a reference at its queue's own address), and that survives a restart, a crash
and a rebuild of the index."""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Dict, List

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from mqstore.engine import (AddressSettings, Broker, InvalidArgumentError, InvalidNameError,
                            Message, QueueConfig, RoutingType)
from mqstore.engine.config.settings import AddressFullPolicy
from mqstore.engine.addressing.wildcards import WildcardSyntax
from mqstore.journal import SimulatedFileSystem
from mqstore.recovery import MemoryIndex
from tests.engine.crashcheck import StoreMachine, model_settings

AUTO = AddressSettings(auto_create_addresses=True, auto_create_queues=True)
MULTI = {RoutingType.MULTICAST}


def received(consumer: object) -> List[str]:
    """What ``consumer`` receives now, as ``address:body``, acked."""
    out = []
    while (d := consumer.receive(0)) is not None:  # type: ignore[attr-defined]
        out.append(f"{d.message.address}:{d.message.body.decode()}")
        d.ack()
    return out


def browse(b: Broker, queue: str) -> List[bytes]:
    with b.session() as s:
        return [m.message.body for m in s.create_browser(queue)]


def test_the_seeds_wildcard_table_through_subscribers(tmp_path: Path) -> None:
    """Seed 004 Table 4.3, each expression as a topic subscriber's destination."""
    sent = ["news.europe", "news.europe.sport", "news.europe.politics.fr", "news.usa",
            "europe", "news.usa.sport", "news.europe.fr.sport"]
    want = {"#": sent,
            "news.europe.#": ["news.europe", "news.europe.sport", "news.europe.politics.fr",
                              "news.europe.fr.sport"],
            "news.*": ["news.europe", "news.usa"],
            "news.*.sport": ["news.europe.sport", "news.usa.sport"]}
    with Broker.open(str(tmp_path / "s"), address_settings={"#": AUTO}) as b, \
            b.session() as s:
        subscribers = {pattern: s.create_consumer(f"multicast://{pattern}") for pattern in want}
        for address in sent:
            s.send(address, Message(b"m"))
        for pattern, addresses in want.items():
            assert received(subscribers[pattern]) == [f"{a}:m" for a in addresses], pattern
        for c in subscribers.values():
            c.close()
        assert not [q for q in b.queue_names() if "#" in q or "*" in q]  # temporary ones went


def test_the_seeds_custom_wildcard_syntax(tmp_path: Path) -> None:
    """``<wildcard-addresses>`` with ``,`` ``@`` ``$``: the seed's example."""
    syntax = WildcardSyntax(delimiter=",", any_words="@", single_word="$")
    with Broker.open(str(tmp_path / "s"), address_settings={"@": AUTO},
                     wildcard_syntax=syntax) as b, b.session() as s:
        every = s.create_consumer("multicast://news,@")
        sport = s.create_consumer("multicast://news,$,sport")
        for address in ("news,europe", "news,europe,sport", "news,usa,sport", "sport"):
            s.send(address, Message(b"m"))
        assert received(every) == ["news,europe:m", "news,europe,sport:m", "news,usa,sport:m"]
        assert received(sport) == ["news,europe,sport:m", "news,usa,sport:m"]
        with pytest.raises(InvalidNameError):  # '#' is not this broker's wildcard
            b.create_address("news.#")
        with pytest.raises(InvalidArgumentError):
            s.send("news,@", Message(b"x"))


@pytest.mark.parametrize("name", ["news#", "news.#x", "news.sp*rt", "*news"])
def test_a_wildcard_character_inside_a_word_is_refused(tmp_path: Path, name: str) -> None:
    with Broker.open(str(tmp_path / "s"), address_settings={"#": AUTO}) as b:
        records = len(list(b.storage.persistence.journal.records()))
        with pytest.raises(InvalidNameError):
            b.create_address(name)
        with b.session() as s, pytest.raises(InvalidNameError):
            s.create_consumer(name)
        assert b.address_names() == []
        assert len(list(b.storage.persistence.journal.records())) == records


def test_nothing_is_sent_to_a_wildcard_address_and_nothing_is_written(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s"), address_settings={"#": AUTO}) as b:
        b.create_address("news.#", MULTI)
        b.create_queue(QueueConfig("all", "news.#", RoutingType.MULTICAST))
        records = len(list(b.storage.persistence.journal.records()))
        with b.session() as s:
            for target in ("news.#", "news.*", "news.#::all", "multicast://news.*.x"):
                with pytest.raises(InvalidArgumentError, match="wildcard"):
                    s.send(target, Message(b"x"))
            tx = b.session(transacted=True)
            with pytest.raises(InvalidArgumentError):
                tx.send("news.#", Message(b"x"))
            tx.close()
        assert b.address_names() == ["news.#"]  # none auto-created
        assert len(list(b.storage.persistence.journal.records())) == records
        assert b.queue_info("all").message_count == 0


def test_a_wildcard_queue_gets_addresses_created_after_it_until_it_goes(tmp_path: Path
                                                                        ) -> None:
    with Broker.open(str(tmp_path / "s")) as b, b.session() as s:
        b.create_address("news.*", MULTI)
        b.create_queue(QueueConfig("headlines", "news.*", RoutingType.MULTICAST))
        b.create_address("news.eu", MULTI)
        b.create_queue(QueueConfig("eu", "news.eu", RoutingType.MULTICAST))
        s.send("news.eu", Message(b"1"))
        b.create_address("news.us", MULTI)  # created later: matched all the same
        s.send("news.us", Message(b"2"))
        assert browse(b, "headlines") == [b"1", b"2"] and browse(b, "eu") == [b"1"]
        b.delete_queue("headlines")
        b.delete_address("news.*")
        s.send("news.eu", Message(b"3"))  # no wildcard binding left
        assert browse(b, "eu") == [b"1", b"3"]
        assert b.address_info("news.eu").number_of_messages == 2


def test_an_anycast_wildcard_queue_joins_the_round_robin(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b, b.session() as s:
        b.create_address("orders.eu", {RoutingType.ANYCAST})
        b.create_queue(QueueConfig("orders.eu", "orders.eu"))
        b.create_address("orders.#", {RoutingType.ANYCAST})
        b.create_queue(QueueConfig("audit", "orders.#"))
        b.create_address("orders.us", {RoutingType.ANYCAST})  # no queue of its own
        for i in range(4):
            s.send("orders.eu", Message(b"%d" % i))
        s.send("orders.us", Message(b"us"))
        got = sorted(browse(b, "orders.eu")), sorted(browse(b, "audit"))
        assert len(got[0]) == 2 and len(got[1]) == 3 and b"us" in got[1]
        c = s.create_consumer("orders.#")  # point-to-point on the wildcard: its queue
        assert c.receive(1) is not None


def test_filters_and_selectors_on_a_wildcard_subscription(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s"), address_settings={"#": AUTO}) as b, \
            b.session() as s:
        hot = s.create_subscriber("news.#", selector="AMQAddress LIKE 'news.eu%' AND hot")
        for address, flag in (("news.eu", True), ("news.eu", False), ("news.us", True),
                              ("news.eu.sport", True)):
            s.send(address, Message(b"m", {"hot": flag}))
        assert received(hot) == ["news.eu:m", "news.eu.sport:m"]


def paging_broker(directory: str, **kw: object) -> Broker:
    b = Broker.open(directory, **kw)  # type: ignore[arg-type]
    if "news.eu" not in b.address_names():
        b.set_address_settings("news.eu", AddressSettings(
            max_size_bytes=30, address_full_policy=AddressFullPolicy.PAGE))
        b.create_address("news.eu", MULTI)
        b.create_queue(QueueConfig("eu", "news.eu", RoutingType.MULTICAST))
        b.create_address("news.#", MULTI)
        b.create_queue(QueueConfig("all", "news.#", RoutingType.MULTICAST))
    return b


def test_a_wildcard_copy_is_not_paged_with_its_message(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    b = paging_broker(d)
    with b.session() as s:
        s.send_many("news.eu", [Message(b"%03d" % i) for i in range(40)])
    assert b.address_info("news.eu").paged_count > 0
    assert b.queue_info("eu").paged_count > 0 and b.queue_info("all").paged_count == 0
    with b.session() as s:  # the wildcard's copies go while their messages stay paged
        c = s.create_consumer("all")
        assert [r.split(":")[1] for r in received(c)] == ["%03d" % i for i in range(40)]
    assert b.queue_info("eu").paged_count > 0
    b.close()
    for rebuild in (False, True):
        b = Broker.open(d, rebuild_index=rebuild)
        assert (b.queue_info("all").message_count, b.queue_info("eu").message_count) == (0, 40)
        assert browse(b, "eu") == [b"%03d" % i for i in range(40)]
        b.close()


def test_wildcard_copies_of_paged_messages_survive_crashes() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    b = paging_broker("/s", fs=fs, index=index)
    with b.session(block_on_acknowledge=True) as s:  # (the acks durable before the crash)
        s.send_many("news.eu", [Message(b"%03d" % i) for i in range(30)])
        c = s.create_consumer("eu")  # the paged ones join eu as it drains
        for _ in range(12):
            c.receive(1).ack()
        c.close()
    for keep, lose in ((0, False), (0, True)):
        # the journal and the index as the same instant leaves them (the close after it
        # checkpoints the index of the broker left behind, not the crashed one)
        crashed = fs.crash(keep=keep)
        crashed_index = MemoryIndex() if lose else index.crash(random.Random(7))
        b.close()
        fs, index = crashed, crashed_index
        b = Broker.open("/s", fs=fs, index=index)
        assert browse(b, "eu") == [b"%03d" % i for i in range(12, 30)]
        assert browse(b, "all") == [b"%03d" % i for i in range(30)]
        assert b.queue_info("all").paged_count == 0
    with b.session() as s:
        c = s.create_consumer("all")
        assert len(received(c)) == 30
        c = s.create_consumer("eu")
        assert len(received(c)) == 18
    assert b.address_info("news.eu").number_of_messages == 0
    b.close()


def test_a_durable_wildcard_subscription_survives_a_restart(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d, address_settings={"#": AUTO}) as b:
        with b.connection(client_id="c1") as conn:
            conn.session().create_subscriber("news.*", "heads", durable=True).close()
        with b.session() as s:
            s.send("news.eu", Message(b"1"))
            s.send("news.eu.sport", Message(b"no"))
    with Broker.open(d, address_settings={"#": AUTO}) as b:
        with b.session() as s:
            s.send("news.us", Message(b"2"))
        with b.connection(client_id="c1") as conn:
            sub = conn.session().create_subscriber("news.*", "heads", durable=True)
            assert received(sub) == ["news.eu:1", "news.us:2"]


def test_export_and_import_keep_a_wildcard_queues_messages(tmp_path: Path) -> None:
    from mqstore.tools.transfer import export_store, import_store
    src, dst = str(tmp_path / "a"), str(tmp_path / "b")
    b = paging_broker(src)
    with b.session() as s:
        s.send_many("news.eu", [Message(b"%d" % i) for i in range(10)])
    b.close()
    out = io.StringIO()
    export_store(src, out)
    import_store(io.StringIO(out.getvalue()), dst)
    with Broker.open(dst) as b2:
        assert browse(b2, "all") == [b"%d" % i for i in range(10)]
        assert browse(b2, "eu") == [b"%d" % i for i in range(10)]


class WildcardMachine(StoreMachine):
    """Two addresses (one pages from its second message on) and a wildcard address over both,
    each with a durable queue, against a model of each queue's contents: a crash keeps what
    was durable, in send order on every queue."""

    QUEUES = {"qa": "n.a", "qb": "n.b", "all": "n.#"}

    def __init__(self) -> None:
        super().__init__()
        b = self.broker
        b.set_address_settings("n.a", AddressSettings(
            max_size_bytes=1, address_full_policy=AddressFullPolicy.PAGE))
        for queue, address in self.QUEUES.items():
            b.create_address(address, MULTI)
            b.create_queue(QueueConfig(queue, address, RoutingType.MULTICAST))
        self.model: Dict[str, List[bytes]] = {q: [] for q in self.QUEUES}
        self.durable: Dict[bytes, bool] = {}
        self.origin: Dict[bytes, str] = {}
        self.seq = 0

    @rule(address=st.sampled_from(["n.a", "n.b"]), durable=st.booleans(), n=st.integers(1, 3))
    def send(self, address: str, durable: bool, n: int) -> None:
        batch = []
        for _ in range(n):
            self.seq += 1
            body = b"%d" % self.seq
            self.durable[body] = durable
            self.origin[body] = address
            batch.append(Message(body, durable=durable))
            self.model["qa" if address == "n.a" else "qb"].append(body)
            self.model["all"].append(body)
        with self.broker.session() as s:
            s.send_many(address, batch)

    @rule(queue=st.sampled_from(sorted(QUEUES)), n=st.integers(1, 3))
    def consume(self, queue: str, n: int) -> None:
        with self.broker.session(block_on_acknowledge=True) as s:  # (durable acks: the model)
            c = s.create_consumer(queue)
            for _ in range(n):
                d = c.receive(0)
                if d is None:
                    break
                assert d.message.body == self.model[queue].pop(0)
                d.ack()

    @rule()
    def recreate_qa(self) -> None:
        """The paging address's queue goes with its messages (paged ones too) and comes back
        empty; their copies on the wildcard queue stay."""
        self.broker.delete_queue("qa")
        self.broker.create_queue(QueueConfig("qa", "n.a", RoutingType.MULTICAST))
        self.model["qa"] = []

    @rule(keep_all=st.booleans(), seed=st.integers(0, 2**16), lose_index=st.booleans())
    def crash_and_reopen(self, keep_all: bool, seed: int, lose_index: bool) -> None:
        self.model = {q: [m for m in ms if self.durable[m]] for q, ms in self.model.items()}
        self.reopen_after_crash(keep_all, seed, lose_index)

    @invariant()
    def queues_match(self) -> None:
        for queue in self.QUEUES:
            assert browse(self.broker, queue) == self.model[queue], queue
        assert self.broker.queue_info("all").paged_count == 0

    @invariant()
    def the_paging_address_counts_each_message_it_holds_once(self) -> None:
        held = set(self.model["qa"]) | {m for m in self.model["all"]
                                        if self.origin[m] == "n.a"}
        info = self.broker.address_info("n.a")
        assert info.number_of_messages + info.paged_count == len(held)
        assert info.paging == (info.paged_count > 0)


WildcardMachine.TestCase.settings = model_settings(60, 30)
TestWildcardModel = WildcardMachine.TestCase


def test_a_paged_message_whose_address_queues_went_is_still_counted_right(tmp_path: Path
                                                                          ) -> None:
    """Its own queue deleted while it was paged, a message lives on in a wildcard queue: the
    address keeps counting it as paged (it never joined a queue there) until that copy goes,
    across later depages, a restart and a rebuild."""
    d = str(tmp_path / "s")
    b = paging_broker(d)
    with b.session() as s:
        s.send_many("news.eu", [Message(b"%03d" % i) for i in range(20)])
    b.delete_queue("eu")
    b.create_queue(QueueConfig("eu2", "news.eu", RoutingType.MULTICAST))
    with b.session() as s:
        s.send_many("news.eu", [Message(b"%03d" % i) for i in range(20, 30)])
        assert len(received(s.create_consumer("eu2"))) == 10  # depaged past the first ones
    info = b.address_info("news.eu")  # 10 of the first 20 were paged; all 30 are held
    assert (info.paged_count, info.number_of_messages) == (10, 20)
    b.close()
    for rebuild in (False, True):
        b = Broker.open(d, rebuild_index=rebuild)
        again = b.address_info("news.eu")
        assert (again.paged_count, again.number_of_messages) == \
            (info.paged_count, info.number_of_messages)
        b.close()
    b = Broker.open(d)
    with b.session() as s:
        assert len(received(s.create_consumer("all"))) == 30
    info = b.address_info("news.eu")
    assert (info.paging, info.paged_count, info.number_of_messages, info.address_size) == \
        (False, 0, 0, 0)
    b.close()
    b = Broker.open(d, rebuild_index=True)
    info = b.address_info("news.eu")
    assert (info.paging, info.paged_count, info.number_of_messages) == (False, 0, 0)
    b.close()


@pytest.mark.parametrize("chars", [(1, "#", "*"), (".", "##", "*"), (".", ".", "*"),
                                   (".", None, "*")])
def test_a_wildcard_syntax_of_other_than_three_distinct_characters_is_refused(
        chars: tuple) -> None:
    with pytest.raises(InvalidArgumentError):
        WildcardSyntax(*chars)
