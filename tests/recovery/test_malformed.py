"""A CRC-valid record whose payload does not fit its kind stops opening with a typed error that
names the segment file and offset, and changes nothing on disk."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Dict

import pytest

from mqstore.engine import Broker, Message, QueueConfig, RoutingType
from mqstore.journal import CorruptJournalError, Journal, JournalOptions, MqStoreError
from mqstore.recovery import JOURNAL_DIR, MalformedRecordError, RecordKind

BAD = [
    (RecordKind.MESSAGE, {"q": [1], "body": b"x"}),  # its id missing
    (RecordKind.ACK, [1, 2, 3]),                 # not a map
    (RecordKind.QUEUE_ADD, {"id": "x", "name": "q", "addr": "a", "rt": "anycast"}),  # not an int
    (RecordKind.TX, {"tx": 1, "msgs": [7], "acks": []}),  # a message that is not a map
]


def _files(d: str) -> Dict[str, str]:
    out = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.mark.parametrize("kind,payload", BAD, ids=[k.name for k, _ in BAD])
def test_a_malformed_record_stops_opening_and_changes_nothing(tmp_path: Path, kind: RecordKind,
                                                              payload: Any) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d) as b:
        b.create_address("orders", {RoutingType.ANYCAST})
        b.create_queue(QueueConfig("orders", "orders"))
        with b.session() as s:
            s.send("orders", Message(b"kept"))
    jdir = os.path.join(d, JOURNAL_DIR)
    with Journal.open(jdir, JournalOptions()) as j:  # a buggy writer: CRC-valid, wrong shape
        bad = j.append(int(kind), payload)
        bad.wait()
    before = _files(jdir)

    for rebuild in (False, True):  # the checkpoint's tail, and a full replay without index
        if rebuild:
            for name in os.listdir(os.path.join(d, "index")):
                os.unlink(os.path.join(d, "index", name))
        with pytest.raises(MalformedRecordError) as err:
            Broker.open(d)
        e = err.value
        assert isinstance(e, CorruptJournalError) and isinstance(e, MqStoreError)
        assert (e.offset, e.lsn, e.kind) == (bad.location.offset, bad.lsn, int(kind))
        assert os.path.basename(e.path) in before and e.path.startswith(jdir)
        assert e.path in str(e) and str(bad.location.offset) in str(e)
        assert _files(jdir) == before  # nothing stored was changed by the failed open

    with Journal.open(jdir, JournalOptions(read_only=True)) as j:  # the lock was released
        assert [r.payload for r in j.records()][-1] == payload
