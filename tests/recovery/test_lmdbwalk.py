"""The compiled index check (``recovery._lmdbwalk``) against its reference (``verify``, which
reads through LMDB in a child): on valid indexes both pass; on damaged copies the walker never
passes what the reference refuses, and it never crashes (it reads pages, never maps them)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from mqstore.engine import Broker, Message, QueueConfig
from mqstore.recovery import lmdbcheck
from mqstore.recovery.lmdbcheck import DATA_FILE, verify

walker = pytest.importorskip("mqstore.recovery._lmdbwalk")


def reference(directory: str) -> int:
    """``verify``'s exit code, run in a child (LMDB may crash on a damaged file)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = lmdbcheck.EXIT_DAMAGED
        try:
            code = verify(directory)
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def build(d: Path, big: bool) -> str:
    """A closed store with several queues, acks (dead-record lists) and, when ``big``,
    properties large enough for LMDB overflow pages; returns its index directory."""
    b = Broker.open(str(d), expiry_scan_ms=0, checkpoint_records=500)
    for q in ("a", "b", "c"):
        b.create_address(q)
        b.create_queue(QueueConfig(q, q))
    with b.session() as s:
        for i in range(1500):
            props = {"big": "p" * (50 + 29 * (i % 150))} if big else {"i": i}
            s.send("abc"[i % 3], Message(b"x", props))
        c = s.create_consumer("a")
        s.ack_many(c.receive_many(200, timeout=0))
    b.close()
    return str(d / "index")


def test_the_extension_is_built_by_the_install() -> None:
    assert hasattr(walker, "walk")


@pytest.mark.parametrize("big", [False, True])
def test_valid_indexes_pass_and_damage_is_never_missed(tmp_path: Path, big: bool) -> None:
    index = build(tmp_path / "s", big)
    assert walker.walk(os.path.join(index, DATA_FILE)) == (0, "")
    assert reference(index) == 0
    data = open(os.path.join(index, DATA_FILE), "rb").read()
    rng = random.Random(7 if big else 3)
    caught = 0
    for case in range(120):
        buf = bytearray(data)
        pos = rng.randrange(8192, len(buf))
        if case % 2:
            buf[pos] ^= 1 << rng.randrange(8)
        else:
            buf[pos:pos + 48] = bytes(48)
        copy = tmp_path / f"c{case}"
        copy.mkdir()
        (copy / DATA_FILE).write_bytes(bytes(buf))
        code, why = walker.walk(str(copy / DATA_FILE))
        if reference(str(copy)) != 0:
            assert code != 0, f"the walker passed damage at byte {pos} the reference found"
        if code != 0:
            caught += 1
            assert why and code in (lmdbcheck.EXIT_DAMAGED, lmdbcheck.EXIT_UNSORTED)
    assert caught > 30  # much of the damage lands in pages in use (the rest in free pages)


def test_a_truncated_or_foreign_file_is_damaged(tmp_path: Path) -> None:
    index = build(tmp_path / "s", False)
    data = open(os.path.join(index, DATA_FILE), "rb").read()
    for name, content in (("short", data[: len(data) // 2]), ("tiny", data[:100]),
                          ("zeros", bytes(len(data))), ("empty", b"")):
        path = tmp_path / name
        path.write_bytes(content)
        code, why = walker.walk(str(path))
        assert code == lmdbcheck.EXIT_DAMAGED and why, name


def test_an_open_names_the_damage_the_walker_found(tmp_path: Path) -> None:
    d = tmp_path / "s"
    index = build(d, False)
    path = os.path.join(index, DATA_FILE)
    data = bytearray(open(path, "rb").read())
    code, _ = walker.walk(path)
    assert code == 0
    # flip a byte inside the entries of every leaf page (the last one may be a free page,
    # which holds nothing the index reads)
    last = int.from_bytes(data[136:144], "little")
    for pgno in range(last, 1, -1):
        base = pgno * 4096
        flags = int.from_bytes(data[base + 10:base + 12], "little")
        upper = int.from_bytes(data[base + 14:base + 16], "little")
        if flags & 0x02 and upper <= 4000:
            data[base + 4000] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with Broker.open(str(d), expiry_scan_ms=0) as b:
        assert b.recovery_report.rebuilt
        assert "page" in b.recovery_report.index, b.recovery_report.index
        assert b.queue_info("a").message_count == 300


def branch_key_bytes(data: bytes, page_size: int = 4096) -> list:
    """Offsets of the bytes of every separator key of every branch page (node 1 on: node 0's
    key is implicit), by LMDB 0.9's page layout."""
    import struct
    out = []
    for p in range(2, len(data) // page_size):
        page = data[p * page_size:(p + 1) * page_size]
        if not struct.unpack_from("<H", page, 10)[0] & 0x01:  # P_BRANCH
            continue
        lower = struct.unpack_from("<H", page, 12)[0]
        for i in range(1, (lower - 16) // 2):
            ptr = struct.unpack_from("<H", page, 16 + 2 * i)[0]
            ksize = struct.unpack_from("<H", page, ptr + 6)[0]
            out += [p * page_size + ptr + 8 + j for j in range(ksize)]
    return out


def test_a_damaged_branch_key_is_index_damage_at_open_never_a_fail_stop_later(
        tmp_path: Path) -> None:
    """Issue 36 item 6: a flipped byte in a separator key of a branch page passed the check
    (every entry is still there, in order, with its CRC: an in-order walk never reads those
    keys), but LMDB routes lookups by them: the first page-in then found "queue 2 has a
    reference to message N, which the index does not hold" and fail-stopped the broker, or
    silently gave out fewer messages. Every such flip that hides an entry from a lookup is
    now found before the index is used (walker and reference), and the open rebuilds."""
    import shutil
    index = build(tmp_path / "s", False)
    data = open(os.path.join(index, DATA_FILE), "rb").read()
    targets = branch_key_bytes(data)
    assert len(targets) > 50
    rng = random.Random(5)
    hidden = 0
    for n in range(40):
        d = tmp_path / f"c{n}"
        shutil.copytree(tmp_path / "s", d)
        off = rng.choice(targets)
        raw = bytearray(data)
        raw[off] ^= 1 << rng.randrange(8)
        path = os.path.join(d, "index", DATA_FILE)
        with open(path, "wb") as f:
            f.write(bytes(raw))
        code, _why = walker.walk(path)
        assert (code == 0) == (reference(str(d / "index")) == 0), off  # the two agree
        with Broker.open(str(d), expiry_scan_ms=0, memory_budget=4096) as b:
            hidden += b.recovery_report.rebuilt
            with b.session() as s:  # every message reads, in every queue: no fail-stop
                for q in ("a", "b", "c"):
                    c = s.create_consumer(q)
                    got = 0
                    while c.receive(0) is not None:
                        got += 1
                    assert got == (300 if q == "a" else 500), (off, q, got)
    assert hidden > 5  # (most such flips hide an entry; the rest route the same)
