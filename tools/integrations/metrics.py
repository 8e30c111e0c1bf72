"""Prometheus metrics for an open broker (``pip install mqstore[metrics]``; prometheus-client).

``serve_metrics(broker, port)`` serves ``/metrics`` over HTTP from a thread;
``BrokerCollector(broker)`` can join a registry of your own instead. Every scrape reads the
broker's management view (``queue_info``, ``address_info``, ``statistics``) under its lock, as
Artemis's JMX/Prometheus plugin reads QueueControl: nothing is kept in between.

Metrics (labels ``queue``, ``address``):

- ``mqstore_queue_messages``, ``mqstore_queue_delivering``, ``mqstore_queue_scheduled``,
  ``mqstore_queue_paged``, ``mqstore_queue_consumers`` (gauges; Artemis MessageCount,
  DeliveringCount, ScheduledCount, ConsumerCount);
- ``mqstore_queue_messages_added_total``, ``..._acknowledged_total``, ``..._killed_total``,
  ``..._expired_total``, ``..._replaced_total`` (counters since the queue was created);
- ``mqstore_address_size_bytes``, ``mqstore_address_paged_messages``;
- ``mqstore_memory_used_bytes``, ``mqstore_memory_budget_bytes``, ``mqstore_journal_bytes``,
  ``mqstore_journal_live_bytes``, ``mqstore_journal_fsyncs_total``,
  ``mqstore_checkpoint_failures_total``, ``mqstore_index_rebuilds_total``,
  ``mqstore_broker_failed`` (1 after a storage failure).
"""

from __future__ import annotations

from typing import Any, Iterator, Tuple

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from mqstore.engine import Broker
from mqstore.journal import MqStoreError

_QUEUE_GAUGES = (("messages", "message_count", "messages on the queue, in delivery included"),
                 ("delivering", "delivering_count", "messages held by consumers, unacked"),
                 ("scheduled", "scheduled_count", "messages waiting for their delivery time"),
                 ("paged", "paged_count", "messages routed while the address pages"),
                 ("consumers", "consumer_count", "consumers attached"))
_QUEUE_COUNTERS = (("messages_added", "messages_added", "messages that entered the queue"),
                   ("messages_acknowledged", "messages_acknowledged", "messages acked"),
                   ("messages_killed", "messages_killed", "messages dead-lettered or dropped"),
                   ("messages_expired", "messages_expired", "messages that expired"),
                   ("messages_replaced", "messages_replaced",
                    "messages removed by a ring or replaced by a newer last value"))


class BrokerCollector:
    """A prometheus-client collector reading ``broker`` at each scrape."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Any]:
        """The metric families (module docstring); only the broker-wide ones once the broker
        is closed or failed."""
        b = self.broker
        try:
            b.storage.check_open()
            queues = [b.queue_info(name) for name in b.queue_names()]
            addresses = [b.address_info(name) for name in b.address_names()]
            stats = b.statistics()
        except MqStoreError:
            yield GaugeMetricFamily("mqstore_broker_failed", "1: the broker stopped (a "
                                    "storage failure, or closed)", value=1)
            return
        labels = ["queue", "address"]
        for name, field, text in _QUEUE_GAUGES:
            g = GaugeMetricFamily(f"mqstore_queue_{name}", text, labels=labels)
            for q in queues:
                g.add_metric([q.name, q.address], getattr(q, field))
            yield g
        for name, field, text in _QUEUE_COUNTERS:
            c = CounterMetricFamily(f"mqstore_queue_{name}", text, labels=labels)
            for q in queues:
                c.add_metric([q.name, q.address], getattr(q, field))
            yield c
        size = GaugeMetricFamily("mqstore_address_size_bytes", "body bytes the address holds "
                                 "(what max_size_bytes bounds)", labels=["address"])
        paged = GaugeMetricFamily("mqstore_address_paged_messages", "messages it holds as "
                                  "paged", labels=["address"])
        for a in addresses:
            size.add_metric([a.name], a.address_size)
            paged.add_metric([a.name], a.paged_count)
        yield size
        yield paged
        for name, value, text in _broker_values(stats):
            yield GaugeMetricFamily(name, text, value=value)
        yield CounterMetricFamily("mqstore_journal_fsyncs", "journal fsyncs since open",
                                  value=stats.journal.fsyncs)
        yield CounterMetricFamily("mqstore_checkpoint_failures", "index checkpoints that "
                                  "failed since open", value=stats.checkpoint_failures)
        yield CounterMetricFamily("mqstore_index_rebuilds", "damaged index found while "
                                  "running and rebuilt from the journal since open",
                                  value=stats.index_rebuilds)


def _broker_values(stats: Any) -> Tuple[Tuple[str, float, str], ...]:
    return (("mqstore_memory_used_bytes", stats.memory.used, "RAM charged to the budget"),
            ("mqstore_memory_budget_bytes", stats.memory.budget, "the RAM budget"),
            ("mqstore_journal_bytes", stats.journal.total_bytes, "journal segment bytes"),
            ("mqstore_journal_live_bytes", stats.journal.live_bytes,
             "journal bytes still needed (the rest compaction reclaims)"),
            ("mqstore_broker_failed", 1 if stats.failed else 0,
             "1: the broker stopped after a storage failure"))


def serve_metrics(broker: Broker, port: int = 9101, addr: str = "127.0.0.1") -> Any:
    """Serve ``broker``'s metrics at ``http://addr:port/metrics`` from a daemon thread.
    Returns the server (``server.shutdown()`` stops it)."""
    registry = CollectorRegistry()
    registry.register(BrokerCollector(broker))  # type: ignore[arg-type]
    server, _thread = start_http_server(port, addr, registry)
    return server
