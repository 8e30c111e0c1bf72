"""Prometheus metrics (issue 17): per-queue counts and counters, address sizes, memory and
journal figures, read at each scrape; served over HTTP."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from mqstore.engine import Broker, Message, QueueConfig  # noqa: E402
from mqstore.tools.integrations.metrics import BrokerCollector, serve_metrics  # noqa: E402


def scrape(b: Broker) -> str:
    registry = CollectorRegistry()
    registry.register(BrokerCollector(b))  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def test_queue_and_broker_metrics_follow_the_store(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b, b.session() as s:
        b.create_address("orders")
        b.create_queue(QueueConfig("orders", "orders"))
        s.send_many("orders", [Message(b"x" * 10) for _ in range(5)])
        c = s.create_consumer("orders")
        c.receive(1).ack()
        held = c.receive(1)
        text = scrape(b)
        assert 'mqstore_queue_messages{address="orders",queue="orders"} 4.0' in text
        assert 'mqstore_queue_delivering{address="orders",queue="orders"} 1.0' in text
        assert 'mqstore_queue_messages_added_total{address="orders",queue="orders"} 5.0' in text
        assert ('mqstore_queue_messages_acknowledged_total{address="orders",queue="orders"} '
                '1.0') in text
        assert 'mqstore_address_size_bytes{address="orders"} 40.0' in text
        assert "mqstore_broker_failed 0.0" in text
        held.ack()
        assert 'mqstore_queue_messages{address="orders",queue="orders"} 3.0' in scrape(b)
    assert "mqstore_broker_failed 1.0" in scrape(b)  # closed: said so, no error


def test_served_over_http(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("a", "a"))
        server = serve_metrics(b, port=0)
        try:
            port = server.server_address[1]
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            assert b'mqstore_queue_messages{address="a",queue="a"} 0.0' in body
        finally:
            server.shutdown()
