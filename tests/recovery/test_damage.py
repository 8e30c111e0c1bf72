"""Damage at rest to a closed store (issue 11, defects 1 and 2): a missing segment or manifest,
a truncated, zeroed or flipped tail that the index checkpoint proves durable. Every case refuses
to open with a typed error naming the file, deletes and rewrites nothing, is an error for
``mqstore check``, and ``salvage`` is the one way on, reporting what was lost."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List

import pytest

from mqstore.engine import Broker, Message, QueueConfig
from mqstore.journal import CorruptJournalError, JournalOptions
from mqstore.journal.errors import JournalBehindError, MissingSegmentError
from mqstore.journal.manifest import MANIFEST_FILE
from tests.recovery.storestate import describe
from tests.tools.test_cli import digest, run

OPTS = JournalOptions(segment_size=64 * 1024)
BODY = b"x" * 1000


def build_store(d: Path, messages: int = 300) -> None:
    """A closed store of one queue with ``messages`` unconsumed 1 KB messages (5 segments)."""
    b = Broker.open(str(d), journal_options=OPTS, expiry_scan_ms=0)
    b.create_address("orders")
    b.create_queue(QueueConfig("orders", "orders"))
    with b.session() as s:
        for i in range(messages):
            s.send("orders", Message(BODY, {"i": i}))
    b.close()


def segments(d: Path) -> List[Path]:
    return sorted((d / "journal").glob("*.seg"))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    d = tmp_path / "store"
    build_store(d)
    assert len(segments(d)) >= 4
    return d


def assert_refused(d: Path, error: type, names: str) -> None:
    before = digest(d)
    with pytest.raises(error) as info:
        Broker.open(str(d), journal_options=OPTS, expiry_scan_ms=0)
    assert names in str(info.value)
    assert digest(d) == before, "a refused open changed the store"
    res = run("check", str(d))
    assert res.exit_code == 1, res.output
    assert digest(d) == before
    # the directory is not left locked: a second refusal says the same
    with pytest.raises(error):
        Broker.open(str(d), journal_options=OPTS, expiry_scan_ms=0)


@pytest.mark.parametrize("which", [0, 2, -1])
def test_a_missing_segment_refuses_the_open_and_deletes_nothing(store: Path, which: int) -> None:
    victim = segments(store)[which]
    victim.unlink()
    assert_refused(store, MissingSegmentError, victim.name)


def test_salvage_opens_without_the_missing_segment_and_reports_the_loss(store: Path) -> None:
    segments(store)[1].unlink()
    res = run("recover", str(store), "--salvage")
    assert res.exit_code == 0, res.output
    assert "missing" in res.output and "messages:" in res.output
    b = Broker.open(str(store), journal_options=OPTS, expiry_scan_ms=0)  # now opens as is
    try:
        count = b.queue_info("orders").message_count
        assert 0 < count < 300
    finally:
        b.close()


def test_salvage_report_counts_exactly_the_lost_messages(store: Path) -> None:
    segments(store)[2].unlink()
    b = Broker.open(str(store), journal_options=JournalOptions(segment_size=64 * 1024,
                                                               salvage=True), expiry_scan_ms=0)
    try:
        lost = b.recovery_report.lost
        assert lost["messages"] == 300 - b.queue_info("orders").message_count > 0
        assert lost["queues"] == [] and lost["addresses"] == []
    finally:
        b.close()


def test_a_missing_manifest_refuses_the_open(store: Path) -> None:
    (store / "journal" / MANIFEST_FILE).unlink()
    assert_refused(store, MissingSegmentError, MANIFEST_FILE)


def test_a_damaged_manifest_refuses_the_open(store: Path) -> None:
    path = store / "journal" / MANIFEST_FILE
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    assert_refused(store, CorruptJournalError, MANIFEST_FILE)


def last_records_end(path: Path) -> int:
    data = path.read_bytes()
    return len(data.rstrip(b"\0"))


@pytest.mark.parametrize("how", ["truncate", "zero", "flip", "truncate_at_frame"])
def test_tail_damage_a_checkpoint_proves_durable_is_refused(store: Path, how: str) -> None:
    last = segments(store)[-1]
    end = last_records_end(last)
    data = bytearray(last.read_bytes())
    if how == "truncate":
        data = data[:end - 500]
    elif how == "zero":
        data[end - 1500:end - 1400] = bytes(100)
    elif how == "flip":
        data[end - 700] ^= 0x10
    else:  # zero the last frames exactly: what remains is a valid, shorter journal
        data[64:] = bytes(len(data) - 64)
    last.write_bytes(bytes(data))
    assert_refused(store, CorruptJournalError, last.name)


def test_a_journal_cut_at_a_frame_boundary_is_behind_the_index(store: Path) -> None:
    last = segments(store)[-1]
    data = bytearray(last.read_bytes())
    data[64:] = bytes(len(data) - 64)
    last.write_bytes(bytes(data))
    with pytest.raises(JournalBehindError) as info:
        Broker.open(str(store), journal_options=OPTS, expiry_scan_ms=0)
    assert info.value.last_lsn < info.value.proven_lsn


def test_a_torn_tail_after_the_checkpoint_is_still_dropped(tmp_path: Path) -> None:
    """The same damage after the last checkpoint is what a crash leaves: dropped, not refused."""
    d = tmp_path / "store"
    build_store(d, 100)
    b = Broker.open(str(d), journal_options=OPTS, expiry_scan_ms=0, checkpoint_records=0)
    with b.session() as s:
        s.send("orders", Message(b"after the checkpoint"))
    b._opened.release()  # what kill -9 leaves: files closed, no checkpoint at close
    last = segments(d)[-1]
    data = bytearray(last.read_bytes())
    data[last_records_end(last) - 3] ^= 0xFF  # tear the newest record
    last.write_bytes(bytes(data))
    b2 = Broker.open(str(d), journal_options=OPTS, expiry_scan_ms=0)
    try:
        assert b2.recovery_report.journal.torn_bytes > 0
        assert b2.queue_info("orders").message_count == 100
    finally:
        b2.close()


def test_an_undamaged_store_reopens_equal(store: Path) -> None:
    b = Broker.open(str(store), journal_options=OPTS, expiry_scan_ms=0)
    try:
        state = describe(b)
        assert state["queues"]["orders"]["count"] == 300
        assert b.recovery_report.index == "used"
    finally:
        b.close()
    assert os.path.exists(store / "journal" / MANIFEST_FILE)


def test_a_segment_file_the_manifest_does_not_list_is_refused_and_salvage_sets_it_aside(
        store: Path) -> None:
    first = segments(store)[0]
    stray = first.with_name(f"{int(first.name[:16]) + 1:016d}.seg")
    stray.write_bytes(first.read_bytes())  # e.g. copied back from a backup
    assert_refused(store, CorruptJournalError, stray.name)
    res = run("recover", str(store), "--salvage")
    assert res.exit_code == 0, res.output
    assert not stray.exists() and stray.with_name(stray.name + ".unlisted").exists()
    b = Broker.open(str(store), journal_options=OPTS, expiry_scan_ms=0)  # opens plainly now
    try:
        assert b.queue_info("orders").message_count == 300
    finally:
        b.close()
