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
