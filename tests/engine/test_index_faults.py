"""The index is a cache and never on a caller's success path (issue 11, defect 6): a failing
index write is logged and counted, every send, receive and ack still succeeds exactly once, and
``close()`` always releases the store."""

from __future__ import annotations

import errno
from pathlib import Path

from mqstore.engine import Broker, Message, QueueConfig
from mqstore.recovery import MemoryIndex
from mqstore.recovery.errors import IndexInvalidError


class FullIndex(MemoryIndex):
    """An index whose writes fail as LMDB's do on a full disk, while ``full`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.full = True
        self.closed = False

    def commit(self, changes) -> None:
        if self.full:
            raise IndexInvalidError(f"LMDB write failed: {OSError(errno.ENOSPC, 'No space')}")
        super().commit(changes)

    def close(self) -> None:
        self.closed = True


def test_a_failing_checkpoint_is_not_a_failed_send_and_close_releases(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    index = FullIndex()
    b = Broker.open(d, index=index, checkpoint_records=3, expiry_scan_ms=0)
    b.create_address("q")
    b.create_queue(QueueConfig("q", "q"))
    with b.session() as s:
        for i in range(10):
            s.send("q", Message(str(i)))  # checkpoints fall due and fail: no error here
        c = s.create_consumer("q")
        for i in range(10):
            d_ = c.receive(1)
            assert d_.message.body == str(i).encode()
            d_.ack()
    stats = b.statistics()
    assert stats.checkpoint_failures >= 3 and "No space" in stats.last_checkpoint_error
    assert not stats.failed
    b.close()  # its checkpoint fails too, and it still lets go
    assert index.closed
    b2 = Broker.open(d, expiry_scan_ms=0)  # the store is free, and the journal has it all
    try:
        assert b2.queue_info("q").message_count == 0
        assert b2.queue_info("q").name == "q"
    finally:
        b2.close()


def test_checkpoints_resume_when_the_index_is_writable_again(tmp_path: Path) -> None:
    index = FullIndex()
    b = Broker.open(str(tmp_path / "s"), index=index, checkpoint_records=2, expiry_scan_ms=0)
    b.create_address("q")
    b.create_queue(QueueConfig("q", "q"))
    with b.session() as s:
        s.send_many("q", [Message(b"a"), Message(b"b")])
        index.full = False
        for _ in range(3):
            s.send("q", Message(b"c"))
    assert index.entries("meta") == 1 and b.statistics().checkpoint_lsn > 0
    b.close()
    # the commits that failed were not lost: the first good one wrote their changes too
    index.full = True  # no commit at all from here on: the index is used as it is
    b = Broker.open(str(tmp_path / "s"), index=index, expiry_scan_ms=0)
    try:
        assert b.recovery_report.index == "used"
        assert b.queue_info("q").message_count == 5
        with b.session() as s:
            c = s.create_consumer("q")
            assert [c.receive(1).message.body for _ in range(5)] == [b"a", b"b", b"c", b"c",
                                                                     b"c"]
    finally:
        b.close()


def test_failed_checkpoints_back_off_instead_of_running_at_every_write(tmp_path: Path) -> None:
    """Issue 36 item 3: while the index cannot be written, the changes held in RAM keep a
    checkpoint due; it was tried again at almost every write (1,000 failed checkpoints, each
    with a journal sync, for 1,000 sends). Now it backs off (10, 20, 40 ... up to 640 records)
    and, once the index is writable again, the next try succeeds and ends the back-off."""
    index = FullIndex()
    b = Broker.open(str(tmp_path / "s"), index=index, checkpoint_records=10, expiry_scan_ms=0)
    try:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        with b.session() as s:
            for i in range(1000):
                s.send("q", Message(b"x"), timeout=None)
            failed = b.statistics().checkpoint_failures
            assert 3 <= failed <= 10, failed
            index.full = False
            for i in range(700):  # within the longest back-off, the next try comes
                s.send("q", Message(b"y"))
            stats = b.statistics()
            assert stats.checkpoint_failures == failed and stats.checkpoint_lsn > 0
            assert not stats.failed
            index.full = True  # a success ended the back-off: the next due one is tried
            for i in range(40):
                s.send("q", Message(b"z"))
            assert b.statistics().checkpoint_failures > failed
    finally:
        b.close()


def test_an_explicit_checkpoint_or_compact_on_a_full_index_raises_and_the_broker_goes_on(
        tmp_path: Path) -> None:
    """``checkpoint()`` and ``compact()`` promise IndexInvalidError with nothing else changed
    (issue 36 item 3: they fail-stopped the broker and marked the index damaged)."""
    import pytest
    index = FullIndex()
    d = str(tmp_path / "s")
    b = Broker.open(d, index=index, checkpoint_records=0, expiry_scan_ms=0)
    b.create_address("q")
    b.create_queue(QueueConfig("q", "q"))
    before = b.statistics().checkpoint_failures  # the open's own, after creating the store
    with b.session() as s:
        s.send("q", Message(b"a"))
        for call in (b.checkpoint, lambda: b.compact(force=True)):
            with pytest.raises(IndexInvalidError, match="No space"):
                call()
            assert not b.statistics().failed
            s.send("q", Message(b"b"))  # still serving
        assert b.statistics().checkpoint_failures == before + 2
        index.full = False
        assert b.checkpoint() > 0
        c = s.create_consumer("q")
        assert [c.receive(1).message.body for _ in range(3)] == [b"a", b"b", b"b"]
    b.close()
    b = Broker.open(d, index=index, expiry_scan_ms=0)
    try:
        assert b.recovery_report.index == "used"  # never marked damaged
    finally:
        b.close()
