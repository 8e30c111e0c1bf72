"""Prometheus metrics for an open broker (``tools.metrics``). Needs
``pip install mqstore[metrics]``."""

from mqstore.tools.metrics import BrokerCollector, serve_metrics

__all__ = ["BrokerCollector", "serve_metrics"]
