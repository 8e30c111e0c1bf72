"""Artemis exclusive queues (seed 004 §4.11) against a small model, with crash-and-reopen.

Queue ``ex`` is exclusive: of its consumers, in the order they attached, only the first open
one is given messages; the others get nothing until it closes. The model keeps the ready list,
the consumers in attach order and what each holds; closing a consumer returns what it holds to
the head in the reverse order of consumption (seed 000), and the next consumer takes over. A
crash keeps the durable messages (held ones come back) in send order, and the consumers are
attached again in a fresh order.
"""

from __future__ import annotations

import random
from typing import Dict, List, Tuple

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mqstore.engine import Broker, Message, QueueConfig
from mqstore.journal import JournalOptions, SimulatedFileSystem
from mqstore.recovery import MemoryIndex


OPTS = JournalOptions(segment_size=4096, max_record_size=2000)


class ExclusiveMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.fs, self.index = SimulatedFileSystem(), MemoryIndex()
        self.broker = self._open()
        self.broker.create_address("a")
        self.broker.create_queue(QueueConfig("ex", "a", exclusive=True))
        self.ready: List[Tuple[int, bytes, bool]] = []  # (seq, body, durable)
        self.held: Dict[int, List[Tuple[Tuple[int, bytes, bool], object]]] = {}
        self.seq = 0
        self._attach()

    def _open(self) -> Broker:
        return Broker.open("/s", fs=self.fs, index=self.index, journal_options=OPTS,
                           checkpoint_records=25,
                           persist_delivery_count_before_delivery=True)

    def _attach(self) -> None:
        self.session = self.broker.session(block_on_acknowledge=True)
        self.consumers = [self.session.create_consumer("ex", window=100) for _ in range(3)]
        self.held = {id(c): [] for c in self.consumers}

    @rule(n=st.integers(1, 3), durable=st.booleans())
    def send(self, n: int, durable: bool) -> None:
        msgs = []
        for _ in range(n):
            self.seq += 1
            body = b"%d" % self.seq
            msgs.append(Message(body, durable=durable))
            self.ready.append((self.seq, body, durable))
        self.session.send_many("a", msgs)

    @rule(i=st.integers(0, 2))
    def receive(self, i: int) -> None:
        c = self.consumers[i % len(self.consumers)]
        d = c.receive_nowait()
        if c is not self.consumers[0] or not self.ready:
            assert d is None, "only the first consumer receives"
            return
        item = self.ready.pop(0)
        assert d is not None and d.message.body == item[1]
        self.held[id(c)].append((item, d))

    @rule(data=st.data(), release=st.booleans())
    def settle(self, data: st.DataObject, release: bool) -> None:
        holding = [(c, h) for c in self.consumers for h in self.held[id(c)]]
        if not holding:
            return
        c, h = data.draw(st.sampled_from(holding))
        self.held[id(c)].remove(h)
        if release:
            h[1].release()  # type: ignore[attr-defined]
            self.ready.insert(0, h[0])
        else:
            h[1].ack()  # type: ignore[attr-defined]

    @rule(i=st.integers(0, 2))
    def close_and_replace(self, i: int) -> None:
        c = self.consumers[i % len(self.consumers)]
        if c is self.consumers[0]:
            event("the exclusive consumer closed")
        # back to the head in the order they were consumed (seed 000)
        self.ready = [item for item, _d in self.held.pop(id(c))] + self.ready
        c.close()
        self.consumers.remove(c)
        new = self.session.create_consumer("ex", window=100)
        self.consumers.append(new)
        self.held[id(new)] = []

    @rule(keep_all=st.booleans(), seed=st.integers(0, 2**16))
    def crash_and_reopen(self, keep_all: bool, seed: int) -> None:
        crashed = self.fs.crash(keep=self.fs.unsynced_count() if keep_all else 0)
        index = self.index.crash(random.Random(seed))
        back = [item for c in self.consumers for item, _d in self.held[id(c)]]
        self.ready = sorted((x for x in self.ready + back if x[2]), key=lambda x: x[0])
        self.broker.close()
        self.fs, self.index = crashed, index
        self.broker = self._open()
        self._attach()

    @invariant()
    def counts_match(self) -> None:
        info = self.broker.queue_info("ex")
        held = sum(len(v) for v in self.held.values())
        assert (info.message_count, info.delivering_count, info.consumer_count) == \
            (len(self.ready) + held, held, len(self.consumers))
        with self.broker.session(block_on_acknowledge=True) as s:
            seen = [m.message.body for m in s.create_browser("ex")]
        assert seen == [x[1] for x in self.ready]

    def teardown(self) -> None:
        self.broker.close()  # its threads stop (every example opens one)


ExclusiveMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestExclusiveModel = ExclusiveMachine.TestCase
