"""The journal's public behaviour: appends, reads, limits, errors, locking, waiting, reclaim."""

from __future__ import annotations

import asyncio
import errno
import os
import random
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pyroaring import BitMap64

from mqstore.journal import (CorruptJournalError, DirectoryLockedError, InvalidRecordError, Journal,
                             JournalClosedError, JournalFailedError, JournalOptions, ReadOnlyError,
                             RecordTooLargeError, SimulatedFileSystem)
from tests.waiting import PATIENCE

SMALL = JournalOptions(segment_size=8192)


def test_append_read_and_reopen(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    with Journal.open(d, SMALL) as j:
        tickets = [j.append(1 + i % 3, {"i": i, "body": b"x" * (i % 50)}) for i in range(500)]
        tickets[-1].wait()
        assert [t.lsn for t in tickets] == list(range(1, 501))
        assert j.read(tickets[10].location).payload == {"i": 10, "body": b"x" * 10}
        assert j.statistics().segments >= 4
    with Journal.open(d, SMALL) as j:
        recs = list(j.records())
        assert [r.payload["i"] for r in recs] == list(range(500))
        assert [r.kind for r in recs] == [1 + i % 3 for i in range(500)]
        assert [r.lsn for r in list(j.records(from_lsn=450))] == list(range(450, 501))
        assert j.append(1, "next").lsn == 501


def test_files_are_private(tmp_path: Path) -> None:
    d = tmp_path / "j"
    with Journal.open(str(d), SMALL) as j:
        j.append(1, "x").wait()
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    for f in d.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def test_record_too_large_writes_nothing(tmp_path: Path) -> None:
    with Journal.open(str(tmp_path / "j"), SMALL) as j:
        j.append(1, "a").wait()
        with pytest.raises(RecordTooLargeError) as err:
            j.append(1, b"x" * 9000)
        assert err.value.limit == 8192 - 64
        with pytest.raises(InvalidRecordError):
            j.append_many([(1, "ok"), (0, "bad kind")])
        with pytest.raises(InvalidRecordError):
            j.append(1, object())
        assert j.append(1, "b").lsn == 2
        j.wait_durable()
        assert [r.payload for r in j.records()] == ["a", "b"]


def test_append_many_waits_once(tmp_path: Path) -> None:
    with Journal.open(str(tmp_path / "j"), SMALL) as j:
        t = j.append_many([(1, i) for i in range(300)])
        assert t.wait(5)
        assert len(t.locations) == 300 and t.lsn == 300
        assert j.statistics().batches <= 3


def test_closed_and_read_only(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    j = Journal.open(d, SMALL)
    j.append(1, "x").wait()
    j.close()
    with pytest.raises(JournalClosedError):
        j.append(1, "y")
    before = {p.name: p.read_bytes() for p in Path(d).iterdir()}
    ro = Journal.open(d, JournalOptions(segment_size=8192, read_only=True))
    assert [r.payload for r in ro.records()] == ["x"]
    with pytest.raises(ReadOnlyError):
        ro.append(1, "z")
    ro.close()
    assert {p.name: p.read_bytes() for p in Path(d).iterdir()} == before


def test_second_opener_is_refused_in_process_and_across_processes(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    j = Journal.open(d, SMALL)
    with pytest.raises(DirectoryLockedError) as err:
        Journal.open(d, SMALL)
    if sys.platform.startswith("linux"):  # /proc/locks names the holder
        assert err.value.holder == os.getpid() and "this process" in str(err.value)
    code = ("import sys\nfrom mqstore.journal import Journal, DirectoryLockedError\n"
            "try:\n    Journal.open(sys.argv[1])\nexcept DirectoryLockedError as e:\n"
            "    print(e.holder, e)\n    sys.exit(3)\n")
    out = subprocess.run([sys.executable, "-c", code, d], capture_output=True, text=True)
    assert out.returncode == 3
    if sys.platform.startswith("linux"):
        assert out.stdout.split()[0] == str(os.getpid())
        assert f"locked by process {os.getpid()}" in out.stdout
    j.close()
    assert subprocess.run([sys.executable, "-c", code, d]).returncode == 0


def test_lock_released_when_holder_dies(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys,time\nfrom mqstore.journal import Journal\n"
                              "Journal.open(sys.argv[1]); print('ok', flush=True); time.sleep(60)",
                              d], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline().strip() == b"ok"
    child.kill()
    child.wait()
    Journal.open(d, SMALL).close()


def test_many_threads_share_group_commit(tmp_path: Path) -> None:
    with Journal.open(str(tmp_path / "j"), JournalOptions(segment_size=1 << 20)) as j:
        def work(n: int) -> None:
            for i in range(100):
                j.append(1, [n, i]).wait()
        threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        st = j.statistics()
        assert st.records == 1600 and st.durable_lsn == 1600
        assert st.fsyncs < 1600  # batches formed
        per = {}
        for r in j.records():
            n, i = r.payload
            assert per.get(n, -1) == i - 1
            per[n] = i


def test_asyncio_tasks_await_tickets(tmp_path: Path) -> None:
    with Journal.open(str(tmp_path / "j"), JournalOptions(segment_size=1 << 20)) as j:
        async def main() -> int:
            async def one(i: int) -> int:
                t = j.append(1, i)
                await t
                assert t.done()
                return t.lsn
            lsns = await asyncio.gather(*(one(i) for i in range(256)))
            return len(set(lsns))
        assert asyncio.run(main()) == 256


def test_fail_stop_after_fsync_error() -> None:
    fs = SimulatedFileSystem()
    j = Journal.open("/j", SMALL, fs=fs)
    j.append(1, "durable").wait()
    fs.fail_at = fs.op_count + 2  # the pwrite succeeds, its fdatasync fails
    t = j.append(1, "lost")
    with pytest.raises(JournalFailedError):
        t.wait(5)
    with pytest.raises(JournalFailedError):
        j.append(1, "refused")
    j.close()
    after = Journal.open("/j", SMALL, fs=fs.crash())
    assert [r.payload for r in after.records()] == ["durable"]
    after.close()


def test_reclaim_deletes_dead_segments_and_tombstones_outlive_targets() -> None:
    fs = SimulatedFileSystem()
    j = Journal.open("/j", SMALL, fs=fs)
    adds = [j.append(1, {"m": i, "pad": "p" * 200}) for i in range(120)]
    acks = [j.append(2, {"ack": i}) for i in range(120)]
    j.wait_durable()
    segs_before = len(j.segments())
    for a, k in zip(adds, acks):
        j.mark_dead_after(k.location, [a.location])
    assert len(j.segments()) == segs_before  # acks are pinned while targets exist
    j.mark_dead([a.location for a in adds])
    assert len(j.segments()) == 1  # everything reclaimed but the active segment
    j.close()
    reopened = Journal.open("/j", SMALL, fs=fs.crash())
    assert all(r.kind != 1 for r in reopened.records())  # no add survives without its ack
    reopened.close()


def test_segment_whose_records_died_while_active_is_reclaimed_once_sealed() -> None:
    """Reclaim looks only at segments that may be empty: one whose records all died while it
    was the active segment must still be deleted after it is sealed, and a segment that got
    live records after being empty for a while must not."""
    fs = SimulatedFileSystem()
    j = Journal.open("/j", SMALL, fs=fs)
    head = j.append(1, {"m": -1})
    j.wait_durable()
    first_seg = head.location.segment
    j.mark_dead([head.location])
    while True:  # every record of the first segment dies while it is the active one
        t = j.append(1, {"m": -1, "pad": "p" * 200})
        j.wait_durable()
        if t.location.segment != first_seg:
            break
        j.mark_dead([t.location])
    # the append that rolled sealed it; no report came since
    assert first_seg in [s.sequence for s in j.segments()]
    later = [t] + [j.append(1, {"m": i, "pad": "p" * 200}) for i in range(1, 60)]
    j.wait_durable()
    j.mark_dead([])  # any report runs reclaim
    live_segs = [s.sequence for s in j.segments()]
    assert first_seg not in live_segs
    assert {t.location.segment for t in later} <= set(live_segs)
    assert sorted(r.payload["m"] for r in j.records()) == [-1] + list(range(1, 60))
    j.close()


def test_dead_marks_are_exported_once_each() -> None:
    """An index commit carries the dead marks of the segments that changed since the previous
    one (a bitmap of offsets with the dead bytes), nothing for unchanged segments, and the
    segments deleted since (their stored marks go)."""
    fs = SimulatedFileSystem()
    j = Journal.open("/j", SMALL, fs=fs)
    adds = [j.append(1, {"m": i, "pad": "p" * 200}) for i in range(40)]
    j.wait_durable()
    j.liveness.deferred = True  # keep the segments while we look
    seg = adds[0].location.segment
    j.mark_dead([a.location for a in adds[:10]])
    first = j.liveness.export_changes()["dead"]
    assert list(first) == [seg]
    dead_bytes, raw = first[seg]
    assert dead_bytes == sum(a.location.length for a in adds[:10])
    assert sorted(BitMap64.deserialize(raw)) == [a.location.offset for a in adds[:10]]
    j.mark_dead([adds[10].location])
    again = j.liveness.export_changes()["dead"]
    assert sorted(BitMap64.deserialize(again[seg][1])) == [a.location.offset
                                                           for a in adds[:11]]
    assert j.liveness.export_changes()["dead"] == {}
    j.mark_dead([adds[11].location])
    pending = j.liveness.export_changes()
    j.liveness.requeue_changes(pending)  # an index commit that failed gives them back
    assert j.liveness.export_changes() == pending
    in_seg = [a for a in adds if a.location.segment == seg]
    j.mark_dead([a.location for a in in_seg])
    j.liveness.export_changes()
    j.liveness.deferred = False
    j.mark_dead([])
    assert seg not in [s.sequence for s in j.segments()]
    out = j.liveness.export_changes()
    assert out["gone"] == [seg] and seg not in out["dead"]
    j.close()


def test_a_million_out_of_order_dead_marks_and_pins_stay_small() -> None:
    """Dead marks cost about 2 bytes and a pinned ack whose message is dead in an older
    segment 8 bytes (issue 13), and they still pin: the acks die when the messages' segment
    goes, not before."""
    fs = SimulatedFileSystem()
    j = Journal.open("/j", JournalOptions(segment_size=32 << 10), fs=fs)
    n = 3000
    msgs, keep = [], []
    for i in range(n):
        msgs.append(j.append(1, {"m": i}))
        if i % 20 == 0:
            keep.append(j.append(1, {"queue": i}))  # a live record in every segment
    j.wait_durable()
    order = list(range(n))
    random.Random(5).shuffle(order)
    acks = []
    for i in order:
        ack = j.append(2, {"ack": i})
        acks.append(ack)
        j.mark_dead([msgs[i].location])
        j.mark_dead_after(ack.location, [msgs[i].location])
    j.wait_durable()
    msg_segs = {m.location.segment for m in msgs}
    cross = [a for a, i in zip(acks, order) if a.location.segment != msgs[i].location.segment]
    assert cross
    assert j.liveness.memory()["waiting_tombstones"] == len(cross)
    assert j.liveness.pins == {}
    assert all(s in [x.sequence for x in j.segments()] for s in msg_segs)
    j.mark_dead([k.location for k in keep])
    j.compact(force=True)
    assert j.liveness.memory()["waiting_tombstones"] == 0
    assert not msg_segs & {x.sequence for x in j.segments()}
    j.close()


def test_corruption_in_sealed_segment_is_refused_with_file_and_offset(tmp_path: Path) -> None:
    d = tmp_path / "j"
    with Journal.open(str(d), SMALL) as j:
        ts = [j.append(1, "r" * 100) for _ in range(200)]
        ts[-1].wait()
        victim = ts[3].location
    seg = sorted(d.glob("*.seg"))[0]
    raw = bytearray(seg.read_bytes())
    raw[victim.offset + 40] ^= 0xFF
    seg.write_bytes(bytes(raw))
    with pytest.raises(CorruptJournalError) as err:
        Journal.open(str(d), SMALL)
    assert err.value.path == str(seg) and err.value.offset == victim.offset
    with Journal.open(str(d), JournalOptions(segment_size=8192, salvage=True)) as j:
        assert len(j.report.skipped) == 1
        assert j.report.skipped[0].start == victim.offset
        assert len(list(j.records())) == 199


def test_torn_tail_is_truncated_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    fs = SimulatedFileSystem()
    j = Journal.open("/j", SMALL, fs=fs)
    j.append(1, "a").wait()
    j.append(1, "b" * 2000).wait()
    j.close()
    seg = [p for p in fs.snapshot() if p.endswith(".seg")][0]
    data = fs.snapshot()[seg]
    h = fs.open(seg)
    fs.pwrite(h, b"\xAB" * 700, 64 + 38 + 600)  # tear into the second record
    fs.fdatasync(h)
    j = Journal.open("/j", SMALL, fs=fs)
    assert j.report.torn_bytes > 0 and j.report.torn_offset == 64 + 38
    logged = [r for r in caplog.records if r.name == "mqstore.journal"]
    assert [r.levelname for r in logged] == ["WARNING"]
    assert f"torn tail of {j.report.torn_bytes} bytes at offset {64 + 38}" in \
        logged[0].getMessage()
    assert [r.payload for r in j.records()] == ["a"]
    assert data != fs.snapshot()[seg]
    j.append(1, "c").wait()
    j.close()
    j = Journal.open("/j", SMALL, fs=fs)
    assert [r.payload for r in j.records()] == ["a", "c"] and j.report.torn_bytes == 0
    j.close()


def test_io_error_at_open_is_typed(tmp_path: Path) -> None:
    from mqstore.journal import JournalIOError
    fs = SimulatedFileSystem(fail_at=2, fail_errno=errno.ENOSPC)
    with pytest.raises(JournalIOError) as err:
        Journal.open("/j", SMALL, fs=fs)
    assert err.value.errno == errno.ENOSPC


def test_trusted_catalogue_skips_scans_but_not_a_changed_segment() -> None:
    fs = SimulatedFileSystem()
    j = Journal.open("/j", SMALL, fs=fs)
    for i in range(400):
        j.append(1, {"i": i, "pad": "x" * 50})
    j.wait_durable()
    cat = j.catalogue()
    j.close()
    assert len(cat) >= 3
    j = Journal.open("/j", SMALL, fs=fs, trusted=cat)
    assert j.report.trusted_segments == len(cat)
    assert [r.payload["i"] for r in j.records()] == list(range(400))
    j.close()
    forged = [c._replace(generation=c.generation ^ 1) if n == 0 else c for n, c in enumerate(cat)]
    j = Journal.open("/j", SMALL, fs=fs, trusted=forged)
    assert j.report.trusted_segments == len(cat) - 1  # the mismatching one was scanned
    j.close()


def test_tombstone_of_a_live_target_survives_compaction() -> None:
    """An ack whose target is still live (a multicast message referenced elsewhere) must be
    copied by compaction with it, and die only when the target is gone."""
    fs = SimulatedFileSystem()
    j = Journal.open("/j", SMALL, fs=fs)
    target = j.append(1, {"msg": "M", "pad": "p" * 100})
    tomb = j.append(2, {"ack": "M on queue 1"})
    for i in range(150):  # fill and roll a few segments of dead filler
        j.mark_dead([j.append(3, {"filler": i, "pad": "f" * 100}).location])
    j.wait_durable()
    j.mark_dead_after(tomb.location, [target.location])  # same segment, target still live
    report = j.compact(force=True)
    assert report.compacted
    kinds = [r.kind for r in j.records()]
    assert kinds.count(1) == 1 and kinds.count(2) == 1, "the ack was dropped with M alive"
    j.mark_dead([report.relocations[target.location]])
    j.compact(force=True)
    assert [r.kind for r in j.records() if r.kind in (1, 2)] == []
    j.close()


def test_async_policy_loses_at_most_a_tail_and_never_corrupts() -> None:
    opts = JournalOptions(segment_size=4096, sync_policy="async")
    fs = SimulatedFileSystem()
    j = Journal.open("/j", opts, fs=fs)
    tickets = [j.append(1, {"i": i, "pad": "x" * 40}) for i in range(300)]
    tickets[-1].wait(5)  # written, not necessarily synced
    assert j.statistics().fsyncs < 50  # no fsync per batch: only when segments roll
    for keep in (0, fs.unsynced_count() // 2, fs.unsynced_count()):
        crashed = Journal.open("/j", opts, fs=fs.crash(keep=keep, tear="sector"))
        got = [r.payload["i"] for r in crashed.records()]
        assert got == list(range(len(got)))  # a prefix: the tail may be lost, nothing else
        crashed.close()
    j.close()


def test_iterate_from_a_location() -> None:
    fs = SimulatedFileSystem()
    j = Journal.open("/j", SMALL, fs=fs)
    tickets = [j.append(1, i) for i in range(500)]
    j.wait_durable()
    start = tickets[321].location
    assert [r.payload for r in j.records(from_location=start)] == list(range(321, 500))
    j.close()


def test_compaction_thresholds_like_artemis() -> None:
    opts = JournalOptions(segment_size=4096, compact_min_files=10, compact_live_ratio=0.3)
    fs = SimulatedFileSystem()
    j = Journal.open("/j", opts, fs=fs)
    tickets = [j.append(1, {"i": i, "pad": "p" * 60}) for i in range(1200)]
    j.wait_durable()
    assert len(j.segments()) > 12
    # half dead: above 30% live, no compaction
    j.mark_dead([t.location for t in tickets if t.lsn % 2 == 0])
    assert not j.compact().compacted
    # 80% dead (one live record in five): compaction runs
    j.mark_dead([t.location for t in tickets if t.lsn % 2 == 1 and t.lsn % 5 != 0])
    report = j.compact()
    assert report.compacted and len(report.outputs) < len(report.inputs)
    live = [t.lsn - 1 for t in tickets if t.lsn % 10 == 5]
    active = j.segments()[-1].sequence
    got = [(r.payload["i"], r.location.segment) for r in j.records()]
    assert [i for i, _seg in got if i in set(live)] == live  # every live record, in order
    assert all(seg == active for i, seg in got if i not in set(live))  # dead: active only
    j.close()


def test_the_journal_has_everything_its_parts_are_typed_against() -> None:
    """``JournalCore`` (what liveness, staging, the writer and compaction use) names only
    members an open ``Journal`` has: a rename cannot leave the parts' contract stale."""
    from mqstore.journal.core import JournalCore
    j = Journal.open("/j", SMALL, fs=SimulatedFileSystem())
    try:
        names = set(JournalCore.__annotations__) | {
            n for n in vars(JournalCore) if n.startswith("_") and not n.startswith("__")
            and callable(vars(JournalCore)[n])}
        assert len(names) > 20
        assert sorted(n for n in names if not hasattr(j, n)) == []
    finally:
        j.close()


def test_a_failed_write_is_logged_as_an_error(caplog: pytest.LogCaptureFixture) -> None:
    fs = SimulatedFileSystem()
    j = Journal.open("/j", SMALL, fs=fs)
    fs.fail_at = fs.op_count + 1  # the next write or sync
    with pytest.raises(JournalFailedError):
        j.append(1, "lost").wait()
    j.close()
    errors = [r.getMessage() for r in caplog.records
              if r.name == "mqstore.journal" and r.levelname == "ERROR"]
    assert len(errors) == 1 and "/j failed" in errors[0] and "injected EIO" in errors[0]


def test_wait_durable_waits_for_a_batch_being_flushed() -> None:
    """``wait_durable`` (and ``sync``, which an index checkpoint runs first) covers everything
    appended so far, also the records the writer has taken and not yet synced: it returned at
    once when no record waited in the open batch, and a checkpoint then covered records a power
    loss could still take back (the index ahead of the journal)."""
    fs = SimulatedFileSystem()
    j = Journal.open("/j", JournalOptions(segment_size=1 << 16), fs=fs)
    j.append(1, {"x": 1}).wait()
    entered, release = threading.Event(), threading.Event()

    def hold(op: str) -> None:  # the writer holds the next batch before its fdatasync
        if op == "fdatasync" and threading.current_thread() is not threading.main_thread():
            entered.set()
            assert release.wait(PATIENCE)
    fs.hook = hold
    try:
        ticket = j.append(1, {"x": 2})  # nobody waits: the writer thread takes it
        assert entered.wait(PATIENCE)
        assert not ticket.done()
        assert j.wait_durable(timeout=0) is False  # not durable yet: the fdatasync is held
    finally:
        release.set()
    assert j.wait_durable(PATIENCE) is True
    fs.hook = None
    j.close()


def test_a_record_nobody_waits_on_is_synced_with_the_next_one_waited_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``append_many`` whose ticket nobody waits on (an ack that does not block, Artemis's
    blockOnAcknowledge=false) does not wake the writer thread: the next caller that waits leads
    the flush of both, one fdatasync for the two, in its own thread. (It woke the writer, which
    synced the ack alone while the next send waited behind it: two fdatasyncs in a row per
    message one at a time.) The writer's idle poll is made long here so that only the waits
    flush; the pause between the two appends only gives a woken writer time to run."""
    from mqstore.journal import writer
    monkeypatch.setattr(writer, "IDLE_POLL_S", 60.0)
    monkeypatch.setattr(writer, "IDLE_MAX_S", 60.0)
    fs = SimulatedFileSystem()
    j = Journal.open("/j", JournalOptions(segment_size=1 << 20), fs=fs)
    by_writer = []
    fs.hook = lambda op: by_writer.append(op) if op == "fdatasync" and \
        threading.current_thread() is not threading.main_thread() else None
    try:
        j.append_many([(1, "first")]).wait()
        before = j.statistics().fsyncs
        for i in range(20):
            ack = j.append_many([(2, {"ack": i})])
            time.sleep(0.001)
            j.append_many([(1, {"send": i})]).wait()
            assert ack.done()  # the wait covered it too
        assert j.statistics().fsyncs - before == 20
        assert by_writer == []
    finally:
        fs.hook = None
        j.close()
