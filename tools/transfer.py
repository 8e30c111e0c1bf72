"""``mqstore export`` / ``mqstore import``: the live state of a store as JSON Lines.

One JSON object per line, keys sorted, in this order: address settings (by match), addresses
and queues (in creation order, with their configuration), then every live message once, in
journal order, with the queues it is on and its delivery count on each, and, when it waits in
some queues' scheduled buffers, its due time on each of those (``"scheduled": {queue: ms}``,
left out when none), and the queues on whose head it was put when it came due (``"head":
[queue]``, left out when none: it stays before those that come due after it). Bodies are base64;
property values that are bytes are written as ``{"$bytes": base64}``. Importing into an empty
directory and exporting again gives an identical file (tested). Internal ids are not exported.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from typing import Any, Callable, Dict, IO, Iterator, List, Optional, Tuple

from mqstore.engine import Broker, Message, QueueConfig, RoutingType
from mqstore.engine.config.settings import AddressSettings
from mqstore.journal import MqStoreError
from mqstore.recovery.moves import is_head_order
from mqstore.recovery.schema import body_in
from .offline import OfflineStore

FORMAT = "mqstore-export/1"


def _enc_props(props: Dict[str, Any]) -> Dict[str, Any]:
    return {k: ({"$bytes": base64.b64encode(v).decode()} if isinstance(v, (bytes, bytearray))
                else v) for k, v in props.items()}


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
    scheduled: Dict[int, Dict[str, int]] = {}
    head: Dict[int, List[str]] = {}
    for q in sorted(img.queues.values(), key=lambda q: q.id):
        for r in img.refs(q.id):
            on.setdefault(r.mid, []).append((r.order, q.name, r.delivery_count))
            if is_head_order(r.order):  # came due and was put on the head
                head.setdefault(r.mid, []).append(q.name)
        for r in img.all_scheduled(q.id):
            on.setdefault(r.mid, []).append((r.order, q.name, r.delivery_count))
            scheduled.setdefault(r.mid, {})[q.name] = r.at
    for mid in sorted(on, key=lambda m: min(o for o, _n, _c in on[m])):
        m = img.message(mid)
        assert m is not None
        body = body_in(store.journal.read(m.location).payload, m.slot)
        line = {"type": "message", "address": m.address,
                "queues": {name: count for _o, name, count in on[mid]},
                "properties": _enc_props(m.properties), "priority": m.priority,
                "timestamp": m.timestamp, "expiration": m.expiration,
                "body": base64.b64encode(body).decode()}
        if mid in scheduled:
            line["scheduled"] = scheduled[mid]
        if mid in head:
            line["head"] = head[mid]
        yield line


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


class ImportFormatError(MqStoreError):
    """A line of an export file is not what ``mqstore import`` reads (bad JSON, a missing or
    mistyped field, undecodable base64, an unknown ``type``, a negative delivery count).

    Attributes:
        line: the 1-based line number.
    """

    def __init__(self, line: int, why: str) -> None:
        self.line = line
        super().__init__(f"line {line} of the export: {why}",
                         hint="nothing was imported; fix or re-create the export file")


def _b64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise TypeError("base64 text is needed")
    return base64.b64decode(text, validate=True)


def _dec_props(props: Any) -> Dict[str, Any]:
    if not isinstance(props, dict):
        raise TypeError("properties is an object")
    return {k: (_b64(v["$bytes"]) if isinstance(v, dict) and set(v) == {"$bytes"} else v)
            for k, v in props.items()}


def parse_line(number: int, text: str) -> Tuple[str, Any]:
    """One export line as an operation: ("header", None), ("settings", (match, settings)),
    ("address", (name, routing types, auto)), ("queue", QueueConfig) or ("message",
    (address, {queue: delivery count}, Message, {queue: scheduled time in ms}, [queues it came
    due on])); field values are checked as the broker checks them.

    Raises:
        ImportFormatError: names the line and what is wrong.
    """
    try:
        line = json.loads(text)
        if not isinstance(line, dict):
            raise TypeError("a line is a JSON object")
        kind = line.get("type")
        if number == 1 or kind == "header":
            if number != 1 or kind != "header" or line.get("format") != FORMAT:
                raise ValueError(f"not an mqstore export header ({text[:60]!r})")
            return "header", None
        if kind == "settings":
            return kind, (line["match"], AddressSettings.from_record(line["settings"]))
        if kind == "address":
            return kind, (line["name"], {RoutingType(r) for r in line["routing_types"]},
                          line["auto_created"])
        if kind == "queue":
            return kind, QueueConfig.from_record(line["name"], line["address"],
                                                 line["routing_type"], line["config"])
        if kind == "message":
            counts = line["queues"]
            if not isinstance(counts, dict) or not counts or any(
                    type(c) is not int or c < 0 for c in counts.values()):
                raise ValueError("queues maps each queue to a delivery count >= 0")
            msg = Message(_b64(line["body"]), _dec_props(line["properties"]), True,
                          line["priority"], line["expiration"], line["timestamp"])
            scheduled = line.get("scheduled", {})
            if not isinstance(scheduled, dict) or any(
                    q not in counts or type(at) is not int or at <= 0
                    for q, at in scheduled.items()):
                raise ValueError("scheduled maps some of its queues to a time > 0 (ms)")
            head = line.get("head", [])
            if not isinstance(head, list) or any(q not in counts or q in scheduled
                                                 for q in head):
                raise ValueError("head lists some of its queues, none of them scheduled")
            return kind, (line["address"], counts, msg, scheduled, head)
        raise ValueError(f"unknown type {kind!r}")
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # json, base64, fields
        why = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ImportFormatError(number, why[:300]) from None
    except RecursionError:  # json nests recursively: a line no export writes
        raise ImportFormatError(number, "JSON nested too deeply for an export line") from None


def import_store(lines: IO[str], directory: str,
                 progress: Optional[Callable[[int], None]] = None, batch: int = 1000) -> int:
    """Create a store in ``directory`` (missing or empty) from an export. The store is built
    in a temporary directory beside it and renamed into place at the end, so a failure leaves
    nothing behind and a retry can run at once.

    Returns:
        The number of messages imported.

    Raises:
        MqStoreError: ``directory`` is not empty. ImportFormatError: a bad line. Any error of
            the broker for a value it refuses (a queue of another address...). Nothing is
            created in any of these cases.
    """
    if os.path.exists(directory) and (not os.path.isdir(directory) or os.listdir(directory)):
        raise MqStoreError(f"{directory} is not an empty directory",
                           hint="import into an empty or new directory")
    target = os.path.abspath(directory)
    tmp = f"{target}.import-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        n = _build(lines, tmp, progress, batch)
        if os.path.exists(target):
            os.rmdir(target)  # empty, checked above
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fd = os.open(os.path.dirname(target), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return n


def _numbered(lines: IO[str]) -> Iterator[Tuple[int, str]]:
    """The lines of an export file, numbered from 1; a file that is not UTF-8 text is an
    ``ImportFormatError`` naming the first line that is not."""
    number = 0
    try:
        for number, text in enumerate(lines, 1):
            yield number, text
    except UnicodeDecodeError:
        raise ImportFormatError(number + 1, "not UTF-8 text (an export file is JSON Lines)"
                                ) from None


def _build(lines: IO[str], directory: str, progress: Optional[Callable[[int], None]],
           batch: int) -> int:
    broker = Broker.open(directory, expiry_scan_ms=0)
    n = 0
    pending: List[Tuple[str, Dict[str, int], Message, Dict[str, int], List[str]]] = []
    seen_header = False
    try:
        for number, text in _numbered(lines):
            if not text.strip():
                continue
            kind, op = parse_line(number, text)
            seen_header = True
            if kind == "settings":
                broker.set_address_settings(*op)
            elif kind == "address":
                broker.create_address(op[0], op[1], auto_created=op[2])
            elif kind == "queue":
                broker.create_queue(op)
            elif kind == "message":
                pending.append(op)
                if len(pending) >= batch:
                    broker.restore_messages(pending)
                    n += len(pending)
                    pending = []
                    if progress:
                        progress(n)
        if not seen_header:
            raise ImportFormatError(1, "the file is empty")
        if pending:
            broker.restore_messages(pending)
            n += len(pending)
    finally:
        broker.close()
    return n
