"""Journal records as entries: the rows offline tools and the Spark source show.

A record is one entry, except a TX record, which is one entry per message and per ack inside
it, with ``transaction_id`` set, so counting MESSAGE or ACK entries counts messages and acks
whether they were sent in a transaction or not. Queue ids are turned into names with a map the
caller builds (``queue_names``); a MESSAGE routed to several queues names them comma-separated.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional

from recovery.schema import RecordKind, kind_name

COLUMNS = ("record_kind", "transaction_id", "message_id", "address", "queue", "durable",
           "timestamp", "expiration", "scheduled_time", "delivery_count", "properties",
           "body_size", "body")


def _props(p: Mapping[str, Any]) -> Dict[str, str]:
    return {str(k): (v.hex() if isinstance(v, (bytes, bytearray)) else str(v))
            for k, v in (p or {}).items()}


def _blank() -> Dict[str, Any]:
    return dict.fromkeys(COLUMNS)


def _message(p: Mapping[str, Any], names: Mapping[int, str], with_body: bool
             ) -> Dict[str, Any]:
    e = _blank()
    body = p.get("body", b"")
    e.update(record_kind="MESSAGE", message_id=int(p.get("mid", 0)), address=p.get("addr"),
             queue=",".join(names.get(q, f"#{q}") for q in p.get("q", ())), durable=True,
             timestamp=int(p.get("ts", 0)) or None, expiration=int(p.get("exp", 0)) or None,
             properties=_props(p.get("props")), body_size=len(body),
             body=bytes(body) if with_body else None)
    return e


def _ack(p: Mapping[str, Any], names: Mapping[int, str]) -> Dict[str, Any]:
    e = _blank()
    e.update(record_kind="ACK", message_id=int(p.get("m", 0)),
             queue=names.get(int(p.get("q", 0)), f"#{p.get('q')}"),
             properties={"reason": str(p.get("r", ""))})
    return e


def expand(kind: int, payload: Any, names: Mapping[int, str], with_body: bool = False
           ) -> Iterator[Dict[str, Any]]:
    """The entries of one record (see the module docstring)."""
    if not isinstance(payload, dict):
        e = _blank()
        e["record_kind"] = kind_name(kind)
        yield e
        return
    if kind == RecordKind.MESSAGE:
        yield _message(payload, names, with_body)
    elif kind == RecordKind.ACK:
        yield _ack(payload, names)
    elif kind == RecordKind.TX:
        txid = int(payload.get("tx", 0))
        for m in payload.get("msgs", ()):
            e = _message(m, names, with_body)
            e["transaction_id"] = txid
            yield e
        for a in payload.get("acks", ()):
            e = _ack(a, names)
            e["transaction_id"] = txid
            yield e
    else:
        e = _blank()
        e["record_kind"] = kind_name(kind)
        if kind == RecordKind.DELIVERY:
            e.update(message_id=int(payload.get("m", 0)),
                     queue=names.get(int(payload.get("q", 0)), f"#{payload.get('q')}"),
                     delivery_count=int(payload.get("n", 0)))
        elif kind in (RecordKind.QUEUE_ADD, RecordKind.QUEUE_DEL, RecordKind.QUEUE_UPDATE):
            e.update(queue=payload.get("name") or names.get(int(payload.get("id", 0))),
                     address=payload.get("addr"),
                     properties=_props(payload.get("cfg")) if "cfg" in payload else None)
        elif kind in (RecordKind.ADDRESS_ADD, RecordKind.ADDRESS_DEL):
            e.update(address=payload.get("name"),
                     properties={"routing_types": ",".join(payload.get("rt", ()))}
                     if "rt" in payload else None)
        elif kind == RecordKind.SETTINGS:
            e.update(address=payload.get("match"),
                     properties=_props(payload.get("settings") or {}))
        yield e


def queue_names(records: Any) -> Dict[int, str]:
    """Queue id -> name from the QUEUE_ADD records among ``(kind, payload)`` pairs."""
    out: Dict[int, str] = {}
    for kind, payload in records:
        if kind == RecordKind.QUEUE_ADD and isinstance(payload, dict):
            out[int(payload["id"])] = str(payload["name"])
    return out


def names_from_image(image: Any) -> Dict[int, str]:
    """Queue id -> name of the queues an image holds."""
    return {q.id: q.name for q in image.queues.values()}


def kinds() -> List[str]:
    """Every entry kind name."""
    return [k.name for k in RecordKind if k != RecordKind.TX]


__all__ = ["COLUMNS", "expand", "queue_names", "names_from_image", "kinds", "Optional"]
