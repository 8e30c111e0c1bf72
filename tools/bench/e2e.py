"""``mqstore bench e2e``: the broker end to end (send -> receive -> ack of durable 1 KiB
messages on a durable queue) beside embedded peers, every figure in one run on the same disk.

The disk's fsync rate swings 10x within minutes (REFERENCE.md), so every figure is also given as
a ratio: to its peer in the same workload, and to a raw fdatasync probe taken right before the
workloads. Workloads:

- ``one``: one thread, one message at a time (send, receive, ack: each returns once durable);
- ``batch``: one thread, batches of 100 (``send_many``, ``receive_many``, ``ack_many``), with
  the process's CPU time per message;
- ``async``: 256 asyncio producers and 256 asyncio consumers (each acks what it receives;
  window 100, prefetch 99: ``engine.delivery.prefetch``);
- ``send``: 256 asyncio producers only;
- the journal's own durable appends from 256 asyncio tasks (``bench journal``'s figure), the
  ceiling the ``async`` workload is measured against;
- floors (``tools/bench/floors.py``): ``batch`` through the journal and the API with no broker,
  ``async`` through asyncio with no storage. They bound what any broker could reach in this
  process on this machine, so the targets' rows show how much of a target is reachable.

The compiled install's three default rows (``one``, ``batch``, ``async``) are measured again on
the pure-Python build, in a child process started with ``MQSTORE_PURE=1`` (``mqstore.compiled``)
that runs the same function and prints its figure: the system ``mqstore, pure Python``, shown
beside the compiled ones, with the same ratios and no bound. An install that is pure Python has
no such rows (its default rows are the pure build's).

Peers: sqlite3 in WAL mode with ``synchronous=FULL`` (a row inserted, then selected and deleted,
one operation per transaction or 100), always; persist-queue's ``SQLiteQueue`` (put, get) when
the ``persist-queue`` package is installed (``pip install 'mqstore[bench]'``); RabbitMQ, on a
private server the bench starts and stops, when ``rabbitmq-server`` and pika are installed
(``tools/bench/rabbitmq.py``: confirm each one at a time, a confirm window of 100 with a consumer
of prefetch 100 beside ``batch`` and ``async``, and alone beside ``send``). A peer that is not
installed is named as missing, with what it lacks, not measured.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from typing import Callable, List, Optional

from mqstore.compiled import build
from mqstore.engine import Broker, Message, QueueConfig
from mqstore.engine.aio import AsyncSession

from .floors import FLOOR_ASYNC, FLOOR_BATCH, async_floor, batch_floor, finish
from .proctree import Timed

BODY = os.urandom(1024)
BATCH = 100
TASKS = 256


@dataclass(frozen=True)
class E2EFigure:
    """One system in one workload: messages through (sent, received and acked; sent only for
    ``send``), seconds, and CPU seconds of this process (user + system; ``proctree.Timed``)."""

    workload: str  # one, batch, async, send, journal
    system: str
    messages: int
    seconds: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def cpu_us(self) -> float:
        """CPU microseconds per message."""
        return self.cpu_s / self.messages * 1e6 if self.messages else 0.0


@dataclass(frozen=True)
class Variant:
    """How the broker is set up: ``block``: acks wait for their fsync
    (``block_on_acknowledge``); ``persist``: deliveries are journaled before hand-out
    (``persist_delivery_count_before_delivery``)."""

    name: str
    block: bool = False
    persist: bool = False


DEFAULT = Variant("mqstore")
VARIANTS = (DEFAULT, Variant("mqstore, acks wait", block=True),
            Variant("mqstore, acks wait + counted deliveries", block=True, persist=True))
"""The broker as it is by default (Artemis's defaults: blockOnAcknowledge and
persist-delivery-count-before-delivery off); with acks that wait for their fsync; and with
that and every delivery journaled before hand-out (mqstore's defaults before issue 38)."""


PURE = Variant("mqstore, pure Python")
"""The default settings on the pure-Python build (``in_pure_build``)."""


def _broker(directory: str, variant: Variant = DEFAULT) -> Broker:
    broker = Broker.open(directory, persist_delivery_count_before_delivery=variant.persist)
    broker.create_address("bench")
    broker.create_queue(QueueConfig("bench", "bench"))
    return broker


def mqstore_one(directory: str, n: int, variant: Variant = DEFAULT) -> E2EFigure:
    """Send, receive and ack ``n`` messages one at a time from one thread."""
    with _broker(directory, variant) as broker:
        session = broker.session(block_on_acknowledge=variant.block)
        consumer = session.create_consumer("bench")
        with Timed() as c:
            for _ in range(n):
                session.send("bench", Message(BODY))
                d = consumer.receive(5.0)
                if d is None:
                    raise RuntimeError("a sent message was not delivered within 5 s")
                d.ack()
    return E2EFigure("one", variant.name, n, c.wall, c.cpu)


def mqstore_batch(directory: str, n: int, variant: Variant = DEFAULT) -> E2EFigure:
    """``n`` messages in batches of 100: ``send_many``, ``receive_many``, ``ack_many``."""
    with _broker(directory, variant) as broker:
        session = broker.session(block_on_acknowledge=variant.block)
        consumer = session.create_consumer("bench", window=BATCH)
        batch = [Message(BODY) for _ in range(BATCH)]
        done = 0
        with Timed() as c:
            while done < n:
                session.send_many("bench", batch)
                got: List = []
                while len(got) < BATCH:
                    more = consumer.receive_many(BATCH - len(got), 5.0)
                    if not more:
                        raise RuntimeError("a sent message was not delivered within 5 s")
                    got += more
                session.ack_many(got)
                done += BATCH
    return E2EFigure("batch", variant.name, done, c.wall, c.cpu)


def mqstore_async(directory: str, n: int, consumers: bool, variant: Variant = DEFAULT
                  ) -> E2EFigure:
    """256 asyncio producers send ``n`` messages in all; with ``consumers``, 256 asyncio
    consumers receive and ack them (the figure counts acked messages), else sends only."""
    per_task = max(1, n // TASKS)
    total = per_task * TASKS
    with _broker(directory, variant) as broker:
        async def produce(s: AsyncSession) -> None:
            for _ in range(per_task):
                await s.send("bench", Message(BODY))

        async def consume(s: AsyncSession, acked: List[int], done: asyncio.Event) -> None:
            # window 100 with a prefetch within it, as RabbitMQ's consumers' prefetch 100
            consumer = s.create_consumer("bench", window=BATCH, prefetch=BATCH - 1)
            while True:
                d = await consumer.receive(0.5)
                if d is not None:
                    await consumer.ack(d)
                    acked[0] += 1
                    if acked[0] == total:
                        done.set()

        async def main() -> None:
            sessions = [AsyncSession(broker.session()) for _ in range(TASKS)]
            done, acked = asyncio.Event(), [0]
            receivers = [asyncio.ensure_future(consume(AsyncSession(broker.session(
                block_on_acknowledge=variant.block)), acked, done))
                for _ in range(TASKS if consumers else 0)]
            await asyncio.gather(*[produce(s) for s in sessions])
            if consumers:  # the clock stops at the last ack, not at a receive's timeout
                await finish(done, receivers)

        with Timed() as c:
            asyncio.run(main())
    return E2EFigure("async" if consumers else "send", variant.name, total, c.wall, c.cpu)


WORKLOADS = {"one": mqstore_one, "batch": mqstore_batch,
             "async": lambda d, n: mqstore_async(d, n, True)}


def in_pure_build(workload: str, directory: str, n: int) -> E2EFigure:
    """``workload`` (a key of ``WORKLOADS``) with the default settings, in a child process
    running the pure-Python build of this install (``MQSTORE_PURE=1``); its figure as
    ``PURE``'s. Raises ``subprocess.CalledProcessError`` when the child fails."""
    out = subprocess.run([sys.executable, "-m", "mqstore.tools.bench.e2e", workload, directory,
                          str(n)], env={**os.environ, "MQSTORE_PURE": "1"}, check=True,
                         capture_output=True, text=True)
    figure = E2EFigure(**json.loads(out.stdout.splitlines()[-1]))
    assert figure.system == DEFAULT.name, figure  # the child ran the default settings
    return E2EFigure(figure.workload, PURE.name, figure.messages, figure.seconds, figure.cpu_s)


def journal_ceiling(directory: str, seconds: float) -> E2EFigure:
    """The journal's own durable appends from 256 asyncio tasks (1 KiB records)."""
    from .journal import journal_tasks
    with Timed() as c:
        f = journal_tasks(directory, TASKS, seconds)
    return E2EFigure("journal", "journal", round(f.rate * seconds), seconds, c.cpu)


def floor_batch(directory: str, n: int) -> E2EFigure:
    """``floors.batch_floor``: the batch workload's journal and API part alone."""
    done, t = batch_floor(directory, n, BODY, BATCH)
    return E2EFigure("batch", FLOOR_BATCH, done, t.wall, t.cpu)


def floor_async(n: int) -> E2EFigure:
    """``floors.async_floor``: the async workload's asyncio part alone."""
    done, t = async_floor(n, BODY, TASKS)
    return E2EFigure("async", FLOOR_ASYNC, done, t.wall, t.cpu)


def _sqlite(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS q (id INTEGER PRIMARY KEY, body BLOB)")
    return db


def sqlite_queue(directory: str, n: int, per_txn: int) -> E2EFigure:
    """sqlite3 (WAL, synchronous=FULL) as a queue: ``per_txn`` rows inserted in one
    transaction, then the oldest ``per_txn`` selected and deleted in another."""
    db = _sqlite(os.path.join(directory, "queue.db"))
    done = 0
    with Timed() as c:
        while done < n:
            db.execute("BEGIN")
            db.executemany("INSERT INTO q (body) VALUES (?)", [(BODY,)] * per_txn)
            db.execute("COMMIT")
            db.execute("BEGIN")
            rows = db.execute("SELECT id, body FROM q ORDER BY id LIMIT ?",
                              (per_txn,)).fetchall()
            db.executemany("DELETE FROM q WHERE id = ?", [(r[0],) for r in rows])
            db.execute("COMMIT")
            done += len(rows)
    db.close()
    workload = "one" if per_txn == 1 else "batch"
    return E2EFigure(workload, f"sqlite3 {per_txn}/txn", done, c.wall, c.cpu)


def persist_queue_one(directory: str, n: int) -> Optional[E2EFigure]:
    """persist-queue's ``SQLiteQueue``: put then get, one at a time (``None``: not
    installed)."""
    try:
        from persistqueue import SQLiteQueue
    except ImportError:
        return None
    q = SQLiteQueue(os.path.join(directory, "pq"), auto_commit=True)
    with Timed() as c:
        for _ in range(n):
            q.put(BODY)
            q.get()
    return E2EFigure("one", "persist-queue", n, c.wall, c.cpu)


def rabbitmq(directory: str, one: int, messages: int, missing: List[str]) -> List[E2EFigure]:
    """RabbitMQ's figures on a private server started in ``directory`` and stopped after:
    ``one`` messages confirmed each, ``messages`` through a confirm window of 100 with a
    consumer (the ``async`` and ``batch`` peer) and without (the ``send`` peer). Appends to
    ``missing`` and returns [] when it is not installed."""
    from .rabbitmq import RabbitServer, missing_reason, rabbit_one, rabbit_window
    why = missing_reason()
    if why is not None:
        missing.append(f"RabbitMQ ({why}: apt-get install rabbitmq-server; "
                       f"pip install 'mqstore[bench]')")
        return []
    with RabbitServer(directory) as port:
        n1, t1 = rabbit_one(port, one, BODY)
        nw, tw = rabbit_window(port, messages, BODY, consume=True)
        ns, ts = rabbit_window(port, messages, BODY, consume=False)
    return [E2EFigure("one", "RabbitMQ confirm each", n1, t1.wall, t1.cpu),
            E2EFigure("async", "RabbitMQ window 100", nw, tw.wall, tw.cpu),
            E2EFigure("send", "RabbitMQ window 100", ns, ts.wall, ts.cpu)]


@dataclass(frozen=True)
class E2EResult:
    """Every figure of one run, and the fdatasync probe (ops/s) taken before them."""

    figures: List[E2EFigure]
    probe_ops: float
    missing: List[str]  # peers not installed, each "name (what to install)"

    def get(self, workload: str, system: str) -> Optional[E2EFigure]:
        return next((f for f in self.figures if f.workload == workload
                     and f.system == system), None)


def run(directory: Optional[str], messages: int, progress: Callable[[str], None]
        ) -> E2EResult:
    """Every workload, each on a fresh store or database in a temporary directory under
    ``directory`` (removed after). ``messages``: the batch and asyncio workloads' count; the
    one-at-a-time ones take a tenth of it (each costs fsyncs one after another)."""
    from .journal import fdatasync_probe
    root = tempfile.mkdtemp(prefix="mqstore-e2e-", dir=directory)
    one = max(100, messages // 10)
    def each(what: str, fn: Callable[[str, Variant], E2EFigure]) -> List:
        return [(f"{v.name}, {what}", lambda d, v=v: fn(d, v)) for v in VARIANTS]

    steps: List = [
        *each("one at a time", lambda d, v: mqstore_one(d, one, v)),
        ("persist-queue, one at a time", lambda d: persist_queue_one(d, one)),
        ("sqlite3, one op per transaction", lambda d: sqlite_queue(d, one, 1)),
        *each("batches of 100", lambda d, v: mqstore_batch(d, messages, v)),
        ("sqlite3, 100 ops per transaction", lambda d: sqlite_queue(d, messages, BATCH)),
        ("the batch floor (journal + API, no broker)", lambda d: floor_batch(d, messages)),
        *each("256 producers + 256 consumers", lambda d, v: mqstore_async(d, messages, True, v)),
        ("mqstore, 256 producers", lambda d: mqstore_async(d, messages, False)),
        ("the async floor (asyncio, no storage)", lambda d: floor_async(messages)),
        ("the journal, 256 asyncio appenders", lambda d: journal_ceiling(d, 3.0)),
    ]
    if build() == "compiled":  # the same three on the pure build, beside them
        steps += [(f"{PURE.name}, {what}", lambda d, w=w, k=k: in_pure_build(w, d, k))
                  for what, w, k in (("one at a time", "one", one),
                                     ("batches of 100", "batch", messages),
                                     ("256 producers + 256 consumers", "async", messages))]
    try:
        probe = fdatasync_probe(root)
        figures, missing = [], []
        for i, (name, step) in enumerate(steps):
            progress(f"{name}...")
            where = os.path.join(root, str(i))
            os.makedirs(where)
            got = step(where)
            shutil.rmtree(where, ignore_errors=True)
            if got is None:
                missing.append(f"{name.split(',')[0]} (pip install 'mqstore[bench]')")
            else:
                figures.append(got)
        progress("RabbitMQ...")
        figures += rabbitmq(os.path.join(root, "rabbitmq"), one, messages, missing)
        return E2EResult(figures, probe, missing)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class Target:
    """A ratio of two figures of the same run, and the bound issue 16 sets for it (``None``:
    shown, no bound); ``at_most``: the bound is an upper one."""

    name: str
    value: Optional[float]  # None: a figure it needs was not measured (a peer missing)
    bound: Optional[float]
    at_most: bool = False

    @property
    def verdict(self) -> str:
        if self.value is None:
            return "not measured"
        if self.bound is None:
            return ""
        ok = self.value <= self.bound if self.at_most else self.value >= self.bound
        return "ok" if ok else ("ABOVE" if self.at_most else "BELOW")


def targets(result: E2EResult) -> List[Target]:
    """The run's ratios against issue 38's targets, which hold for the default settings
    (``DEFAULT``); the other variants' and the pure build's (``PURE``) same ratios are shown
    without a bound, and the ratios with no target for the default one only."""
    def ratio(a: Optional[E2EFigure], b: Optional[E2EFigure]) -> Optional[float]:
        return a.rate / b.rate if a is not None and b is not None and b.rate else None

    def cpu_ratio(a: Optional[E2EFigure], b: Optional[E2EFigure]) -> Optional[float]:
        return a.cpu_us / b.cpu_us if a is not None and b is not None and b.cpu_us else None

    get = result.get
    floor_b, floor_a = get("batch", FLOOR_BATCH), get("async", FLOOR_ASYNC)
    out = []
    for v in (*VARIANTS, PURE):
        me = v.name
        one, batch, both = get("one", me), get("batch", me), get("async", me)
        goals = [  # (name, value, the default settings' bound, at most)
            (f"one, {me} / persist-queue", ratio(one, get("one", "persist-queue")), 1.2, False),
            (f"batch, {me} / sqlite3 100/txn", ratio(batch, get("batch", "sqlite3 100/txn")),
             0.5, False),
            (f"batch, {me}: CPU µs/msg / the batch floor's", cpu_ratio(batch, floor_b), 2.0,
             True),
            (f"async, {me} / RabbitMQ window 100",
             ratio(both, get("async", "RabbitMQ window 100")), 1.0, False),
            (f"async, {me}: CPU µs/msg / the async floor's", cpu_ratio(both, floor_a), 4.0,
             True)]
        # the other settings: the same ratios, no bound (so what each setting costs is seen)
        out += [Target(name, value, bound if v is DEFAULT else None, at_most)
                for name, value, bound, at_most in goals]
        if v is DEFAULT:
            out += [Target(f"one, {me} / sqlite3 1/txn",
                           ratio(one, get("one", "sqlite3 1/txn")), None),
                    Target(f"one, {me} / RabbitMQ confirm each",
                           ratio(one, get("one", "RabbitMQ confirm each")), None),
                    Target(f"batch, {me} / RabbitMQ window 100",
                           ratio(batch, get("async", "RabbitMQ window 100")), None),
                    Target(f"async, {me} / journal", ratio(both, get("journal", "journal")),
                           None)]
    out += [Target("batch, floor / sqlite3 100/txn (the most any broker could reach here)",
                   ratio(floor_b, get("batch", "sqlite3 100/txn")), None),
            Target("batch, floor: CPU µs/msg (the least)",
                   None if floor_b is None else floor_b.cpu_us, None),
            Target("async, floor / RabbitMQ window 100 (the most any broker could reach here)",
                   ratio(floor_a, get("async", "RabbitMQ window 100")), None),
            Target("async, floor / journal", ratio(floor_a, get("journal", "journal")), None)]
    out += [Target("send, mqstore / RabbitMQ window 100",
                   ratio(get("send", "mqstore"), get("send", "RabbitMQ window 100")), None),
            Target("send, mqstore / journal",
                   ratio(get("send", "mqstore"), get("journal", "journal")), None)]
    return out


if __name__ == "__main__":  # in_pure_build's child: WORKLOAD DIRECTORY MESSAGES -> one JSON line
    name, where, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    print(json.dumps(asdict(WORKLOADS[name](where, count))))
