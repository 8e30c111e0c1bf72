"""Qpid exclusive queues (seed 002): a queue a session declared exclusive is usable only by that
session until it closes; a declare, subscribe or delete from another session raises and ends
that session; an exclusive auto-delete queue goes when its owner closes; a no-local one does not
receive what the owner's connection sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqstore.engine import (Broker, ExclusiveQueueError, IllegalStateError, Message, QueueConfig,
                            QueueNotEmptyError, RoutingType)


def test_only_the_owner_uses_it_and_others_are_ended(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("a")
        owner, other = b.session(), b.session()
        info = owner.declare_queue(QueueConfig("mine", "a"), exclusive=True)
        assert info.name == "mine"
        other.send("a", Message(b"1"))  # sending through the address stays open
        other.send("a", Message(b"2"))
        for attempt in (lambda s: s.create_consumer("mine"),
                        lambda s: s.create_browser("mine"),
                        lambda s: s.declare_queue(QueueConfig("mine", "a")),
                        lambda s: s.delete_queue("mine")):
            victim = b.session()
            with pytest.raises(ExclusiveQueueError) as err:
                attempt(victim)
            assert err.value.ended and err.value.queue == "mine"
            with pytest.raises(IllegalStateError):  # the session was ended
                victim.send("a", Message(b"x"))
        with pytest.raises(ExclusiveQueueError) as err:
            b.delete_queue("mine")  # the broker API does not bypass the owner
        assert not err.value.ended
        c = owner.create_consumer("mine")
        assert c.receive(1).message.body == b"1"
        c.close()
        with pytest.raises(QueueNotEmptyError):
            owner.delete_queue("mine", if_empty=True)  # refused: still the owner's
        with pytest.raises(ExclusiveQueueError):
            b.session().create_consumer("mine")
        owner.close()  # ownership ends with the session; not auto-delete: the queue stays
        again = b.session()
        assert [m.message.body for m in again.create_browser("mine")] == [b"1", b"2"]
        again.delete_queue("mine")
        assert "mine" not in b.queue_names()


def test_an_exclusive_auto_delete_queue_goes_with_its_owner(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d) as b:
        b.create_address("a")
        with b.session() as s:
            s.declare_queue(QueueConfig("reply", "a", auto_delete=True), exclusive=True)
            s.send("a", Message(b"r"))
            c = s.create_consumer("reply")
            assert c.receive(1) is not None
            c.close()
            assert "reply" in b.queue_names()  # its consumer went; its owner did not
        assert "reply" not in b.queue_names()
        assert [q.name for q in b.deleted_queues()] == ["reply"]
        keep = b.session()
        keep.declare_queue(QueueConfig("kept", "a", auto_delete=True), exclusive=True)
    with Broker.open(d) as b:  # closing the broker deleted nothing; no owner after a reopen
        assert b.queue_names() == ["kept"]
        b.session().create_browser("kept")


def test_declare_uses_an_existing_queue_and_claims_a_free_one(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a", ring_size=2))
        first, second = b.session(), b.session()
        info = first.declare_queue(QueueConfig("q", "a"), exclusive=True)
        assert info.ring_size == 2  # used as it is
        with pytest.raises(ExclusiveQueueError):
            second.declare_queue(QueueConfig("q", "a"), exclusive=True)
        first.close()
        assert b.session().declare_queue(QueueConfig("q", "a"), exclusive=True).name == "q"


def test_no_local_discards_what_the_owners_connection_sends(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d) as b:
        b.create_address("chat", {RoutingType.MULTICAST})
        b.create_queue(QueueConfig("log", "chat", RoutingType.MULTICAST))
        me, them = b.connection("me"), b.connection("them")
        mine, also_mine, theirs = me.session(), me.session(), them.session()
        mine.declare_queue(QueueConfig("inbox", "chat", RoutingType.MULTICAST, no_local=True),
                           exclusive=True)
        assert b.queue_info("inbox").no_local
        mine.send("chat", Message(b"from me"))
        also_mine.send("chat", Message(b"also from me"))  # same connection: discarded too
        theirs.send("chat", Message(b"from them"))
        tx = me.session(transacted=True)
        tx.send("chat", Message(b"tx from me"))
        tx.commit()
        b.session().send("chat", Message(b"from a plain session"))  # a connection of its own
        got = [m.message.body for m in mine.create_browser("inbox")]
        assert got == [b"from them", b"from a plain session"]
        assert b.queue_info("log").message_count == 5  # not no-local: it has them all
        me.close()  # the owner is gone: no connection's sends are local any more
        b.session().send("chat", Message(b"later"))
        assert b.queue_info("inbox").message_count == 3
        with pytest.raises(IllegalStateError):
            me.session()
    with Broker.open(d) as b:  # the flag is journaled; ownership is not
        assert b.queue_info("inbox").no_local and b.queue_info("inbox").message_count == 3
