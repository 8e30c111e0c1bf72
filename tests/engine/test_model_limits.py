"""Qpid queue size limits against a small reference model, with crash-and-reopen (hypothesis).

Seed 002 "Controlling queue size": multicast address ``l`` holds a queue of each policy that
refuses or removes (``lr`` reject by count, ``lb`` reject by bytes, ``lg`` ring, ``ls``
ring_strict), address ``f`` a flow_to_disk queue (``lf``). The model predicts, per send, whether
it is refused (whole, on every queue) and which messages the rings remove (the oldest by queue
order, in delivery too for ``lg``); a removed delivery's ack or release does nothing. A crash
keeps what was reported durable: durable messages not removed nor acked, in order; held
deliveries come back. The main broker model (``test_model_based``) runs the same queues among
all its other rules; this one reaches the boundaries on most runs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Dict, List, Optional, Union

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
import pytest

from mqstore.engine import Broker, Message, PolicyType, QueueConfig, QueueFullError, RoutingType
from mqstore.journal import JournalOptions, SimulatedFileSystem
from mqstore.recovery import MemoryIndex

LIMITS: Dict[str, Dict[str, object]] = {
    "lr": dict(max_count=3, policy_type=PolicyType.REJECT),
    "lb": dict(max_size=9, policy_type=PolicyType.REJECT),
    "lg": dict(max_count=3, max_size=12, policy_type=PolicyType.RING),
    "ls": dict(max_count=2, policy_type=PolicyType.RING_STRICT),
    "lf": dict(max_count=2, policy_type=PolicyType.FLOW_TO_DISK)}
OPTS = JournalOptions(segment_size=2048, max_record_size=1900)


@dataclass
class Item:
    seq: int
    body: bytes
    durable: bool
    dc: int = 0


@dataclass
class Held:
    queue: str
    item: Item
    delivery: object
    gone: bool = False  # a ring removed it while in delivery


Candidate = Union[Item, Held]


class LimitsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.fs, self.index = SimulatedFileSystem(), MemoryIndex()
        self.broker = self._open()
        self.broker.create_address("l", {RoutingType.MULTICAST})
        self.broker.create_address("f", {RoutingType.MULTICAST})
        for q, limits in LIMITS.items():
            self.broker.create_queue(QueueConfig(q, "f" if q == "lf" else "l",
                                                 RoutingType.MULTICAST, **limits))  # type: ignore
        self.queues: Dict[str, List[Item]] = {q: [] for q in LIMITS}
        self.held: List[Held] = []
        self.seq = 0
        self._sessions()

    def _open(self) -> Broker:
        return Broker.open("/s", fs=self.fs, index=self.index, journal_options=OPTS,
                           checkpoint_records=30, memory_budget=4096,
                           persist_delivery_count_before_delivery=True)

    def _sessions(self) -> None:
        self.session = self.broker.session(block_on_acknowledge=True)
        self.consumers = {q: self.session.create_consumer(q, window=1000) for q in LIMITS}

    def _room(self, q: str, size: int) -> Optional[List[Candidate]]:
        limits = LIMITS[q]
        held = [h for h in self.held if h.queue == q and not h.gone]
        n = len(self.queues[q]) + len(held)
        b = sum(len(i.body) for i in self.queues[q]) + sum(len(h.item.body) for h in held)

        def over(n: int, b: int) -> bool:
            return n > int(limits.get("max_count", -1)) > 0 or \
                b > int(limits.get("max_size", -1)) > 0
        policy = limits["policy_type"]
        if not over(n + 1, b + size) or policy == PolicyType.FLOW_TO_DISK:
            return []
        if policy == PolicyType.REJECT or size > int(limits.get("max_size", -1)) > 0:
            return None
        oldest = sorted([(i.seq, i) for i in self.queues[q]] +
                        [(h.item.seq, h) for h in held], key=lambda x: x[0])
        out: List[Candidate] = []
        while over(n + 1, b + size):
            if not oldest:
                return None
            _seq, x = oldest.pop(0)
            if isinstance(x, Held) and policy == PolicyType.RING_STRICT:
                return None
            out.append(x)
            n -= 1
            b -= len(x.item.body if isinstance(x, Held) else x.body)
        return out

    @rule(dest=st.sampled_from(["l", "l::lg", "l::ls", "l::lb", "l::lr", "f"]),
          durable=st.booleans(), extra=st.integers(0, 5), many=st.integers(1, 3))
    def send(self, dest: str, durable: bool, extra: int, many: int) -> None:
        targets = [dest.split("::")[1]] if "::" in dest else \
            (["lf"] if dest == "f" else ["lr", "lb", "lg", "ls"])
        saved = ({q: list(v) for q, v in self.queues.items()}, [h.gone for h in self.held])
        msgs = []
        refused = False
        for k in range(many):  # a send_many is checked whole, in order
            self.seq += 1
            body = b"%d" % self.seq + b"." * ((extra + k) % 6)
            msgs.append(Message(body, durable=durable))
            for q in targets:
                got = self._room(q, len(body))
                if got is None:
                    refused = True
                    break
                for x in got:
                    if isinstance(x, Held):
                        x.gone = True
                    else:
                        self.queues[q].remove(x)
                self.queues[q].append(Item(self.seq, body, durable))
            if refused:
                break
        if refused:
            self.queues = saved[0]
            for h, gone in zip(self.held, saved[1], strict=True):
                h.gone = gone
            with pytest.raises(QueueFullError):
                self.session.send_many(dest, msgs)
            event("refused")
            return
        self.session.send_many(dest, msgs)
        for h in self.held:
            if h.gone:
                event("a ring removed a message in delivery")

    @rule(queue=st.sampled_from(sorted(LIMITS)))
    def receive(self, queue: str) -> None:
        d = self.consumers[queue].receive_nowait()
        if not self.queues[queue]:
            assert d is None
            return
        item = self.queues[queue].pop(0)
        item.dc += 1
        assert d is not None and d.message.body == item.body, (queue, item)
        assert d.delivery_count == item.dc
        self.held.append(Held(queue, item, d))

    @rule(data=st.data(), how=st.sampled_from(["ack", "reject", "release"]))
    def settle(self, data: st.DataObject, how: str) -> None:
        if not self.held:
            return
        h = data.draw(st.sampled_from(self.held))
        getattr(h.delivery, how)()
        self.held.remove(h)
        if how == "release" and not h.gone:
            self.queues[h.queue].insert(0, h.item)
        if h.gone:
            event(f"{how} of a removed delivery")

    def _return_held(self) -> None:
        for h in reversed(self.held):
            if not h.gone:
                self.queues[h.queue].insert(0, h.item)
        self.held = []

    @rule(keep_all=st.booleans(), seed=st.integers(0, 2**16))
    def crash_and_reopen(self, keep_all: bool, seed: int) -> None:
        crashed = self.fs.crash(keep=self.fs.unsynced_count() if keep_all else 0)
        index = self.index.crash(random.Random(seed))
        self.held = [h for h in self.held if h.item.durable]
        self._return_held()
        for q in LIMITS:
            self.queues[q] = sorted((i for i in self.queues[q] if i.durable),
                                    key=lambda i: i.seq)
        self.broker.close()
        self.fs, self.index = crashed, index
        self.broker = self._open()
        self._sessions()

    @rule()
    def clean_reopen(self) -> None:
        self._return_held()
        self.broker.close()
        self.broker = self._open()
        for q in LIMITS:  # a reopen reads them back in send order
            self.queues[q] = sorted((i for i in self.queues[q] if i.durable),
                                    key=lambda i: i.seq)
        self._sessions()

    @invariant()
    def queues_match(self) -> None:
        for q in LIMITS:
            info = self.broker.queue_info(q)
            held = sum(1 for h in self.held if h.queue == q and not h.gone)
            assert (info.message_count, info.delivering_count) == \
                (len(self.queues[q]) + held, held), (q, info)
            seen = [m.message.body for m in self.session.create_browser(q)]
            assert seen == [i.body for i in self.queues[q]], q

    def teardown(self) -> None:
        self.broker.close()


LimitsMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestLimitsModel = LimitsMachine.TestCase
