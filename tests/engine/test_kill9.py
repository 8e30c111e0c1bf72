"""kill -9 of a producing and consuming broker process at random moments, 50 cycles: each
after a random number of the operations it reports (a state, whatever the machine's load).

Every other cycle the child runs with the smallest RAM budget, so its queue pages (a head of
two references, the rest read back from the index), and its address pages after three messages
(PAGE: paged messages and DEPAGE records at the kill); every tenth reopen finds the index deleted
and rebuilds it; the index otherwise lags the journal by up to 500 records at the kill.

Each cycle reopens the same store in a child that produces and consumes concurrently; the parent
kills it with SIGKILL, reopens the store and checks: everything reported durably sent is present
or was acked; no acked message returns; nothing is duplicated; messages delivered before come
back with their delivery count (flagged redelivered).

Every third cycle the child acks without waiting (``block_on_acknowledge=False``): such an ack
counts as done only once a send that started after it returned (journal order makes it durable
by then); before that, a kill may bring the message back, flagged redelivered, never lose it.
Every fourth cycle the child does not journal deliveries of durable messages before hand-out
(``persist_delivery_count_before_delivery=False``): a kill may then bring a message back with
its delivery count one below the last one the child saw, never lower.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set

from mqstore.engine import Broker
from mqstore.journal import JournalOptions
from tests.engine.crashcheck import check_store
from tests.journal.crashkit import kill_after_lines

CYCLES = 50
ROOT = str(Path(__file__).resolve().parents[2])


def test_kill9_broker(tmp_path: Path) -> None:
    d = str(tmp_path / "store")
    rng = random.Random(3)
    sent: List[int] = []
    acked: Set[int] = set()
    maybe: Set[int] = set()
    delivered: Dict[int, int] = {}
    start = 0
    env = dict(os.environ, PYTHONPATH=ROOT)
    recovered_torn = paged_reopens = covered_acks = 0
    for cycle in range(CYCLES):
        budget = 4096 if cycle % 2 else 64 << 20
        block = cycle % 3 != 2
        persist = cycle % 4 != 3  # else a delivery's count may come back one lower
        child = subprocess.Popen([sys.executable, "-m", "tests.engine.kill_child", d,
                                  str(start), str(cycle), str(budget), "1" if block else "0",
                                  "1" if persist else "0"],
                                 stdout=subprocess.PIPE, cwd=ROOT, env=env)
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        out = kill_after_lines(child, rng.randint(5, 400))  # after that many operations
        acking: Set[int] = set()  # acks asked for in this cycle
        unconfirmed: Set[int] = set()  # acks returned without a wait
        covering: Dict[int, Set[int]] = {}  # a send started -> the acks its wait covers
        for line in out:
            parts = line.split()
            if len(parts) < 2:
                continue
            k = int(parts[1])
            start = max(start, k + 1)
            if parts[0] == "s":
                maybe.add(k)
                covering[k] = set(unconfirmed)
            elif parts[0] == "S":
                sent.append(k)
                if k not in acking:  # (a consumer may take and ack it before send returns:
                    maybe.discard(k)  # the ack's outcome is still open)
                for j in covering.pop(k, set()) & unconfirmed:
                    covered_acks += 1
                    acked.add(j)
                    maybe.discard(j)
                    unconfirmed.discard(j)
            elif parts[0] == "N":
                unconfirmed.add(k)  # stays "maybe" until a later send covers it
            elif parts[0] == "D":
                delivered[k] = max(delivered.get(k, 0), int(parts[2]) - (not persist))
            elif parts[0] == "a":
                maybe.add(k)
                acking.add(k)
            elif parts[0] == "A":
                acked.add(k)
                maybe.discard(k)
        if cycle % 10 == 9:
            shutil.rmtree(os.path.join(d, "index"))
        broker = Broker.open(d, journal_options=JournalOptions(segment_size=128 * 1024),
                             memory_budget=budget)
        try:
            assert broker.recovery_report.rebuilt == (cycle % 10 == 9)
            recovered_torn += broker.recovery_report.journal.torn_bytes
            present = check_store(broker, "q", sent, acked, delivered, maybe)
            paged_reopens += broker.address_info("a").paging
        finally:
            broker.close()
        # what is settled now: present ones are durable, absent unacked "maybe" ones are gone
        for k in list(maybe):
            if k in present:
                if k not in sent:
                    sent.append(k)
            elif k not in acked:
                acked.add(k) if k in sent else None
            maybe.discard(k)
        sent.sort()
    assert len(sent) > 200 and len(acked) > 100  # the children really worked
    assert covered_acks > 10  # the non-blocking cycles' acks were checked, not just allowed
    assert paged_reopens > 0  # some kills hit the address while it paged
