"""``mqstore export`` / ``mqstore import``: the live state of a store as JSON Lines.

One JSON object per line, keys sorted, in this order: address settings (by match), addresses
and queues (in creation order, with their configuration), then every live message once, in
journal order, with the queues it is on and its delivery count on each. Bodies are base64;
property values that are bytes are written as ``{"$bytes": base64}``. Importing into an empty
directory and exporting again gives an identical file (tested). Internal ids are not exported.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any, Callable, Dict, IO, Iterator, List, Optional, Tuple

from engine import Broker, Message, QueueConfig, RoutingType
from engine.settings import AddressSettings
from journal import MqStoreError
from tools.offline import OfflineStore

FORMAT = "mqstore-export/1"


def _enc_props(props: Dict[str, Any]) -> Dict[str, Any]:
    return {k: ({"$bytes": base64.b64encode(v).decode()} if isinstance(v, (bytes, bytearray))
                else v) for k, v in props.items()}


def _dec_props(props: Dict[str, Any]) -> Dict[str, Any]:
    return {k: (base64.b64decode(v["$bytes"]) if isinstance(v, dict) and "$bytes" in v else v)
            for k, v in props.items()}


def export_lines(store: OfflineStore) -> Iterator[Dict[str, Any]]:
    """The export, one object per line."""
    img = store.image
    yield {"type": "header", "format": FORMAT}
    for match in sorted(img.settings):
        yield {"type": "settings", "match": match, "settings": img.settings[match][0]}
    for a in sorted(img.addresses.values(), key=lambda a: a.id):
        yield {"type": "address", "name": a.name, "routing_types": list(a.routing_types),
               "auto_created": a.auto_created}
    for q in sorted(img.queues.values(), key=lambda q: q.id):
        yield {"type": "queue", "name": q.name, "address": q.address,
               "routing_type": q.routing_type, "config": q.config}
    on: Dict[int, List[Tuple[Tuple[int, int], str, int]]] = {}
    for q in sorted(img.queues.values(), key=lambda q: q.id):
        for r in q.refs.values():
            on.setdefault(r.mid, []).append((r.order, q.name, r.delivery_count))
    for mid in sorted(on, key=lambda m: min(o for o, _n, _c in on[m])):
        m = img.messages[mid]
        body = store.journal.read(m.location).payload
        if m.slot >= 0:
            body = body["msgs"][m.slot]
        yield {"type": "message", "address": m.address,
               "queues": {name: count for _o, name, count in on[mid]},
               "properties": _enc_props(m.properties), "priority": m.priority,
               "timestamp": m.timestamp, "expiration": m.expiration,
               "body": base64.b64encode(body["body"]).decode()}


def export_store(directory: str, out: IO[str],
                 progress: Optional[Callable[[int], None]] = None) -> int:
    """Write the export of ``directory`` to ``out``; return the number of messages."""
    n = 0
    with OfflineStore(directory) as store:
        for line in export_lines(store):
            out.write(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n")
            if line["type"] == "message":
                n += 1
                if progress and n % 1000 == 0:
                    progress(n)
    return n


def import_store(lines: IO[str], directory: str,
                 progress: Optional[Callable[[int], None]] = None, batch: int = 1000) -> int:
    """Create a store in ``directory`` (which must hold none) from an export.

    Returns:
        The number of messages imported.

    Raises:
        MqStoreError: the directory holds a store, or the file is not an export.
    """
    if os.path.exists(os.path.join(directory, "journal")):
        raise MqStoreError(f"{directory} already holds a store",
                           hint="import into an empty or new directory")
    broker = Broker.open(directory, expiry_scan_ms=0)
    n = 0
    pending: List[Tuple[str, Dict[str, int], Message]] = []
    try:
        for number, text in enumerate(lines, 1):
            if not text.strip():
                continue
            line = json.loads(text)
            kind = line.get("type")
            if number == 1 and (kind != "header" or line.get("format") != FORMAT):
                raise MqStoreError(f"not an mqstore export (line 1 is {text[:60]!r})")
            if kind == "settings":
                broker.set_address_settings(line["match"],
                                            AddressSettings.from_record(line["settings"]))
            elif kind == "address":
                broker.create_address(line["name"], {RoutingType(r) for r in
                                                     line["routing_types"]},
                                      auto_created=line["auto_created"])
            elif kind == "queue":
                broker.create_queue(QueueConfig.from_record(line["name"], line["address"],
                                                            line["routing_type"],
                                                            line["config"]))
            elif kind == "message":
                msg = Message(base64.b64decode(line["body"]), _dec_props(line["properties"]),
                              True, line["priority"], line["expiration"], line["timestamp"])
                pending.append((line["address"], line["queues"], msg))
                if len(pending) >= batch:
                    broker.restore_messages(pending)
                    n += len(pending)
                    pending = []
                    if progress:
                        progress(n)
        if pending:
            broker.restore_messages(pending)
            n += len(pending)
    finally:
        broker.close()
    return n
