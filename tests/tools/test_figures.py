"""The report's liveness walk: an ack keeps its record live while the record it cancels in is
live, along chains of any length within a segment, and never from a dead end."""

from __future__ import annotations

from mqstore.tools.figures import pinned


def test_a_chain_of_acks_keeps_every_record_on_it_live_and_nothing_else() -> None:
    chain = [(i + 1, i) for i in range(1, 500)]  # record i+1 acks a message of record i
    assert pinned({1}, chain) == set(range(1, 501))
    assert pinned(set(), chain) == set()  # the chain ends in a dead record: all dead
    assert pinned({7}, [(8, 9), (9, 8), (10, 7)]) == {7, 10}  # a cycle of dead records stays dead
