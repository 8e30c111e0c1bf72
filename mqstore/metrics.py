"""Prometheus metrics for an open broker (``tools.integrations.metrics``). Needs
``pip install mqstore[metrics]``."""

from mqstore.tools.integrations.metrics import BrokerCollector, serve_metrics

__all__ = ["BrokerCollector", "serve_metrics"]
