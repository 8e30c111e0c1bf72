"""A client in another language: Node's rhea (installed from the npm registry by this test)
sends to an anycast address and receives from a multicast subscription of a served store.
Skipped, saying why, only where node or npm is absent."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mqstore import Broker, Message, QueueConfig, RoutingType, serve
from tests.waiting import PATIENCE, wait_for

CLIENT = Path(__file__).with_name("rhea") / "client.js"


@pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None,
                    reason="node and npm are not on this machine: the rhea client needs them")
def test_rhea_sends_to_an_anycast_queue_and_receives_from_a_subscription(tmp_path: Path) -> None:
    modules = tmp_path / "js"
    modules.mkdir()
    shutil.copy(CLIENT, modules / "client.js")
    subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "rhea@3"],
                   cwd=modules, check=True, timeout=PATIENCE, capture_output=True)
    broker = Broker.open(str(tmp_path / "store"), expiry_scan_ms=0)
    try:
        broker.create_address("orders", routing_types={RoutingType.ANYCAST})
        broker.create_queue(QueueConfig("orders", "orders", routing_type=RoutingType.ANYCAST))
        broker.create_address("news", routing_types={RoutingType.MULTICAST})
        with serve(broker, "127.0.0.1:0", anonymous=True) as server:
            node = subprocess.Popen(["node", "client.js", str(server.port)], cwd=modules,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                assert node.stdout is not None
                seen = []
                while {"attached": True} not in seen:  # its subscription is open
                    line = node.stdout.readline()
                    assert line, (seen, node.stderr.read() if node.stderr else "")
                    seen.append(json.loads(line))
                with broker.session() as s:
                    s.send("news", Message(b"headline"))
                out, err = node.communicate(timeout=PATIENCE)
                seen += [json.loads(x) for x in out.splitlines()]
                assert node.returncode == 0, err
            finally:
                if node.poll() is None:
                    node.kill()
                    node.wait()
            assert {"sent": "accepted"} in seen
            assert {"got": "headline", "count": 0} in seen
        with broker.session() as s:
            d = s.create_consumer("orders").receive(PATIENCE)
            assert d is not None
            assert d.message.body == b"from rhea"  # an amqp-value string, kept as UTF-8
            assert d.message.properties["lang"] == "js" and d.message.properties["n"] == 7
            d.ack()
        wait_for(lambda: broker.queue_info("orders").message_count == 0, "the ack taken")
    finally:
        broker.close()
