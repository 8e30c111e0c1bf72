"""Message groups (Artemis addressing §4.8; Artemis message grouping): the messages of one group go
to one consumer of a queue, in order, while that consumer lives, and to one queue of an anycast
address with several queues (sharded queues).

A message's group is its ``_AMQ_GROUP_ID`` property (Artemis core), else its ``JMSXGroupID``
(JMS; ``Message.group_id`` sets the first). The first consumer handed a message of a group
owns the group; the other consumers of the queue pass over its messages and take the next
ones. When the owner closes, its groups are free again, and what it held unacked goes back to
the head of the queue for the next consumer, as in Artemis. On an anycast address, the first
queue a group's message is routed to (round-robin among the queues whose filter takes it)
gets every later message of that group.

Assignments live in RAM, as in a single Artemis broker: after a restart the groups are
assigned again as consumers come (the messages keep their group ids, durably). Non-destructive
queues hand out messages without taking them, so groups do not apply to them.

Passing over owned groups costs a scan from the head to the first message the consumer may
take (Artemis's consumers iterate the queue the same way); a queue with no owned group takes
the head as usual.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from ..filters.expression import Filter
from ..model import GROUP_ID
from .refs import MessageRef
from .selection import Queue, Selection

__all__ = ["GROUP_ID", "Groups", "group_of", "take_for"]

JMS_GROUP_ID = "JMSXGroupID"


def group_of(msg: Any) -> Optional[str]:
    """The group of a message (anything with ``properties``), or ``None``: a non-empty str
    ``_AMQ_GROUP_ID``, else ``JMSXGroupID``."""
    props = msg.properties
    got = props.get(GROUP_ID)
    if got is None:
        got = props.get(JMS_GROUP_ID)
    return got if got.__class__ is str and got else None


class Groups:
    """Which consumer each message group of one queue is pinned to.

    Attributes:
        owners: group id -> the consumer that owns it.
    """

    __slots__ = ("owners",)

    def __init__(self) -> None:
        self.owners: Dict[str, Any] = {}

    def may_take(self, msg: Any, consumer: Any) -> bool:
        """Whether ``consumer`` may be handed ``msg``: no group, a free one, or its own."""
        group = group_of(msg)
        return group is None or self.owners.get(group, consumer) is consumer

    def took(self, msg: Any, consumer: Any) -> None:
        """``consumer`` was handed ``msg``: a free group becomes its own."""
        group = group_of(msg)
        if group is not None:
            self.owners.setdefault(group, consumer)

    def release(self, consumer: Any) -> bool:
        """``consumer`` closed: its groups are free. Returns whether it owned any."""
        mine = [g for g, c in self.owners.items() if c is consumer]
        for g in mine:
            del self.owners[g]
        return bool(mine)


class _MayTake:
    """A selector and the group rule together, as a filter (evaluated when asked)."""

    __slots__ = ("text", "_groups", "_consumer", "_selector")

    def __init__(self, groups: Groups, consumer: Any, selector: Optional[Filter]) -> None:
        self.text = "" if selector is None else selector.text
        self._groups = groups
        self._consumer = consumer
        self._selector = selector

    def matches(self, msg: Any) -> bool:
        return self._groups.may_take(msg, self._consumer) and \
            (self._selector is None or self._selector.matches(msg))


def take_for(queue: Queue, groups: Groups, consumer: Any,
             selector: Optional[Filter]) -> Optional[MessageRef]:
    """Take the first reference of ``queue``, in queue order, that ``consumer`` may be handed
    (its group free or its own, its selector matching), while some group is owned: the head
    in RAM, then the index after the horizon, read from the horizon on."""
    may = _MayTake(groups, consumer, selector)
    if not queue.ready:
        queue.refill()
    first = next((ref for ref in queue.ready if may.matches(ref.msg)), None)  # from the head
    if first is not None and (queue.horizon is None or first.order <= queue.horizon):
        queue.take_ref(first)  # before everything the index holds
        return first
    once = Selection(may)  # type: ignore[arg-type]
    for ref in ([first] if first is not None else []) + \
            [ref for ref in queue.tail if may.matches(ref.msg)]:
        once.targets.insert_ordered(ref)
    return once.take(queue)  # the index read from the horizon on, merged with those
