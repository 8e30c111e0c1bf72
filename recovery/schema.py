"""The record schema: the kinds of journal records mqstore writes and their payload fields.

The journal stores opaque ``(kind, msgpack payload)`` records; this table gives them meaning. The
engine writes through these constructors and recovery folds records by the same table, so both
sides use one definition. Payloads are msgpack maps with short keys:

==========  ===============================================================================
kind        payload
==========  ===============================================================================
ADDRESS_ADD ``{"id", "name", "rt": [routing types], "auto": bool}``
ADDRESS_DEL ``{"id"}``
QUEUE_ADD   ``{"id", "name", "addr": address name, "rt": routing type, "cfg": {config}}``
QUEUE_DEL   ``{"id", "ts": ms, "name", "addr", "rt"}`` (ts, name, addr, rt: since deleted queues
            are listed; the record stays live while its queue is listed)
MESSAGE     ``{"mid", "addr", "q": [queue ids], "body": bytes, "props": {}, "ts": ms,
            "exp": ms or 0, "prio": 0-9, "pg": true when its address paged it, "at": ms when
            scheduled}`` (one record per send: the body once, and the queues it was routed
            to, so routing is atomic); with ``"at"`` its references wait in the queues'
            scheduled buffers until a DUE record puts them on the queues (Artemis ring queues §3)
ACK         ``{"q", "m", "r": reason}`` removes a reference (acked, rejected, ...); a tombstone
DELIVERY    ``{"q", "m", "n": delivery count}``, written before a delivery is handed out;
            with ``"r": true`` when the delivery ended unsettled (cancel, rollback, recover:
            the message is back on its queue; with ``"at": ms`` too, it went back through the
            scheduled buffer, due then: a redelivery delay); the last one of a reference says
            whether it was in delivery, so reopening ends exactly those deliveries, as a
            cancel does
TX          ``{"tx", "msgs": [MESSAGE payloads], "acks": [ACK payloads]}``: a whole committed
            transaction in one record, so it is durable and visible all together or not at all
            (also used for a broker decision with two sides, e.g. expiry: ack + moved copy)
SETTINGS    ``{"match": pattern, "settings": {...} or None}``: an address-settings entry set
            or removed
QUEUE_UPD   ``{"id", "cfg": {...}}``: a queue's configuration changed at run time (ring size)
DEPAGE      ``{"addr": address, "upto": [lsn, slot], "acks": [ACK payloads]}``: the address's
            paged messages up to that order key joined their queues; the acks are what the
            queues' policies removed as they joined (ring, last value), in the same record
DUE         ``{"q": queue id, "m": [message ids], "acks": [ACK payloads]}``: scheduled
            references of the queue came due and joined its head in that order (order keys
            ``(0, lsn << 20 | i)``: before every waiting message, after earlier DUE ones); the
            acks are what its policies removed (a full ring: the scheduled message itself)
==========  ===============================================================================
"""

from __future__ import annotations

import enum
from typing import Any, Dict, Iterable, List, Mapping, Optional


class RecordKind(enum.IntEnum):
    """Journal record kinds (u8 on disk; never renumber)."""

    ADDRESS_ADD = 1
    ADDRESS_DEL = 2
    QUEUE_ADD = 3
    QUEUE_DEL = 4
    MESSAGE = 5
    ACK = 6
    DELIVERY = 7
    TX = 8
    SETTINGS = 9
    QUEUE_UPDATE = 10
    DEPAGE = 11
    DUE = 12


class AckReason(str, enum.Enum):
    """Why a reference left a queue (written in ACK records as a fact, never re-decided)."""

    ACKED = "acked"
    REJECTED = "rejected"
    KILLED = "killed"          # dropped after max delivery attempts with no dead-letter address
    EXPIRED = "expired"
    REPLACED = "replaced"      # last-value replacement
    EVICTED = "evicted"        # ring queue eviction
    MOVED = "moved"            # moved to another queue by management (engine.control)
    ORPHANED = "orphaned"      # left on a deleted queue (moved to its alternate address or not)


def address_add(aid: int, name: str, routing_types: Iterable[str], auto: bool) -> Dict[str, Any]:
    """ADDRESS_ADD payload."""
    return {"id": aid, "name": name, "rt": sorted(routing_types), "auto": auto}


def queue_add(qid: int, name: str, address: str, routing_type: str,
              config: Mapping[str, Any]) -> Dict[str, Any]:
    """QUEUE_ADD payload; ``config`` holds the queue's settings (durable, auto-delete...)."""
    return {"id": qid, "name": name, "addr": address, "rt": routing_type, "cfg": dict(config)}


def by_id(ident: int) -> Dict[str, Any]:
    """ADDRESS_DEL payload."""
    return {"id": ident}


def queue_deleted(ident: int, name: str, address: str, routing_type: str, ts: int
                  ) -> Dict[str, Any]:
    """QUEUE_DEL payload: the queue, and when it was deleted (ms since the epoch)."""
    return {"id": ident, "ts": ts, "name": name, "addr": address, "rt": routing_type}


def message(mid: int, address: str, queues: List[int], body: bytes,
            properties: Mapping[str, Any], timestamp: int, expiration: int,
            priority: int, paged: bool = False, at: int = 0) -> Dict[str, Any]:
    """MESSAGE payload (also the element type of TX ``msgs``). Times are ms since the epoch;
    ``paged`` when the message's address pages it; ``at``: its scheduled delivery time (0:
    none)."""
    out = {"mid": mid, "addr": address, "q": queues, "body": body, "props": dict(properties),
           "ts": timestamp, "exp": expiration, "prio": priority}
    if paged:
        out["pg"] = True
    if at:
        out["at"] = at
    return out


def ack(qid: int, mid: int, reason: str) -> Dict[str, Any]:
    """ACK payload (also the element type of TX ``acks``)."""
    return {"q": qid, "m": mid, "r": reason}


def delivery(qid: int, mid: int, count: int, returned: bool = False, at: int = 0
             ) -> Dict[str, Any]:
    """DELIVERY payload: the reference's delivery count after this delivery; ``returned``
    when the delivery ended unsettled and the message went back to its queue, through the
    scheduled buffer, due at ``at`` ms since the epoch, when ``at`` is set."""
    out: Dict[str, Any] = {"q": qid, "m": mid, "n": count}
    if returned:
        out["r"] = True
        if at:
            out["at"] = at
    return out


def due(qid: int, mids: List[int], acks: List[Dict[str, Any]]) -> Dict[str, Any]:
    """DUE payload: queue ``qid``'s scheduled references to ``mids`` joined its head, in that
    order; ``acks``: what its policies removed as they joined."""
    return {"q": qid, "m": list(mids), "acks": acks}


def tx(txid: int, messages: List[Dict[str, Any]], acks: List[Dict[str, Any]]) -> Dict[str, Any]:
    """TX payload: every send and ack of one committed transaction."""
    return {"tx": txid, "msgs": messages, "acks": acks}


def body_in(payload: Mapping[str, Any], slot: int) -> bytes:
    """The body of a message in the payload of the record holding it: a MESSAGE record
    (``slot`` -1) or the ``slot``-th message of a TX record."""
    return payload["msgs"][slot]["body"] if slot >= 0 else payload["body"]


def settings(match: str, values: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """SETTINGS payload: ``values`` None removes the entry for ``match``."""
    return {"match": match, "settings": None if values is None else dict(values)}


def queue_update(qid: int, config: Mapping[str, Any]) -> Dict[str, Any]:
    """QUEUE_UPDATE payload: the queue's whole configuration after the change."""
    return {"id": qid, "cfg": dict(config)}


def depage(address: str, upto: Any, acks: List[Dict[str, Any]]) -> Dict[str, Any]:
    """DEPAGE payload: ``address``'s paged messages up to order key ``upto`` joined their
    queues; ``acks``: what the queues' policies removed meanwhile."""
    return {"addr": address, "upto": [int(upto[0]), int(upto[1])], "acks": acks}


def field(payload: Mapping[str, Any], key: str, default: Optional[Any] = None) -> Any:
    """A payload field, or ``default`` when absent (older or newer writers)."""
    return payload.get(key, default)
