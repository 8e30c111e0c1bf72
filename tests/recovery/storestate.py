"""A canonical description of a store's durable state, to compare recoveries."""

from __future__ import annotations

import json
import sys
from typing import Any, Dict

from mqstore.engine import Broker


def describe(broker: Broker) -> Dict[str, Any]:
    """Addresses, queues with configuration, and each queue's messages in order with their
    properties and delivery counts."""
    out: Dict[str, Any] = {"addresses": {}, "queues": {}}
    for name in broker.address_names():
        info = broker.address_info(name)
        out["addresses"][name] = [sorted(r.value for r in info.routing_types), sorted(info.queues)]
    session = broker.session()
    try:
        for name in broker.queue_names():
            info = broker.queue_info(name)
            msgs = [[m.message.body.decode(), m.delivery_count, m.message.properties,
                     m.message.priority, m.message.expiration]
                    for m in session.create_browser(name)]
            out["queues"][name] = {"address": info.address, "rt": info.routing_type.value,
                                   "durable": info.durable, "count": info.message_count,
                                   "messages": msgs}
    finally:
        session.close()
    return out


if __name__ == "__main__":  # print the state of a store (used from a subprocess)
    b = Broker.open(sys.argv[1])
    try:
        print(json.dumps({"state": describe(b), "index": b.recovery_report.index}))
    finally:
        b.close()
