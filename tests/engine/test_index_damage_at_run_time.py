"""Index damage found while the broker runs is rebuilt from the journal, never a fail-stop
(issue 36 item 6): the index is a cache of the journal. Damage is made after the open (whose
checks would find it and rebuild then): a value whose CRC no longer matches, a message entry
gone while a queue still refers to it, in the LMDB file itself and in the in-memory index.
Each drain must give every message once, in order, with its properties, the broker must go on
serving, and the store must open afterwards with its index used."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import pytest

from mqstore.engine import Broker, Message, QueueConfig
from mqstore.engine.errors import BrokerFailedError
from mqstore.journal import JournalOptions, SimulatedFileSystem
from mqstore.recovery import IndexInvalidError, MemoryIndex
from mqstore.recovery.entries import ID

N = 3000
OPTS = JournalOptions(segment_size=1 << 20)


def fill(b: Broker) -> None:
    b.create_address("orders")
    b.create_queue(QueueConfig("orders", "orders"))
    with b.session() as s:
        for start in range(0, N, 500):
            s.send_many("orders", [Message(b"body-%05d" % i, {"tag": f"needle-{i:05d}"})
                                   for i in range(start, start + 500)])
    b.checkpoint()


def drain(b: Broker, n: int = N) -> List[str]:
    out = []
    with b.session() as s:
        c = s.create_consumer("orders")
        for _ in range(n):
            d = c.receive(5)
            assert d is not None, f"only {len(out)} messages came back"
            assert d.message.body == b"body-" + d.message.properties["tag"][7:].encode()
            out.append(d.message.properties["tag"])
            d.ack()
        c.close()
    return out


def want(start: int = 0) -> List[str]:
    return [f"needle-{i:05d}" for i in range(start, N)]


def flip_in_file(path: Path, needle: bytes) -> int:
    """Change ``needle`` wherever the file holds it (inside a value: the pages' structure
    stays sound, so LMDB reads it and the value's CRC no longer matches). Written with
    pwrite, as another writer or the disk would: LMDB's shared map sees it."""
    data = path.read_bytes()
    fd = os.open(str(path), os.O_WRONLY)
    n, at = 0, data.find(needle)
    try:
        while at >= 0:
            os.pwrite(fd, b"X", at + len(needle) - 1)
            n += 1
            at = data.find(needle, at + 1)
    finally:
        os.close(fd)
    return n


def test_a_damaged_value_met_at_a_page_in_is_rebuilt_and_the_drain_goes_on(
        tmp_path: Path) -> None:
    with Broker.open(str(tmp_path), journal_options=OPTS) as b:
        fill(b)
    with Broker.open(str(tmp_path), journal_options=OPTS) as b:
        assert b.recovery_report.index == "used"
        assert flip_in_file(tmp_path / "index" / "data.mdb", b"needle-02500") >= 1
        assert drain(b) == want()
        stats = b.statistics()
        assert stats.index_rebuilds == 1 and "CRC" in stats.last_index_rebuild
        assert not stats.failed
        with b.session() as s:  # still serving
            s.send("orders", Message(b"after"))
            d = s.create_consumer("orders").receive(5)
            assert d.message.body == b"after"
            d.ack()
    with Broker.open(str(tmp_path), journal_options=OPTS) as b:
        assert b.recovery_report.index == "used"
        assert b.queue_info("orders").message_count == 0


def test_a_damaged_value_met_by_an_acks_fold_is_rebuilt_and_the_ack_holds(
        tmp_path: Path) -> None:
    """The message is in RAM already (read before the damage); its ack's fold reads the
    index entry: the append is kept, the image is rebuilt with the ack in it."""
    with Broker.open(str(tmp_path), journal_options=OPTS) as b:
        fill(b)
    with Broker.open(str(tmp_path), journal_options=OPTS) as b:
        with b.session() as s:
            c = s.create_consumer("orders")
            first = [c.receive(5) for _ in range(3)]
            assert flip_in_file(tmp_path / "index" / "data.mdb", b"needle-00001") >= 1
            for d in first:
                d.ack()
            c.close()
        assert b.statistics().index_rebuilds == 1
        assert b.queue_info("orders").message_count == N - 3
        assert drain(b, N - 3) == want(3)
    with Broker.open(str(tmp_path), journal_options=OPTS) as b:
        assert b.queue_info("orders").message_count == 0


@pytest.mark.parametrize("damage", ["gone", "crc"])
def test_a_reference_the_index_cannot_resolve_is_rebuilt(damage: str) -> None:
    """A message entry deleted (or its value changed) while a queue still refers to it:
    "queue 1 has a reference to message M, which the index does not hold"."""
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with Broker.open("/s", fs=fs, index=index, journal_options=OPTS) as b:
        fill(b)
    with Broker.open("/s", fs=fs, index=index, journal_options=OPTS) as b:
        msg = index.tables["msg"]
        keys = sorted(msg)
        victim = keys[2000]
        if damage == "gone":
            del msg[victim]
        else:
            msg[victim] = msg[victim][:-1] + bytes([msg[victim][-1] ^ 1])
        index._sorted.clear()
        assert drain(b) == want()
        assert b.statistics().index_rebuilds == 1
        assert ID.unpack(victim)[0] > 0


def test_damage_that_a_rebuild_does_not_cure_fail_stops(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """Damage met again right after a rebuild, nothing written since, is not the index
    file's: the broker stops (typed, the cause attached) instead of rebuilding forever."""
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with Broker.open("/s", fs=fs, index=index, journal_options=OPTS) as b:
        fill(b)
    b = Broker.open("/s", fs=fs, index=index, journal_options=OPTS)
    try:
        read = index.get

        def damaged(table: str, key: bytes) -> Optional[bytes]:  # every msg value, always
            raw = read(table, key)
            return raw[:-1] + bytes([raw[-1] ^ 1]) if table == "msg" and raw else raw
        monkeypatch.setattr(index, "get", damaged)
        with pytest.raises(BrokerFailedError) as info:
            drain(b)
        assert isinstance(info.value.cause, IndexInvalidError)
        assert b.statistics().index_rebuilds == 1 and b.statistics().failed
    finally:
        monkeypatch.undo()
        b.close()
    with Broker.open("/s", fs=fs, index=index, journal_options=OPTS) as b:
        assert drain(b) == want()
