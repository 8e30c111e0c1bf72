"""What mqstore tells its user while it works. Logs, on one stdlib logger per layer
(``mqstore.journal``, ``mqstore.recovery``, ``mqstore.engine``): index rebuilds, dead-letter
moves and drops, an address that starts dropping. And the progress of an open's replay
(``Broker.open(progress=...)``)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from mqstore.engine import Broker, Message, QueueConfig
from mqstore.engine.config.settings import AddressFullPolicy, AddressSettings

FAST = dict(expiry_scan_ms=0)
ROOT = str(Path(__file__).resolve().parents[2])


def records(caplog: pytest.LogCaptureFixture, logger: str, level: int) -> List[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == level]


def test_a_rebuilt_index_is_a_warning_a_normal_open_is_info(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = str(tmp_path / "s")
    caplog.set_level(logging.INFO)
    with Broker.open(d, **FAST) as b:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        with b.session() as s:
            s.send("q", Message(b"x"))
    assert not records(caplog, "mqstore.recovery", logging.WARNING)  # a new store: no warning
    caplog.clear()
    with Broker.open(d, **FAST):
        pass
    infos = records(caplog, "mqstore.recovery", logging.INFO)
    assert len(infos) == 1 and "index used" in infos[0] and d in infos[0]
    assert not records(caplog, "mqstore.recovery", logging.WARNING)
    caplog.clear()
    shutil.rmtree(os.path.join(d, "index"))
    with Broker.open(d, **FAST):
        pass
    warnings = records(caplog, "mqstore.recovery", logging.WARNING)
    assert len(warnings) == 1 and "rebuilt: no index" in warnings[0] and d in warnings[0]


def _poisoned(b: Broker, dla: str) -> None:
    """Send one message to ``orders`` (dead-letter address ``dla``) and reject it."""
    b.set_address_settings("orders", AddressSettings(dead_letter_address=dla or None))
    b.create_address("orders")
    b.create_queue(QueueConfig("orders", "orders"))
    with b.session() as s:
        s.send("orders", Message(b"poison"))
        s.create_consumer("orders").receive(1).reject()


@pytest.mark.parametrize("setup,expect", [
    ("with queue", "sent to dead-letter address 'DLA'"),
    ("no queue", "dropped, dead-letter address 'DLA' has no queues"),
    ("missing", "dropped, dead-letter address 'DLA' does not exist"),
    ("unset", "dropped, no dead-letter address is set"),
])
def test_dead_letters_are_logged_like_artemis(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                              setup: str, expect: str) -> None:
    caplog.set_level(logging.INFO)
    with Broker.open(str(tmp_path / "s"), **FAST) as b:
        if setup in ("with queue", "no queue"):
            b.create_address("DLA")
        if setup == "with queue":
            b.create_queue(QueueConfig("DLQ", "DLA"))
        _poisoned(b, "" if setup == "unset" else "DLA")
    warnings = records(caplog, "mqstore.engine", logging.WARNING)
    assert len(warnings) == 1, warnings
    assert "queue 'orders' (rejected)" in warnings[0] and expect in warnings[0]


def test_an_address_that_starts_dropping_is_logged_once_per_episode(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = AddressSettings(address_full_policy=AddressFullPolicy.DROP, max_size_messages=2)
    with Broker.open(str(tmp_path / "s"), address_settings={"q": settings}, **FAST) as b:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))

        def dropping() -> List[str]:
            return [m for m in records(caplog, "mqstore.engine", logging.WARNING)
                    if "are being dropped" in m]

        with b.session() as s:
            for i in range(5):
                s.send("q", Message(b"%d" % i))
            assert len(dropping()) == 1 and "'q'" in dropping()[0]
            assert b.address_info("q").dropped_count == 3
            c = s.create_consumer("q")
            s.ack_many(c.receive_many(2, timeout=1))
            s.send("q", Message(b"again"))  # room again: accepted, the episode ends
            s.send("q", Message(b"fills"))
            assert len(dropping()) == 1
            s.send("q", Message(b"dropped"))
            assert len(dropping()) == 2


def test_open_reports_replay_progress(tmp_path: Path) -> None:
    """``Broker.open(progress=...)``: (records replayed, records to replay) after each 1,000
    records, for a rebuild and for the tail after the index."""
    d = str(tmp_path / "s")
    with Broker.open(d, checkpoint_records=0, **FAST) as b:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        with b.session() as s:
            s.send_many("q", [Message(b"x") for _ in range(3500)])
    shutil.rmtree(os.path.join(d, "index"))
    seen: List[tuple] = []
    with Broker.open(d, progress=lambda n, total: seen.append((n, total)), **FAST) as b:
        replayed = b.recovery_report.replayed_records
    assert replayed == 3502 and [n for n, _t in seen] == [1000, 2000, 3000]
    assert all(total == replayed for _n, total in seen)  # every record is replayed
    seen.clear()
    with Broker.open(d, progress=lambda n, total: seen.append((n, total)), **FAST) as b:
        assert b.recovery_report.index == "used" and b.recovery_report.replayed_records == 0
    assert seen == []  # nothing to replay after a clean close
    code = ("import os, sys\nfrom mqstore.engine import Broker, Message\n"
            "b = Broker.open(sys.argv[1], checkpoint_records=0, expiry_scan_ms=0)\n"
            "with b.session() as s:\n"
            "    s.send_many('q', [Message(b'y') for _ in range(2100)])\n"
            "os.kill(os.getpid(), 9)\n")
    subprocess.run([sys.executable, "-c", code, d], timeout=120,
                   env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)
    with Broker.open(d, progress=lambda n, total: seen.append((n, total)), **FAST) as b:
        assert b.recovery_report.index == "used"
        assert b.recovery_report.replayed_records == 2100
    assert seen == [(1000, 2100), (2000, 2100)]  # the tail after the index, not the journal
