"""Message groups (Artemis: a group's messages go to the consumer that got its first one, while
it lives) against a small model, with consumers coming and going and crash-and-reopen.

Queue ``g`` gets messages of groups ``A``, ``B`` or none, durable or not. Three consumer slots
open and close. A consumer that asks gets the first message of the queue whose group is free
or its own, and owns that group from then on; when it closes, what it held goes back to the
head of the queue in the order it was consumed, and its groups are free. A crash keeps the
durable messages (the held ones come back), frees every group (assignments live in RAM, as in
Artemis), and the queue is in send order again. The paging variant has the smallest RAM
budget: the queue reads its backlog from the index.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from mqstore.engine import Message, QueueConfig
from tests.engine.crashcheck import StoreMachine, model_settings

SLOTS = st.integers(0, 2)
Item = Tuple[int, Optional[str], bytes, bool]  # (seq, group, body, durable)


class GroupMachine(StoreMachine):
    def __init__(self) -> None:
        super().__init__()
        self.broker.create_address("a")
        self.broker.create_queue(QueueConfig("g", "a"))
        self.ready: List[Item] = []
        self.held: Dict[int, List[Tuple[Item, object]]] = {}  # slot -> (item, delivery)
        self.consumers: Dict[int, object] = {}
        self.owners: Dict[str, int] = {}
        self.dc: Dict[int, int] = {}
        self.seq = 0

    @rule(group=st.sampled_from(["A", "A", "B", None]), durable=st.booleans())
    def send(self, group: Optional[str], durable: bool) -> None:
        self.seq += 1
        item = (self.seq, group, b"%d:" % self.seq + b"x" * 150, durable)
        with self.broker.session(block_on_acknowledge=True) as s:
            s.send("a", Message(item[2], durable=durable, group_id=group))
        self.ready.append(item)

    @rule(slot=SLOTS)
    def open_consumer(self, slot: int) -> None:
        if slot not in self.consumers:
            self.consumers[slot] = self.broker.session(block_on_acknowledge=True).create_consumer("g")
            self.held[slot] = []

    @rule(slot=SLOTS)
    def receive(self, slot: int) -> None:
        consumer = self.consumers.get(slot)
        if consumer is None:
            return
        want = next((x for x in self.ready if x[1] is None or
                     self.owners.get(x[1], slot) == slot), None)
        d = consumer.receive(0)  # type: ignore[attr-defined]
        if want is None:
            assert d is None
            return
        assert d is not None and d.message.body == want[2], (d, want)
        if self.ready[0] is not want:
            event("passed over another consumer's group")
        self.ready.remove(want)
        self.dc[want[0]] = self.dc.get(want[0], 0) + 1
        assert d.delivery_count == self.dc[want[0]]
        if want[1] is not None:
            if want[1] not in self.owners:
                event("a group assigned")
            self.owners[want[1]] = slot
        self.held[slot].append((want, d))

    @rule(slot=SLOTS, data=st.data())
    def ack(self, slot: int, data: st.DataObject) -> None:
        if not self.held.get(slot):
            return
        h = data.draw(st.sampled_from(self.held[slot]))
        self.held[slot].remove(h)
        h[1].ack()  # type: ignore[attr-defined]

    @rule(slot=SLOTS)
    def close_consumer(self, slot: int) -> None:
        consumer = self.consumers.pop(slot, None)
        if consumer is None:
            return
        back = [item for item, _d in self.held.pop(slot) if self.dc[item[0]] < 10]
        self.ready = back + self.ready  # to the head, in the order consumed
        self.owners = {g: s for g, s in self.owners.items() if s != slot}
        consumer.session.close()  # type: ignore[attr-defined]
        if back:
            event("a closed owner's messages came back")

    @rule(keep_all=st.booleans(), seed=st.integers(0, 2**16), lose_index=st.booleans())
    def crash_and_reopen(self, keep_all: bool, seed: int, lose_index: bool) -> None:
        back = [item for held in self.held.values() for item, _d in held]
        self.ready = sorted((x for x in self.ready + back if x[3]), key=lambda x: x[0])
        self.held, self.consumers, self.owners = {}, {}, {}
        self.reopen_after_crash(keep_all, seed, lose_index)

    @invariant()
    def queue_matches(self) -> None:
        held = sum(len(h) for h in self.held.values())
        info = self.broker.queue_info("g")
        assert (info.message_count, info.delivering_count) == (len(self.ready) + held, held)
        with self.broker.session(block_on_acknowledge=True) as s:
            seen = [m.message.body for m in s.create_browser("g")]
        assert seen == [x[2] for x in self.ready]


class PagingGroupMachine(GroupMachine):
    """The smallest RAM budget: a head of two references, the rest read from the index."""

    BUDGET = 4096


for machine in (GroupMachine, PagingGroupMachine):
    machine.TestCase.settings = model_settings(200, 50)
TestGroupModel = GroupMachine.TestCase
TestPagingGroupModel = PagingGroupMachine.TestCase
