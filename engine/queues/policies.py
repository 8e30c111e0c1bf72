"""Queue policies: small objects composed into a ``Queue`` that decide, never write.

Each hook returns the references to remove with the reason to journal as a fact (an ACK with
that reason), so replay never re-decides anything.

- ``RingPolicy`` (Artemis ring queues): after a reference is added at the tail or put
  back at the head, if more than ring-size references are *ready* (in-delivery and scheduled
  ones do not count), the head is removed: on a tail add the oldest message, on a head add the
  message just put back ("it will keep B, C, & D and delete A"). One removal per add, so lowering
  ring-size at run time never deletes eagerly: the queue stops growing and shrinks as consumed.
- ``LastValuePolicy`` (Artemis addressing §4.9): a message whose last-value property equals a queued
  one's replaces it (the old one is removed, the new one joins at the tail); a message without
  the property is queued normally, never replaced and never replaces.
- ``QpidLastValuePolicy`` (Qpid queues "Last value queues"): keyed by the ``qpid.LVQ_key``
  property, a new message replaces the queued one *in place* (``in_place``: it takes that
  one's position) unless that one was acquired or, for ``last_value_queue``, browsed: then the
  new one joins the tail and is the one the next message with that key replaces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Protocol, Tuple

from ..model import QPID_LVQ_KEY, QpidLvq
from mqstore.recovery.schema import AckReason

if TYPE_CHECKING:  # pragma: no cover
    from .queue import MessageRef, Queue  # for type hints only (no import at run time)

Removal = Tuple["MessageRef", str]


class QueuePolicy(Protocol):
    """A composable queue behaviour (ring size, last value...) composed into a ``Queue``.

    ``before_add`` runs before a reference joins the tail, ``after_add`` after it joined the
    tail or went back to the head; both return the references to remove with the reason to
    journal. ``removed`` is told of every reference leaving the ready list. ``now_ms`` is
    passed in: policies never read the clock or touch files.
    """

    def before_add(self, queue: "Queue", ref: MessageRef, now_ms: int
                   ) -> List[Tuple[MessageRef, str]]: ...

    def after_add(self, queue: "Queue", ref: MessageRef, now_ms: int
                  ) -> List[Tuple[MessageRef, str]]: ...

    def removed(self, ref: MessageRef) -> None: ...


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

    def superseded(self, refs: Iterable["MessageRef"]) -> List["MessageRef"]:
        """Those of ``refs`` (a queue's, loaded at open) whose key value a newer reference
        holds now: each would have been replaced had its delivery's end been journaled."""
        out = []
        for ref in refs:
            value = self._value(ref)
            if value is not None and self.latest.get(value) is not ref:
                out.append(ref)
        return out

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


class QpidLastValuePolicy(LastValuePolicy):
    """Qpid last-value queue (``QpidLvq``): ``latest`` maps a key value to the one reference
    a new message with that value may replace, the newest not accessed; acquiring it
    (``consumer`` set) or, unless ``no_browse``, browsing it (``browsed``) takes it out of the
    running. A reference given back (released, rolled back) is replaced by a newer one with its
    key, else it is the latest again (Qpid's MessageMap release). ``before_add`` (a scheduled
    or paged message joining) replaces as Artemis does: removal, then the tail.

    Args:
        no_browse: ``last_value_queue_no_browse``: browsing protects nothing.
    """

    def __init__(self, no_browse: bool) -> None:
        super().__init__(QPID_LVQ_KEY)
        self.no_browse = no_browse

    def in_place(self, queue: "Queue", ref: "MessageRef") -> Optional["MessageRef"]:
        """A new message arrives: the reference it replaces in place, or ``None`` (it joins
        the tail). It is the latest of its key from now on either way."""
        value = self._value(ref)
        if value is None:
            return None
        old = self.latest.get(value)
        self.latest[value] = ref
        if old is not None and old is not ref and old.consumer is None and \
                old.queue is queue and old.in_queue:
            return old
        return None

    def browsed(self, ref: "MessageRef") -> None:
        """A browser (or a non-destructive consumer) saw ``ref``: the next message with its
        key does not replace it (``last_value_queue``; ``_no_browse`` ignores browsing)."""
        if self.no_browse:
            return
        value = self._value(ref)
        if value is not None and self.latest.get(value) is ref:
            del self.latest[value]


def build_policies(config: Any) -> List[Any]:
    """The policies a queue configuration asks for, in application order."""
    policies: List[Any] = []
    if config.qpid_lvq is not None:
        policies.append(QpidLastValuePolicy(QpidLvq(config.qpid_lvq) == QpidLvq.LVQ_NO_BROWSE))
    if config.last_value_key:
        policies.append(LastValuePolicy(config.last_value_key))
    if config.ring_size is not None and config.ring_size >= 0:
        policies.append(RingPolicy(config.ring_size))
    return policies
