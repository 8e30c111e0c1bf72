"""Invariants after a crash, shared by the broker's power-loss and kill -9 tests.

Given what a client observed before the crash (messages reported sent durably, messages whose ack
was reported durable, deliveries seen), the reopened store must hold: every durable send that
was not acked; no acked message; no duplicates; queue order = send order; a message delivered
before has a delivery count >= 1 (it comes back flagged redelivered).
"""

from __future__ import annotations

import random
from typing import Dict, Iterable, List, Optional, Set

from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import RuleBasedStateMachine, rule

from mqstore.engine import Broker
from mqstore.journal import JournalOptions, SimulatedFileSystem
from mqstore.recovery import MemoryIndex

MODEL_OPTS = JournalOptions(segment_size=4096, max_record_size=2000)


class SimulatedStore:
    """A store on the simulated file system with an in-memory index, for the hypothesis
    models: opened with small segments (so compaction has work) and a RAM budget, and
    reopened after a simulated power loss that keeps all or none of the unsynced writes and
    keeps the index as a crash leaves it, or loses it (then it is rebuilt from the journal).
    """

    def __init__(self, budget: int, opts: JournalOptions = MODEL_OPTS,
                 persist: bool = True) -> None:
        self.fs, self.index = SimulatedFileSystem(), MemoryIndex()
        self.budget = budget
        self.opts = opts
        self.persist = persist  # persist-delivery-count-before-delivery: the models expect
        # a delivery's count back after a crash (the default, off, is drawn by test_model_based)

    def open(self) -> Broker:
        return Broker.open("/s", fs=self.fs, index=self.index, journal_options=self.opts,
                           checkpoint_records=25, memory_budget=self.budget,
                           persist_delivery_count_before_delivery=self.persist)

    def crash(self, broker: Broker, keep_all: bool, seed: int, lose_index: bool) -> Broker:
        """Power loss under ``broker`` (then let go), and the store opened again."""
        crashed = self.fs.crash(keep=self.fs.unsynced_count() if keep_all else 0)
        index = MemoryIndex() if lose_index else self.index.crash(random.Random(seed))
        broker.close()
        self.fs, self.index = crashed, index
        return self.open()


def model_settings(examples: int, steps: int) -> settings:
    """Hypothesis settings for a store model: no deadline (fsyncs and replays vary), slow
    examples allowed."""
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


class StoreMachine(RuleBasedStateMachine):
    """A hypothesis state machine over one broker on a ``SimulatedStore`` (RAM budget
    ``BUDGET`` bytes), closed at the end of each example so its threads stop. Its rules
    checkpoint the index and compact the journal (records rewritten keep their LSNs, so
    order keys and what the model expects stay)."""

    BUDGET = 64 << 20
    OPTS = MODEL_OPTS

    def __init__(self) -> None:
        super().__init__()
        self.store = SimulatedStore(self.BUDGET, self.OPTS)
        self.broker = self.store.open()

    @rule()
    def checkpoint(self) -> None:
        self.broker.checkpoint()

    @rule()
    def compact(self) -> None:
        if self.broker.compact(force=True).compacted:
            event("compaction ran")

    def reopen_after_crash(self, keep_all: bool, seed: int, lose_index: bool) -> None:
        self.broker = self.store.crash(self.broker, keep_all, seed, lose_index)

    def teardown(self) -> None:
        self.broker.close()


def check_store(broker: Broker, queue: str, sent: Iterable[int], acked: Set[int],
                delivered: Dict[int, int], maybe: Set[int],
                acking: Optional[Set[int]] = None) -> List[int]:
    """Check one queue whose message bodies are ``b"<n>"``; return the numbers present.

    Args:
        sent: numbers reported durably sent.
        acked: numbers whose ack was reported durable.
        delivered: number -> highest delivery count a consumer saw.
        maybe: numbers sent or acked with no report yet (either outcome is fine).
        acking: when given, every number whose ack was asked for (returned or not): a number
            a consumer saw must then be present unless it is here, even if its send had not
            returned (a message is handed out only once it is durable).
    """
    session = broker.session()
    try:
        seen = [(int(m.message.body), m.delivery_count)
                for m in session.create_browser(queue)]
    finally:
        session.close()
    numbers = [n for n, _ in seen]
    assert len(numbers) == len(set(numbers)), "a message is duplicated"
    assert numbers == sorted(numbers), "queue order is not send order"
    present = set(numbers)
    lost = [n for n in sent if n not in present and n not in acked and n not in maybe]
    assert not lost, f"durable messages lost: {lost[:10]}"
    back = [n for n in present if n in acked]
    assert not back, f"acked messages came back: {back[:10]}"
    known = set(sent) | maybe
    foreign = [n for n in present if n not in known]
    assert not foreign, f"messages never sent: {foreign[:10]}"
    if acking is not None:
        gone = [n for n in delivered if n not in present and n not in acking]
        assert not gone, f"messages handed out before they were durable are gone: {gone[:10]}"
    for n, count in seen:
        if n in delivered:
            assert count >= delivered[n], f"message {n} lost its delivery count"
    return numbers
