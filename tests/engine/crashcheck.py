"""Invariants after a crash, shared by the broker's power-loss and kill -9 tests.

Given what a client observed before the crash (messages reported sent durably, messages whose ack
was reported durable, deliveries seen), the reopened store must hold: every durable send that
was not acked; no acked message; no duplicates; queue order = send order; a message delivered
before has a delivery count >= 1 (it comes back flagged redelivered).
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Set

from engine import Broker


def check_store(broker: Broker, queue: str, sent: Iterable[int], acked: Set[int],
                delivered: Dict[int, int], maybe: Set[int]) -> List[int]:
    """Check one queue whose message bodies are ``b"<n>"``; return the numbers present.

    Args:
        sent: numbers reported durably sent.
        acked: numbers whose ack was reported durable.
        delivered: number -> highest delivery count a consumer saw.
        maybe: numbers sent or acked with no report yet (either outcome is fine).
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
    for n, count in seen:
        if n in delivered:
            assert count >= delivered[n], f"message {n} lost its delivery count"
    return numbers
