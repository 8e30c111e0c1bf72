"""Persistence on the last node of a cluster (seed 002, "Enforcing persistence on the last node
in a cluster"; Qpid qpid.persist_last_node / qpid-config --cluster-durable): non-durable
messages on such queues survive a crash only in last-node mode."""

from __future__ import annotations

import random
from pathlib import Path
from typing import List

import pytest

from mqstore.engine import Broker, Message, QueueConfig
from mqstore.engine.errors import InvalidArgumentError
from mqstore.journal import JournalOptions, SimulatedFileSystem
from mqstore.recovery import MemoryIndex
from mqstore.tools.offline import iter_entries

OPTS = JournalOptions(segment_size=64 << 10)  # simulated files live in RAM: keep them small
STORES: List["Store"] = []


@pytest.fixture(autouse=True)
def close_stores():  # type: ignore[no-untyped-def]
    """Close what each test opened (a simulated store holds its files in RAM)."""
    yield
    while STORES:
        STORES.pop().broker.close()


class Store:
    """A store on the simulated file system that can lose power."""

    def __init__(self) -> None:
        self.fs, self.index = SimulatedFileSystem(), MemoryIndex()
        self.broker = self.open()
        STORES.append(self)

    def open(self) -> Broker:
        return Broker.open("/s", fs=self.fs, index=self.index, expiry_scan_ms=0,
                           journal_options=OPTS)

    def power_loss(self, keep_unsynced: bool = False, seed: int = 0) -> Broker:
        """Power is cut: the journal keeps what was synced (and maybe more), the index its
        last commit or nothing; the old broker is closed on what it had (no effect here)."""
        crashed = self.fs.crash(keep=self.fs.unsynced_count() if keep_unsynced else 0)
        index = self.index.crash(random.Random(seed))
        self.broker.close()
        self.fs, self.index = crashed, index
        self.broker = self.open()
        return self.broker


def bodies(broker: Broker, queue: str) -> List[bytes]:
    with broker.session() as s:
        return [m.message.body for m in s.create_browser(queue)]


def topology(b: Broker, **extra) -> None:  # type: ignore[no-untyped-def]
    b.create_address("q")
    b.create_queue(QueueConfig("last", "q", persist_last_node=True, **extra))
    b.create_queue(QueueConfig("plain", "q"))


@pytest.mark.parametrize("keep_unsynced,seed", [(False, 0), (True, 0), (False, 1), (True, 1)])
def test_transient_messages_survive_only_in_last_node_mode(keep_unsynced: bool, seed: int
                                                           ) -> None:
    st = Store()
    b = st.broker
    topology(b)
    with b.session() as s:
        s.send("q::last", Message(b"before", durable=False))
        s.send("q::plain", Message(b"plain1", durable=False))
        b.set_cluster_nodes(3)
        s.send("q::last", Message(b"cluster", durable=False))
        b.set_cluster_nodes(1)   # the others left: this node is the last one
        s.send("q::last", Message(b"alone", durable=False))
        s.send("q::plain", Message(b"plain2", durable=False))
    assert b.queue_info("last").persist_last_node
    b = st.power_loss(keep_unsynced, seed)
    assert bodies(b, "last") == [b"before", b"cluster", b"alone"]
    assert bodies(b, "plain") == []


def test_started_alone_never_forces_and_leaving_stops_forcing() -> None:
    st = Store()
    b = st.broker
    topology(b)
    b.set_cluster_nodes(1)  # started alone: not a node that was left alone
    with b.session() as s:
        s.send("q::last", Message(b"alone-from-start", durable=False))
    b.set_cluster_nodes(1)
    b = st.power_loss()
    assert bodies(b, "last") == []
    b.set_cluster_nodes(2)
    b.set_cluster_nodes(1)
    with b.session() as s:
        s.send("q::last", Message(b"forced", durable=False))
        b.set_cluster_nodes(2)  # a node came back: new messages are not forced any more
        s.send("q::last", Message(b"not forced", durable=False))
    b = st.power_loss()
    assert bodies(b, "last") == [b"forced"]


def test_re_entering_stores_each_message_once(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d, expiry_scan_ms=0) as b:
        topology(b)
        with b.session() as s:
            s.send("q::last", Message(b"m1", durable=False))
            for n in (2, 1, 2, 1, 3, 1):
                b.set_cluster_nodes(n)
            s.send("q::last", Message(b"m2", durable=False))
            b.set_cluster_nodes(2)
            b.set_cluster_nodes(1)
    rows = [r for r in iter_entries(d, False, None, None, None, ["MESSAGE"])]
    assert sorted(r["message_id"] for r in rows) == sorted({r["message_id"] for r in rows})
    assert len(rows) == 2
    with Broker.open(d, expiry_scan_ms=0) as b:
        assert bodies(b, "last") == [b"m1", b"m2"]


def test_in_delivery_and_scheduled_messages_are_stored_too() -> None:
    st = Store()
    b = st.broker
    topology(b)
    far = 2**62
    with b.session() as s:
        s.send("q::last", Message(b"held", durable=False))
        s.send("q::last", Message(b"later", durable=False, scheduled_delivery_time=far))
        d = s.create_consumer("last").receive_nowait()
        assert d.message.body == b"held"
        b.set_cluster_nodes(2)
        b.set_cluster_nodes(1)
        b = st.power_loss()
    info = b.queue_info("last")
    assert (info.message_count, info.scheduled_count) == (2, 1)
    with b.session() as s:
        again = s.create_consumer("last").receive_nowait()
        assert again.message.body == b"held" and again.redelivered
    assert [m.message.body for m in b.scheduled_messages("last")] == [b"later"]


def test_a_last_value_replacement_removes_the_forced_message() -> None:
    st = Store()
    b = st.broker
    b.create_address("p")
    b.create_queue(QueueConfig("lvq", "p", last_value_key="k", persist_last_node=True))
    with b.session() as s:
        s.send("p", Message(b"old", {"k": "x"}, durable=False))
        b.set_cluster_nodes(2)
        b.set_cluster_nodes(1)
        s.send("p", Message(b"new", {"k": "x"}, durable=False))
    b = st.power_loss()
    assert bodies(b, "lvq") == [b"new"]


def test_only_durable_queues_and_counts_checked() -> None:
    st = Store()
    b = st.broker
    b.create_address("q")
    with pytest.raises(InvalidArgumentError, match="not durable"):
        b.create_queue(QueueConfig("t", "q", durable=False, persist_last_node=True))
    assert b.queue_names() == []
    for bad in (0, -1, "1", 1.0, True):
        with pytest.raises(InvalidArgumentError):
            b.set_cluster_nodes(bad)  # type: ignore[arg-type]
    b.close()
