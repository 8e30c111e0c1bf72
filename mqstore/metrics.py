"""Prometheus metrics for an open broker (``tools.metrics``). Needs
``pip install mqstore[metrics]``."""

from tools.metrics import BrokerCollector, serve_metrics

__all__ = ["BrokerCollector", "serve_metrics"]
