"""Queue policies: small objects composed into a ``Queue`` that decide, never write.

Each hook returns the references to remove with the reason to journal as a fact (an ACK with
that reason), so replay never re-decides anything.

- ``RingPolicy`` (seed 000_721345e89d5d1b64.txt): after a reference is added at the tail or put
  back at the head, if more than ring-size references are *ready* (in-delivery and scheduled
  ones do not count), the head is removed: on a tail add the oldest message, on a head add the
  message just put back ("it will keep B, C, & D and delete A"). One removal per add, so lowering
  ring-size at run time never deletes eagerly: the queue stops growing and shrinks as consumed.
- ``LastValuePolicy`` (seed 004 §4.9): a message whose last-value property equals a queued
  one's replaces it (the old one is removed, the new one joins at the tail); a message without
  the property is queued normally, never replaced and never replaces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from recovery.schema import AckReason

if TYPE_CHECKING:  # pragma: no cover
    from engine.queue import MessageRef, Queue  # for type hints only (no import at run time)

Removal = Tuple["MessageRef", str]


class RingPolicy:
    """Keep at most ``size`` ready references (size >= 0)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def before_add(self, queue: "Queue", ref: "MessageRef", now_ms: int) -> List[Removal]:
        return []

    def after_add(self, queue: "Queue", ref: "MessageRef", now_ms: int) -> List[Removal]:
        if queue.ready_count() > self.size:
            head = queue.first()
            if head is not None:
                return [(head, AckReason.EVICTED.value)]
        return []

    def removed(self, ref: "MessageRef") -> None:
        pass


class LastValuePolicy:
    """Replace a queued message that has the same value of property ``key``."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.latest: Dict[Any, "MessageRef"] = {}

    def _value(self, ref: "MessageRef") -> Optional[Any]:
        props = ref.msg.properties
        return props.get(self.key) if self.key in props else None

    def before_add(self, queue: "Queue", ref: "MessageRef", now_ms: int) -> List[Removal]:
        value = self._value(ref)
        if value is None:
            return []
        old = self.latest.get(value)
        self.latest[value] = ref
        if old is not None and old is not ref and old.consumer is None and old.queue is queue \
                and old.in_queue:
            return [(old, AckReason.REPLACED.value)]
        return []

    def after_add(self, queue: "Queue", ref: "MessageRef", now_ms: int) -> List[Removal]:
        return []

    def removed(self, ref: "MessageRef") -> None:
        value = self._value(ref)
        if value is not None and self.latest.get(value) is ref:
            del self.latest[value]

    def returned(self, ref: "MessageRef") -> List[Removal]:
        """A delivered reference comes back: a newer value replaces it, else it is latest."""
        value = self._value(ref)
        if value is None:
            return []
        newer = self.latest.get(value)
        if newer is not None and newer is not ref and newer.in_queue:
            return [(ref, AckReason.REPLACED.value)]
        self.latest[value] = ref
        return []


def build_policies(config: Any) -> List[Any]:
    """The policies a queue configuration asks for, in application order."""
    policies: List[Any] = []
    if config.last_value_key:
        policies.append(LastValuePolicy(config.last_value_key))
    if config.ring_size is not None and config.ring_size >= 0:
        policies.append(RingPolicy(config.ring_size))
    return policies
