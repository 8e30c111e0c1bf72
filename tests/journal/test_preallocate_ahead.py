"""The next segment's file is zero-filled ahead of need (``journal.pool``): rolls use it, a
crash anywhere around it loses nothing durable, a failure while building it only costs speed,
and it never outlives the journal that built it."""

from __future__ import annotations

import errno
import random
from typing import List

from mqstore.journal import Journal, JournalOptions, SimulatedFileSystem
from mqstore.journal.pool import NEXT_NAME
from tests.journal.crashkit import Model, append_one, check

SIZE = 8192
OPTS = JournalOptions(segment_size=SIZE, max_record_size=1024)


def segment_files(fs: SimulatedFileSystem) -> List[str]:
    return [n for n in fs.listdir("/j") if n.endswith(".seg")]


class Renames(SimulatedFileSystem):
    """Remembers every rename (source name, destination name)."""

    def __init__(self) -> None:
        super().__init__()
        self.renames: List[tuple] = []

    def rename(self, src: str, dst: str) -> None:
        super().rename(src, dst)
        self.renames.append((src.rsplit("/", 1)[-1], dst.rsplit("/", 1)[-1]))


def test_rolls_use_the_file_built_ahead_and_it_goes_with_the_journal() -> None:
    fs = Renames()
    j = Journal.open("/j", OPTS, fs=fs)
    model, rng = Model(), random.Random(1)
    for _ in range(3):  # each round: a batch has the next file built (one chunk), then a roll
        append_one(j, model, rng).wait(10)
        assert fs.snapshot().get("/j/" + NEXT_NAME) == bytes(SIZE)
        before = segment_files(fs)
        while segment_files(fs) == before:
            append_one(j, model, rng).wait(10)
        assert fs.snapshot()["/j/" + segment_files(fs)[-1]] != bytes(SIZE)  # header written
        assert fs.renames[-2] == (NEXT_NAME, segment_files(fs)[-1])  # then the manifest
    j.close()
    assert NEXT_NAME not in fs.listdir("/j")
    with Journal.open("/j", OPTS, fs=fs) as again:
        check(again, model, model.refresh_durable())
        assert len(list(again.records())) == len(model.payloads)


def test_a_crash_at_any_moment_around_the_next_file_loses_nothing_durable() -> None:
    checked = 0
    for seed in range(6):
        fs = SimulatedFileSystem()
        j = Journal.open("/j", OPTS, fs=fs)
        model, rng = Model(), random.Random(seed)
        states = []
        for i in range(120):
            append_one(j, model, rng)
            if i % 7 == 0:
                model.tickets[-1].wait(10)
            if i % 11 == 0:
                durable = model.refresh_durable()
                for keep in (0, fs.unsynced_count() // 2, fs.unsynced_count()):
                    states.append((fs.crash(keep=keep), durable))
        j.close()
        for crashed, durable in states:
            with Journal.open("/j", OPTS, fs=crashed) as again:
                check(again, model, durable)
            assert NEXT_NAME not in crashed.listdir("/j") or \
                crashed.snapshot()["/j/" + NEXT_NAME] == bytes(SIZE)
            checked += 1
    assert checked >= 6 * 33


class NoNextFile(SimulatedFileSystem):
    """Every attempt to create the next segment's file fails with EIO."""

    def open(self, path: str, create: bool = False, read_only: bool = False) -> int:
        if path.endswith(NEXT_NAME):
            raise OSError(errno.EIO, "injected", path)
        return super().open(path, create, read_only)


def test_a_failure_while_building_the_next_file_only_costs_speed() -> None:
    fs = NoNextFile()
    model, rng = Model(), random.Random(2)
    with Journal.open("/j", OPTS, fs=fs) as j:
        for _ in range(250):  # several rolls, each creating its segment whole
            append_one(j, model, rng)
        j.wait_durable(10)
        assert len(segment_files(fs)) > 3
        assert not j.statistics().failed
    with Journal.open("/j", OPTS, fs=fs.crash(keep=0)) as again:
        check(again, model, model.refresh_durable())
        assert len(list(again.records())) == len(model.payloads)


def test_off_no_next_file_is_built() -> None:
    fs = SimulatedFileSystem()
    with Journal.open("/j", JournalOptions(segment_size=SIZE, preallocate_ahead=False),
                      fs=fs) as j:
        for i in range(40):
            j.append(1, "x" * 300).wait(10)
            assert NEXT_NAME not in fs.listdir("/j")
        assert len(segment_files(fs)) > 1
