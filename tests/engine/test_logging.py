"""What mqstore logs, on one stdlib logger per layer (``mqstore.journal``, ``mqstore.recovery``,
``mqstore.engine``): index rebuilds, dead-letter moves and drops, an address that starts
dropping. A user who configures ``logging`` sees what was dropped or repaired."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import List

import pytest

from engine import Broker, Message, QueueConfig
from engine.settings import AddressFullPolicy, AddressSettings

FAST = dict(expiry_scan_ms=0)


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
