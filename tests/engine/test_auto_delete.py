"""Qpid auto-delete queues (seed 002 "Automatically deleted queues"; ``QueueConfig.auto_delete``):
deleted with their messages when the last consumer goes, never by closing the broker or a
crash, and only once nothing of them is in delivery."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqstore.engine import Broker, Message, QueueConfig
from mqstore.engine.errors import InvalidArgumentError
from mqstore.journal import SimulatedFileSystem
from mqstore.recovery import MemoryIndex

T0 = 1_700_000_000_000


def test_deleted_when_the_last_consumer_goes_with_its_messages(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a", auto_delete=True))
        assert b.queue_info("q").auto_delete
        with b.session() as s:
            s.send("a", Message(b"1"))
            s.send("a", Message(b"2"))
            c1, c2 = s.create_consumer("q"), s.create_consumer("q")
            c1.receive(1).ack()
            c1.close()
            assert "q" in b.queue_names()  # one consumer is left
            got = c2.receive(1)
            assert got is not None and "q" in b.queue_names()
            c2.close()  # the unacked one returns to the queue, and the queue goes with it
        assert b.queue_names() == []
        assert [d.name for d in b.deleted_queues()] == ["q"]


def test_never_consumed_closing_and_reopening_delete_nothing(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a", auto_delete=True))
        with b.session() as s:
            s.send("a", Message(b"1"))
            s.send("a", Message(b"2"))
        open_session = b.session()
        open_session.create_consumer("q").receive(1)  # left open: the broker's close ends it
    with Broker.open(d) as b:
        info = b.queue_info("q")
        assert info.auto_delete and info.message_count == 2  # nothing deleted by the close
        with b.session() as s:
            s.create_consumer("q").close()
        assert b.queue_names() == []


def test_a_transaction_holding_an_ack_delays_the_deletion_to_its_end() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with Broker.open("/s", fs=fs, index=index) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a", auto_delete=True))
        with b.session() as s:
            s.send_many("a", [Message(b"1"), Message(b"2")])
        t = b.session(transacted=True)
        c = t.create_consumer("q")
        c.receive(1).ack()  # acked in the transaction, not committed
        c.close()
        assert b.queue_info("q").message_count == 2  # still in delivery: not deleted yet
        t.commit()
        assert b.queue_names() == []
        t.close()
    fs = fs.crash(keep=0)
    with Broker.open("/s", fs=fs, index=index) as b:  # the deletion was durable
        assert b.queue_names() == [] and [d.name for d in b.deleted_queues()] == ["q"]


def test_a_delay_lets_a_new_consumer_keep_the_queue() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    now = [T0]
    with Broker.open("/s", fs=fs, index=index, clock=lambda: now[0]) as b:
        b.create_address("a")
        with pytest.raises(InvalidArgumentError):
            b.create_queue(QueueConfig("bad", "a", auto_delete=True, auto_delete_delay_ms=-1))
        b.create_queue(QueueConfig("q", "a", auto_delete=True, auto_delete_delay_ms=5000))
        assert b.queue_info("q").auto_delete
        s = b.session()
        s.create_consumer("q").close()  # idle from T0: due at T0 + 5000
        now[0] = T0 + 4999
        b.deliver_scheduled()
        assert "q" in b.queue_names()
        c = s.create_consumer("q")  # in use again: the pending deletion is off
        now[0] = T0 + 6000
        b.deliver_scheduled()
        assert "q" in b.queue_names()
        c.close()  # idle again from T0 + 6000
        now[0] = T0 + 10_999
        b.deliver_scheduled()
        assert "q" in b.queue_names()
        now[0] = T0 + 11_000
        b.deliver_scheduled()
        assert b.queue_names() == []
        assert [(d.name, d.deleted_at) for d in b.deleted_queues()] == [("q", T0 + 11_000)]
        b.create_queue(QueueConfig("r", "a", auto_delete=True, auto_delete_delay_ms=1000))
        s.create_consumer("r").close()  # pending when the broker closes: nothing deleted
    with Broker.open("/s", fs=fs, index=index, clock=lambda: now[0] + 60_000) as b:
        b.deliver_scheduled()
        assert b.queue_names() == ["r"]
        info = b.queue_info("r")  # the delay is journaled with the queue
        assert info.auto_delete and info.auto_delete_delay_ms == 1000
