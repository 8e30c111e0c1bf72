"""A workload driver and checker for journal crash tests.

``Model`` remembers what was appended, what was reported durable and what was reported dead;
``check`` asserts the recovery contract on a reopened journal: LSNs strictly increasing, no
record that was not appended (or with other bytes), every live record up to the newest recovered
or durable LSN present (a prefix), so every record reported durable is present.
"""

from __future__ import annotations

import random
import subprocess
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from mqstore.journal import Journal, JournalOptions, Location, SimulatedFileSystem, Ticket

OPTS = JournalOptions(segment_size=4096, max_record_size=1024)


@dataclass
class Model:
    payloads: Dict[int, object] = field(default_factory=dict)
    locations: Dict[int, Location] = field(default_factory=dict)
    dead: Set[int] = field(default_factory=set)
    durable: int = 0
    tickets: List[Ticket] = field(default_factory=list)
    counter: int = 0

    def refresh_durable(self) -> int:
        """Raise ``durable`` to the newest completed, successful ticket."""
        for t in reversed(self.tickets):
            if t.done():
                try:
                    t.wait(0)
                except Exception:
                    continue
                self.durable = max(self.durable, t.lsn)
                break
        return self.durable

    def next_payload(self, rng: random.Random) -> object:
        self.counter += 1
        return {"n": self.counter, "pad": "x" * rng.randrange(0, 300)}

    @classmethod
    def recovered(cls, j: Journal, before: "Model") -> "Model":
        """The model after a recovery: what the journal now holds is the appended history."""
        m = cls(counter=before.counter)
        for rec in j.records():
            m.payloads[rec.lsn] = before.payloads[rec.lsn]
            m.locations[rec.lsn] = rec.location
            m.durable = rec.lsn  # recovery makes everything it shows durable
        m.dead = before.dead & set(m.payloads)
        return m


def check(j: Journal, model: Model, durable: int) -> List[int]:
    """Assert the recovery contract; return the recovered LSNs."""
    lsns: List[int] = []
    for rec in j.records():
        assert not lsns or rec.lsn > lsns[-1], "LSNs must strictly increase"
        assert rec.lsn in model.payloads, f"record {rec.lsn} was never appended"
        assert rec.payload == model.payloads[rec.lsn], f"record {rec.lsn} has other bytes"
        lsns.append(rec.lsn)
    top = max([durable] + lsns[-1:])
    present = set(lsns)
    missing = [n for n in range(1, top + 1)
               if n in model.payloads and n not in model.dead and n not in present]
    assert not missing, f"live records lost: {missing[:10]} (durable up to {durable})"
    return lsns


def append_one(j: Journal, model: Model, rng: random.Random) -> Ticket:
    p = model.next_payload(rng)
    t = j.append(1, p)
    model.payloads[t.lsn] = p
    model.locations[t.lsn] = t.location
    model.tickets.append(t)
    return t


def step(j: Journal, model: Model, rng: random.Random, compaction: bool = True) -> None:
    """One random operation: append, batch append, report dead records, or compact."""
    r = rng.random()
    if r < 0.70:
        t = append_one(j, model, rng)
        if rng.random() < 0.3:
            t.wait(10)
    elif r < 0.82:
        items = [(2, model.next_payload(rng)) for _ in range(rng.randrange(2, 8))]
        t = j.append_many(items)
        first = t.lsn - len(items) + 1
        for i, (_k, p) in enumerate(items):
            model.payloads[first + i] = p
            model.locations[first + i] = t.locations[i]
        model.tickets.append(t)
        if rng.random() < 0.5:
            t.wait(10)
    elif r < 0.95 or not compaction:
        model.refresh_durable()
        live = [n for n in model.locations if n not in model.dead and n <= model.durable]
        victims = rng.sample(live, min(len(live), rng.randrange(1, 30)))
        j.mark_dead([model.locations[v] for v in victims])
        model.dead.update(victims)
    else:
        j.wait_durable(10)
        report = j.compact(force=True)
        by_old = report.relocations
        model.locations = {n: by_old.get(loc, loc) for n, loc in model.locations.items()}


def crash_choices(fs: SimulatedFileSystem, rng: random.Random, samples: int
                  ) -> List[Tuple[int, Optional[str]]]:
    """(keep, tear) pairs to sample crash states at this moment: none kept, all kept, random."""
    n = fs.unsynced_count()
    choices: List[Tuple[int, Optional[str]]] = [(0, None), (n, None)]
    for _ in range(samples):
        choices.append((rng.randrange(0, n + 1), rng.choice([None, "sector", "garbage"])))
    return choices


def kill_after_lines(child: "subprocess.Popen[bytes]", lines: int) -> List[str]:
    """SIGKILL ``child`` once it has printed ``lines`` more lines (a state, not a time: on a
    loaded machine a child may do nothing for a second, and a kill timed by the clock would
    then find it idle), or when it ends first; returns every line it printed, those read after
    the kill included."""
    import signal
    assert child.stdout is not None
    seen: List[str] = []
    while len(seen) < lines:
        line = child.stdout.readline()
        if not line:
            break  # it ended by itself
        seen.append(line.decode())
    if child.poll() is None:
        child.send_signal(signal.SIGKILL)
    seen += child.stdout.read().decode().splitlines(keepends=True)
    child.wait()
    return [line.rstrip("\n") for line in seen]
