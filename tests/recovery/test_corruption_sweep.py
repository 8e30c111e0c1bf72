"""The corruption sweep (issue 11): zero every byte of a small store's segments and index files
one at a time, and a sample of bit flips and truncations of each, on a store closed cleanly and
on one left as kill -9 leaves it. Each open either refuses with a typed error
naming a file of the store (and changes nothing), or recovers a state equal to the truth; a
record damaged in a segment the index lets recovery trust may instead be found at its first
read, as a typed error naming the file (``mqstore check`` finds it first). Never a crash of the
interpreter, never a silently smaller store."""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest

from mqstore.engine import Broker, Message, QueueConfig, RoutingType
from mqstore.engine.errors import BrokerFailedError
from mqstore.journal import CorruptJournalError, JournalOptions, MqStoreError
from mqstore.recovery import IndexInvalidError
from tests.recovery.storestate import describe
from tests.tools.test_cli import digest

OPTS = JournalOptions(segment_size=2048)


def build(d: Path, crashed: bool) -> None:
    """An anycast queue, a multicast pair, acks, a transaction: about 3 segments of records."""
    b = Broker.open(str(d), journal_options=OPTS, expiry_scan_ms=0, checkpoint_records=0)
    b.create_address("orders")
    b.create_queue(QueueConfig("orders", "orders"))
    b.create_address("events", {RoutingType.MULTICAST})
    b.create_queue(QueueConfig("audit", "events", RoutingType.MULTICAST))
    b.create_queue(QueueConfig("bill", "events", RoutingType.MULTICAST))
    with b.session() as s:
        s.send_many("orders", [Message(f"o{i}", {"i": i}) for i in range(14)])
        s.send_many("events", [Message(f"e{i}") for i in range(4)])
        c = s.create_consumer("orders")
        for _ in range(4):
            c.receive(1).ack()
        c.close()
    with b.session(transacted=True) as t:
        t.send("orders", Message(b"in a transaction"))
        t.commit()
    if crashed:  # a checkpoint mid-way, then more, then what kill -9 leaves
        b.checkpoint()
        with b.session() as s:
            s.send_many("orders", [Message(f"late {i}") for i in range(3)])
        b._opened.release()
    else:
        b.close()


def state(d: Path) -> Tuple[Dict[str, Any], Any]:
    b = Broker.open(str(d), journal_options=OPTS, expiry_scan_ms=0)
    try:
        return describe(b), b.recovery_report
    finally:
        b.close()


class Case:
    """Opens of damaged copies of one pristine store, in ``work`` (a copy per case)."""

    def __init__(self, pristine: Path, work: Path, crashed: bool,
                 truth: Dict[str, Any]) -> None:
        self.pristine = pristine
        self.work = work
        self.crashed = crashed
        self.truth = truth
        self.outcomes: Dict[str, int] = {}
        self.copy()

    def copy(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
        shutil.copytree(self.pristine, self.work)

    def case(self, rel: str, damage: Callable[[bytearray], bytearray], what: str) -> None:
        path = self.work / rel
        path.write_bytes(bytes(damage(bytearray(path.read_bytes()))))
        before = digest(self.work / "journal")
        try:
            got, report = state(self.work)
        except BrokerFailedError as exc:  # found at its first read: typed, names the file
            # index damage found while running is rebuilt from the journal, never a stop
            assert not isinstance(exc.cause, IndexInvalidError), f"{what}: {exc!r}"
            assert isinstance(exc.cause, CorruptJournalError), f"{what}: {exc!r}"
            assert str(self.work) in exc.cause.path, f"{what}: {exc!r}"
            self.count("found at read")
        except CorruptJournalError as exc:
            assert str(self.work) in exc.path, f"{what}: names no file of the store: {exc}"
            assert digest(self.work / "journal") == before, f"{what}: a refused open wrote"
            self.count("refused")
        except MqStoreError as exc:  # pragma: no cover - a typed error that names no file
            raise AssertionError(f"{what}: refused without naming a file: {exc!r}")
        else:
            if got != self.truth:
                assert self.crashed and report.journal.torn_bytes > 0 and self.late(got), \
                    f"{what}: opened smaller or different (index {report.index})"
                self.count("torn tail after the checkpoint")
            else:
                self.count("recovered equal")
        self.copy()

    def late(self, got: Dict[str, Any]) -> bool:
        """A crashed store may lose only records no checkpoint or later frame proved: the
        "late" messages sent after the checkpoint."""
        want = [m for m in self.truth["queues"]["orders"]["messages"]
                if not m[0].startswith("late")]
        have = got["queues"]["orders"]["messages"]
        return have[:len(want)] == want and all(m[0].startswith("late")
                                                for m in have[len(want):])

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


# a damage, as (kind, argument): picklable, so the cases can run in worker processes
Damage = Tuple[str, Any]


def damage_of(kind: str, arg: Any) -> Callable[[bytearray], bytearray]:
    if kind == "zero":
        return zero_at(arg)
    if kind == "flip":
        return flip_at(*arg)
    if kind == "cut":
        return cut_at(arg)
    return lambda b: b[:arg] + bytes(min(4096, len(b) - arg)) + b[arg + 4096:]  # "page"


def run_cases(pristine: str, work: str, crashed: bool, truth: Dict[str, Any],
              cases: List[Tuple[str, Damage, str]]) -> Dict[str, int]:
    """Run ``cases`` (file, damage, what) on copies of ``pristine`` in ``work``; the
    outcomes counted (a worker process's job; assertion errors propagate)."""
    c = Case(Path(pristine), Path(work), crashed, truth)
    for rel, (kind, arg), what in cases:
        c.case(rel, damage_of(kind, arg), what)
    return c.outcomes


class Sweep:
    """One pristine store, copied and damaged per case. Cases are collected with ``add`` and
    run by ``run`` on the machine's cores (each worker process on its own copy): every
    case opens a store, thousands of them in all."""

    def __init__(self, root: Path, crashed: bool) -> None:
        self.root = root
        self.pristine = root / "pristine"
        build(self.pristine, crashed)
        self.crashed = crashed
        self.truth, _ = state(Case(self.pristine, root / "truth", crashed, {}).work)
        self.work = Case(self.pristine, root / "work", crashed, self.truth).work  # by hand
        self.cases: List[Tuple[str, Damage, str]] = []
        self.outcomes: Dict[str, int] = {}

    def add(self, rel: str, kind: str, arg: Any, what: str) -> None:
        self.cases.append((rel, (kind, arg), what))

    def run(self) -> None:
        workers = max(1, min(2, os.cpu_count() or 1))
        parts = [self.cases[k::workers] for k in range(workers)]
        args = [(str(self.pristine), str(self.root / f"work{k}"), self.crashed, self.truth,
                 part) for k, part in enumerate(parts)]
        if workers == 1:
            results = [run_cases(*args[0])]
        else:
            spawn = multiprocessing.get_context("spawn")  # no fork of a threaded process
            with ProcessPoolExecutor(workers, mp_context=spawn) as pool:
                results = list(pool.map(run_cases, *zip(*args)))
        for got in results:
            for outcome, n in got.items():
                self.outcomes[outcome] = self.outcomes.get(outcome, 0) + n


def zero_at(i: int) -> Callable[[bytearray], bytearray]:
    def f(b: bytearray) -> bytearray:
        b[i] = 0
        return b
    return f


def flip_at(i: int, bit: int) -> Callable[[bytearray], bytearray]:
    def f(b: bytearray) -> bytearray:
        b[i] ^= 1 << bit
        return b
    return f


def cut_at(n: int) -> Callable[[bytearray], bytearray]:
    return lambda b: b[:n]


def nonzero(data: bytes) -> List[int]:
    return [i for i, v in enumerate(data) if v]


@pytest.mark.slow
@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "crashed"])
def test_every_byte_of_every_segment(tmp_path: Path, crashed: bool) -> None:
    sweep = Sweep(tmp_path, crashed)
    rng = random.Random(11)
    segments = sorted(p.name for p in (sweep.pristine / "journal").glob("*.seg"))
    assert len(segments) >= 2
    for name in segments:
        rel = f"journal/{name}"
        data = (sweep.pristine / rel).read_bytes()
        used = nonzero(data)
        for i in used:  # every byte that is not zero already
            sweep.add(rel, "zero", i, f"{rel}: byte {i} zeroed")
        for i in rng.sample(used, min(40, len(used))):
            sweep.add(rel, "flip", (i, rng.randrange(8)), f"{rel}: bit flip at {i}")
        for n in sorted(rng.sample(range(len(data)), 12)) + [0, 63, max(used) + 1]:
            sweep.add(rel, "cut", n, f"{rel}: truncated to {n}")
    sweep.run()
    assert sweep.outcomes.get("refused", 0) > 0
    assert sweep.outcomes.get("recovered equal", 0) > 0


@pytest.mark.slow
@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "crashed"])
def test_index_files_and_manifest(tmp_path: Path, crashed: bool) -> None:
    sweep = Sweep(tmp_path, crashed)
    rng = random.Random(5)
    for rel in ("index/data.mdb", "index/lock.mdb", "index/data.crc",
                "journal/segments.manifest"):
        if not (sweep.pristine / rel).exists():
            continue
        data = (sweep.pristine / rel).read_bytes()
        used = nonzero(data) or [0]
        for i in used:  # every byte that is not zero already
            sweep.add(rel, "zero", i, f"{rel}: byte {i} zeroed")
        for i in rng.sample(used, min(30, len(used))):
            sweep.add(rel, "flip", (i, rng.randrange(8)), f"{rel}: bit flip at {i}")
        for page in range(0, len(data), 4096):  # zero whole pages (LMDB asserts on them)
            sweep.add(rel, "page", page, f"{rel}: page at {page} zeroed")
        for n in sorted({0, 1, 100, 4096, 8192, len(data) // 2, len(data) - 1}):
            if n < len(data):
                sweep.add(rel, "cut", n, f"{rel}: truncated to {n}")
    sweep.run()
    # the index is a cache: its damage never refuses the store
    assert sweep.outcomes.get("recovered equal", 0) > 0


def roots(raw: bytes) -> Tuple[int, int]:
    """Page numbers of the free-page list's root and the main table's root (LMDB's current
    meta page), both in use."""
    import struct
    meta = max((0, 4096), key=lambda o: struct.unpack_from("<Q", raw, o + 144)[0])
    return (struct.unpack_from("<Q", raw, meta + 80)[0],
            struct.unpack_from("<Q", raw, meta + 128)[0])


@pytest.mark.parametrize("damage", ["extend", "shorten", "zero page 1", "zero main root",
                                    "zero free root", "flip"])
def test_a_damaged_index_neither_crashes_check_nor_open(tmp_path: Path, damage: str) -> None:
    """The tester's cases: ``truncate -s 1000000 index/data.mdb`` (SIGBUS before), a zeroed
    page (SIGABRT), one flipped bit (an untyped struct.error)."""
    from tests.tools.test_cli import run
    sweep = Sweep(tmp_path, crashed=False)
    data = sweep.work / "index" / "data.mdb"
    raw = bytearray(data.read_bytes())
    if damage == "extend":
        raw += bytes(1_000_000 - len(raw))
    elif damage == "shorten":
        raw = raw[:len(raw) // 2]
    elif damage == "zero page 1":
        raw[4096:8192] = bytes(4096)
    elif damage.startswith("zero"):
        page = roots(bytes(raw))[0 if "free" in damage else 1] * 4096
        raw[page:page + 4096] = bytes(4096)
    else:  # one bit of the first table name in the main table's root page
        import struct
        base = roots(bytes(raw))[1] * 4096
        raw[base + struct.unpack_from("<H", raw, base + 16)[0] + 8] ^= 0x04
    data.write_bytes(bytes(raw))
    result = run("check", str(sweep.work))
    if damage == "extend":  # zeros past the last page LMDB uses: nothing is damaged
        assert result.exit_code == 0, result.output
        got, report = state(sweep.work)
        assert got == sweep.truth and report.index == "used"
        return
    assert result.exit_code == 1 and "index" in result.output
    got, report = state(sweep.work)
    assert got == sweep.truth and report.index.startswith("rebuilt: index damaged")
    assert run("check", str(sweep.work)).exit_code == 0  # rebuilt whole
